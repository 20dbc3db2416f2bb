/**
 * The relayed subscription API behind the HTTP routes: gasless subscribe (permit, then subscribeFor)
 * and the subscriber-signed lifecycle calls (pauseFor, resumeFor, cancelFor, setMaxOverageFor), plus
 * the reads a payer needs (plans, subscriptions, its own nonces).
 *
 * Every relayed call is simulated with the manager's ABI before it is sent, so a refusal comes back
 * as a precise code (docs/protocol.md, "Errors") and costs no gas. Only plans in a token this facilitator serves
 * are relayed (422 `UnsupportedToken` otherwise, before anything is sent): anyone may create a plan in
 * any token, and the keeper never renews those, so their gas would be spent on
 * subscriptions nobody collects. Relays are idempotent on the signed request:
 * a retry (say, after a timeout) gets the first attempt's result rather than an `InvalidSignature`
 * for the intent nonce the first attempt used.
 */
import {
  type Address,
  getAddress,
  type Hash,
  type Hex,
  keccak256,
  type TransactionReceipt,
  toBytes,
} from "viem";
import { z } from "zod";
import type { RelayedCall } from "../../../chain/actions/relayedCall.ts";
import { getPlan } from "../../../chain/actions/subscriptions/getPlan.ts";
import { getSubscription } from "../../../chain/actions/subscriptions/getSubscription.ts";
import { getSubscriptionNonce } from "../../../chain/actions/subscriptions/getSubscriptionNonce.ts";
import { getSubscriptionSpend } from "../../../chain/actions/subscriptions/getSubscriptionSpend.ts";
import { subscribeForRelay } from "../../../chain/actions/subscriptions/subscribeForRelay.ts";
import { subscriptionActionForRelay } from "../../../chain/actions/subscriptions/subscriptionActionForRelay.ts";
import { getPermitNonce } from "../../../chain/actions/usd/getPermitNonce.ts";
import { getTokenAllowance } from "../../../chain/actions/usd/getTokenAllowance.ts";
import { getTokenBalance } from "../../../chain/actions/usd/getTokenBalance.ts";
import { permitRelay } from "../../../chain/actions/usd/permitRelay.ts";
import { getSubscriptionIdFromReceipt } from "../../../chain/events/decodeSubscriptionEvents.ts";
import { NO_SPEND_LIMIT } from "../../../chain/signers/eip712Types.ts";
import type { FacilitatorContext } from "../../../facilitator/facilitatorContext.ts";
import { canonicalJson } from "../../../protocol/canonicalJson.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type {
  ApprovalRequest,
  ApprovalResponse,
  PlanInfo,
  SetMaxOverageRequest,
  SetSpendLimitRequest,
  SubscribeRequest,
  SubscribeResponse,
  SubscriberInfo,
  SubscriptionAction,
  SubscriptionActionRequest,
  SubscriptionActionResponse,
  SubscriptionInfo,
} from "../../../protocol/subscriptions.ts";
import { SafeIntColumnSchema } from "../../../store/columnSchemas.ts";
import { queryOneParsed } from "../../../store/queryParsed.ts";
import { toManagerError } from "./managerErrors.ts";
import type { SubscriptionIndexer } from "./subscriptionIndexer.ts";
import {
  type ChainPlan,
  type ChainSubscription,
  chainPlanToRow,
  findSubscription,
  type IndexScope,
  type PlanRow,
  planToWire,
  statusOf,
  subscriptionsOf,
  subscriptionToWire,
} from "./subscriptionRecords.ts";

export type SubscriptionService = {
  getPlan(planId: bigint): Promise<PlanInfo>;
  getSubscription(subscriptionId: bigint): Promise<SubscriptionInfo>;
  getSubscriber(subscriber: Address, token?: Address): Promise<SubscriberInfo>;
  subscribe(request: SubscribeRequest): Promise<SubscribeResponse>;
  /** Relays an owner-signed permit for the manager (a top-up of the allowance renewals are pulled from). */
  approve(request: ApprovalRequest): Promise<ApprovalResponse>;
  act(
    subscriptionId: bigint,
    action: SubscriptionAction,
    request: SubscriptionActionRequest | SetMaxOverageRequest | SetSpendLimitRequest,
  ): Promise<SubscriptionActionResponse>;
};

type ServiceContext = Pick<
  FacilitatorContext,
  "store" | "publicClient" | "gas" | "chainId" | "subscriptionManager" | "logger" | "clock" | "tokens"
>;

/** A relay that has sat `pending` this long without a transaction was abandoned (a crash): redo it. */
const STALE_RELAY_MS = 120_000;
/** Polls (every 250 ms, so 30 s) a duplicate request makes for the first one's result before it is told to retry. */
const DUPLICATE_POLLS = 120;

const RelayRowSchema = z.object({
  status: z.enum(["pending", "sent", "done"]),
  tx_hash: z
    .string()
    .regex(/^0x[0-9a-f]{64}$/)
    .nullable() as z.ZodType<Hash | null>,
  result: z.unknown().nullable(),
  age_ms: SafeIntColumnSchema,
});

export function createSubscriptionService(
  ctx: ServiceContext,
  deps: {
    indexer: Pick<SubscriptionIndexer, "syncOnce"> | undefined;
    /** Relayed calls one subscriber may have the facilitator pay for per hour (default 30). */
    maxRelaysPerHour?: number | undefined;
  },
): SubscriptionService {
  if (ctx.subscriptionManager === undefined) {
    throw new TypeError("the subscription service needs a SubscriptionManager address");
  }
  const manager: Address = ctx.subscriptionManager;
  const scope: IndexScope = { chainId: ctx.chainId, manager };
  const client = ctx.publicClient;
  const log = ctx.logger.child({ component: "subscriptions" });
  const maxRelaysPerHour = deps.maxRelaysPerHour ?? 30;
  const servedTokens = new Set(ctx.tokens.map((token) => token.address.toLowerCase()));

  /** Refuses to pay gas for a plan in a token this facilitator does not serve (the keeper's list). */
  function assertServedToken(plan: PlanRow): void {
    if (servedTokens.has(plan.token.toLowerCase())) return;
    throw new TollgateError(
      "UnsupportedToken",
      "this facilitator does not relay subscriptions to plans in that token (see GET /supported)",
      { details: { planId: plan.plan_id.toString(), token: getAddress(plan.token) } },
    );
  }

  async function read<T>(call: () => Promise<unknown>): Promise<T> {
    try {
      return (await call()) as T;
    } catch (error) {
      throw toManagerError(error);
    }
  }

  async function chainTime(): Promise<number> {
    const block = await read<{ timestamp: bigint }>(() => client.getBlock({ blockTag: "latest" }));
    return Number(block.timestamp);
  }

  async function readPlan(planId: bigint): Promise<PlanRow> {
    const plan = await read<ChainPlan>(() => getPlan(client, { manager, planId }));
    if (/^0x0{40}$/i.test(plan.provider))
      throw new TollgateError("NotFound", "no such plan", { details: { planId: planId.toString() } });
    return chainPlanToRow(planId, plan);
  }

  async function readSubscription(subscriptionId: bigint): Promise<ChainSubscription> {
    const sub = await read<ChainSubscription>(() => getSubscription(client, { manager, subscriptionId }));
    if (statusOf(sub.status) === undefined) {
      throw new TollgateError("NotFound", "no such subscription", {
        details: { subscriptionId: subscriptionId.toString() },
      });
    }
    return sub;
  }

  async function subscriptionInfo(subscriptionId: bigint): Promise<SubscriptionInfo> {
    const [sub, now, spend, indexed] = await Promise.all([
      readSubscription(subscriptionId),
      chainTime(),
      // A manager deployed before spend limits has no spendOf: the answer then leaves them out.
      getSubscriptionSpend(client, { manager, subscriptionId }).catch(() => undefined),
      // The chain keeps no reason for a failed renewal; the index does (from RenewalFailed).
      findSubscription(ctx.store, scope, subscriptionId),
    ]);
    const plan = await readPlan(sub.planId);
    return subscriptionToWire(subscriptionId, { ...sub, ...spend }, plan, now, indexed);
  }

  function intentNonce(subscriber: Address): Promise<bigint> {
    return read<bigint>(() => getSubscriptionNonce(client, { manager, subscriber }));
  }

  function tokenRead(token: Address, functionName: "balanceOf" | "nonces", owner: Address): Promise<bigint>;
  function tokenRead(
    token: Address,
    functionName: "allowance",
    owner: Address,
    spender: Address,
  ): Promise<bigint>;
  function tokenRead(
    token: Address,
    functionName: "balanceOf" | "nonces" | "allowance",
    owner: Address,
    spender?: Address,
  ): Promise<bigint> {
    return read<bigint>(() =>
      functionName === "balanceOf"
        ? getTokenBalance(client, { token, owner })
        : functionName === "nonces"
          ? getPermitNonce(client, { token, owner })
          : getTokenAllowance(client, { token, owner, spender: spender! }),
    );
  }

  async function simulate(call: RelayedCall): Promise<void> {
    await read(() => client.simulateContract({ ...call.simulation, account: ctx.gas.address } as never));
  }

  /** Brings the index up to date after a relayed call, so reads right after it see the change. */
  async function catchUp(): Promise<void> {
    try {
      await deps.indexer?.syncOnce();
    } catch (error) {
      log.warn({ err: error }, "index sync after a relayed call failed; the background loop will retry");
    }
  }

  // ---- idempotent relays -----------------------------------------------------------------------

  type Prepared<C> = { call: { to: Address; data: Hex }; context: C };

  async function relay<T, C>(
    kind: string,
    subscriber: Address,
    request: unknown,
    steps: {
      prepare(): Promise<Prepared<C>>;
      finish(receipt: TransactionReceipt, context: C | undefined): Promise<T>;
    },
  ): Promise<T> {
    const digest = keccak256(toBytes(canonicalJson({ kind, chainId: ctx.chainId, manager, request })));
    let polls = 0;
    for (;;) {
      const row = await queryOneParsed(
        ctx.store,
        RelayRowSchema,
        `SELECT status, tx_hash, result,
           floor(extract(epoch FROM now() - updated_at) * 1000)::bigint AS age_ms
         FROM subscription_relays WHERE digest = $1`,
        [digest],
      );
      if (row?.status === "done") return row.result as T;
      if (row?.status === "sent" && row.tx_hash !== null) {
        const receipt = await read<TransactionReceipt>(() =>
          client.waitForTransactionReceipt({ hash: row.tx_hash as Hash, timeout: 120_000 }),
        );
        return complete(digest, receipt, undefined, steps.finish);
      }
      if (row?.status === "pending") {
        if (row.age_ms > STALE_RELAY_MS) {
          await ctx.store.query("DELETE FROM subscription_relays WHERE digest = $1 AND status = 'pending'", [
            digest,
          ]);
          continue;
        }
        if (++polls > DUPLICATE_POLLS) {
          throw new TollgateError("RateLimited", "the same request is being relayed; retry shortly", {
            retryAfter: 2,
          });
        }
        await new Promise((resolve) => setTimeout(resolve, 250));
        continue;
      }
      // The facilitator pays the gas of every relay: one subscriber may not spend it without bound
      // (a pause/resume loop costs the subscriber nothing). Refused requests are not counted.
      const recent = await ctx.store.query<{ n: string }>(
        `SELECT count(*) AS n FROM subscription_relays
         WHERE subscriber = $1 AND created_at > now() - interval '1 hour'`,
        [subscriber.toLowerCase()],
      );
      if (Number(recent[0]?.n ?? 0) >= maxRelaysPerHour) {
        throw new TollgateError(
          "RateLimited",
          `at most ${maxRelaysPerHour} relayed calls per subscriber per hour`,
          {
            retryAfter: 600,
            details: { subscriber },
          },
        );
      }
      const inserted = await ctx.store.query(
        `INSERT INTO subscription_relays (digest, kind, subscriber) VALUES ($1, $2, $3)
         ON CONFLICT (digest) DO NOTHING RETURNING digest`,
        [digest, kind, subscriber.toLowerCase()],
      );
      if (inserted.length === 1) break;
    }

    let sent = false;
    try {
      const prepared = await steps.prepare();
      const hash = await ctx.gas.send(prepared.call);
      sent = true;
      await ctx.store.query(
        "UPDATE subscription_relays SET status = 'sent', tx_hash = $2, updated_at = now() WHERE digest = $1",
        [digest, hash.toLowerCase()],
      );
      const receipt = await read<TransactionReceipt>(() =>
        client.waitForTransactionReceipt({ hash, timeout: 120_000 }),
      );
      return await complete(digest, receipt, prepared.context, steps.finish);
    } catch (error) {
      // Nothing was broadcast: the signed intent is still unused and may be retried as is.
      if (!sent)
        await ctx.store
          .query("DELETE FROM subscription_relays WHERE digest = $1", [digest])
          .catch(() => undefined);
      throw toManagerError(error);
    }
  }

  async function complete<T, C>(
    digest: Hex,
    receipt: TransactionReceipt,
    context: C | undefined,
    finish: (receipt: TransactionReceipt, context: C | undefined) => Promise<T>,
  ): Promise<T> {
    if (receipt.status !== "success") {
      await ctx.store.query("DELETE FROM subscription_relays WHERE digest = $1", [digest]);
      throw new TollgateError("ChainUnavailable", "the relayed transaction reverted on chain; try again", {
        retryAfter: 1,
        details: { transaction: receipt.transactionHash },
      });
    }
    const result = await finish(receipt, context);
    await ctx.store.query(
      "UPDATE subscription_relays SET status = 'done', result = $2, updated_at = now() WHERE digest = $1",
      [digest, result as Record<string, unknown>],
    );
    return result;
  }

  // ---- subscribe ---------------------------------------------------------------------------------

  async function subscribe(request: SubscribeRequest): Promise<SubscribeResponse> {
    const planId = BigInt(request.planId);
    const subscriber = request.subscriber;
    const subscribeCall = subscribeForRelay({
      manager,
      subscriber,
      planId,
      maxOverage: BigInt(request.maxOverage),
      spendLimit: request.spendLimit === undefined ? NO_SPEND_LIMIT : BigInt(request.spendLimit),
      deadline: BigInt(request.deadline),
      signature: request.signature,
    });

    return relay<SubscribeResponse, { permitTransaction?: Hash }>("subscribe", subscriber, request, {
      async prepare() {
        const plan = await readPlan(planId);
        assertServedToken(plan);
        if (plan.deprecated) {
          const successor =
            plan.successor_plan_id === null || plan.successor_plan_id === 0n
              ? null
              : plan.successor_plan_id.toString();
          throw new TollgateError(
            "PlanDeprecated",
            successor === null
              ? "the plan is deprecated"
              : `the plan is deprecated; subscribe to plan ${successor} instead`,
            { details: { planId: request.planId, successorPlanId: successor } },
          );
        }
        const now = await chainTime();
        if (BigInt(request.deadline) <= BigInt(now)) {
          throw new TollgateError(
            "AuthorizationExpired",
            "the subscribe intent's deadline has passed on chain",
            {
              details: { deadline: request.deadline, chainTime: now },
            },
          );
        }
        const token = plan.token as Address;
        const [balance, allowance] = await Promise.all([
          tokenRead(token, "balanceOf", subscriber),
          tokenRead(token, "allowance", subscriber, manager),
        ]);
        if (balance < plan.amount) {
          throw new TollgateError("InsufficientFunds", "the subscriber's balance is below the plan's price", {
            details: { balance: balance.toString(), required: plan.amount.toString() },
          });
        }
        let permitTransaction: Hash | undefined;
        // A permit replaces the allowance: submitted when the allowance is short, and also when the
        // subscriber asks for another value (an agent's budget approves exactly what it holds; skipping
        // it would let this subscribe spend the approval held for the wallet's other renewals).
        const resets = request.permit !== undefined && BigInt(request.permit.value) !== allowance;
        if (allowance < plan.amount || resets) {
          const permit = request.permit;
          if (permit === undefined) {
            throw new TollgateError(
              "InsufficientFunds",
              "the SubscriptionManager may not pull the plan's price: send a permit or approve it first",
              {
                details: {
                  reason: "allowance",
                  allowance: allowance.toString(),
                  required: plan.amount.toString(),
                },
              },
            );
          }
          if (BigInt(permit.value) < plan.amount) {
            throw new TollgateError("AmountMismatch", "the permit's value is below the plan's price", {
              details: { value: permit.value, required: plan.amount.toString() },
            });
          }
          if (BigInt(permit.deadline) <= BigInt(now)) {
            throw new TollgateError("AuthorizationExpired", "the permit's deadline has passed on chain", {
              details: { deadline: permit.deadline, chainTime: now },
            });
          }
          // The intent's own checks (deadline, signature, plan) come before the pull in subscribeFor,
          // so a simulation now refuses a bad intent before the permit is spent; only the transfer may
          // still fail, for want of the approval the permit gives.
          try {
            await simulate(subscribeCall);
          } catch (error) {
            if (!(error instanceof TollgateError && error.code === "InsufficientFunds")) throw error;
          }
          const permitCall = permitRelay({
            token,
            owner: subscriber,
            spender: manager,
            value: BigInt(permit.value),
            deadline: BigInt(permit.deadline),
            signature: permit.signature,
          });
          await simulate(permitCall);
          const sent = await ctx.gas.sendAndWait({ to: permitCall.to, data: permitCall.data });
          permitTransaction = sent.hash;
        }
        await simulate(subscribeCall);
        return {
          call: { to: subscribeCall.to, data: subscribeCall.data },
          context: permitTransaction === undefined ? {} : { permitTransaction },
        };
      },
      async finish(receipt, context) {
        const subscriptionId = getSubscriptionIdFromReceipt(receipt);
        await catchUp();
        return {
          subscriptionId: subscriptionId.toString(),
          transaction: receipt.transactionHash,
          ...(context?.permitTransaction === undefined
            ? {}
            : { permitTransaction: context.permitTransaction }),
          subscription: await subscriptionInfo(subscriptionId),
        };
      },
    });
  }

  // ---- approval top-up ---------------------------------------------------------------------------

  /**
   * Anyone may post a permit here and the facilitator pays its gas, so only a permit that can serve
   * this manager's subscriptions is relayed: the spender is the manager, the token is one this
   * facilitator serves, and the owner holds a live subscription (Active, Paused or PastDue) to a plan
   * in that token here. A permit's nonce already used on the token is 409 `NonceAlreadyUsed` before
   * anything is simulated; a bad signature is refused by the simulation (422 `InvalidSignature`). The
   * relay is keyed by (owner, token, nonce), so two permits with one nonce are one transaction at most.
   */
  async function approve(request: ApprovalRequest): Promise<ApprovalResponse> {
    const owner = getAddress(request.owner);
    const token = getAddress(request.token);
    const nonce = BigInt(request.nonce);
    if (getAddress(request.spender) !== getAddress(manager)) {
      throw new TollgateError("InvalidRequest", "the permit's spender must be this SubscriptionManager", {
        details: { reason: "spender", spender: getAddress(request.spender), manager: getAddress(manager) },
      });
    }
    if (!servedTokens.has(token.toLowerCase())) {
      throw new TollgateError(
        "UnsupportedToken",
        "this facilitator does not relay permits for that token (see GET /supported)",
        { details: { token } },
      );
    }
    const live = await ctx.store.query<{ n: string }>(
      `SELECT count(*) AS n FROM subscriptions s
         JOIN plans p ON p.chain_id = s.chain_id AND p.manager = s.manager AND p.plan_id = s.plan_id
        WHERE s.chain_id = $1 AND s.manager = $2 AND s.subscriber = $3 AND p.token = $4
          AND s.status IN ('Active', 'Paused', 'PastDue')`,
      [ctx.chainId, manager.toLowerCase(), owner.toLowerCase(), token.toLowerCase()],
    );
    if (Number(live[0]?.n ?? 0) === 0) {
      throw new TollgateError(
        "InvalidRequest",
        "the owner holds no live subscription in that token on this manager: approve it when subscribing",
        { details: { reason: "no_subscription", owner, token } },
      );
    }
    const used = async () => {
      const current = await tokenRead(token, "nonces", owner);
      return current > nonce ? current : undefined;
    };
    const usedNonce = (current: bigint) =>
      new TollgateError("NonceAlreadyUsed", "the permit's nonce has been used on the token", {
        details: { nonce: request.nonce, currentNonce: current.toString() },
      });
    const current = await tokenRead(token, "nonces", owner);
    if (nonce < current) throw usedNonce(current);
    if (nonce > current) {
      throw new TollgateError("InvalidRequest", "the permit's nonce is not the token's next one", {
        details: { reason: "nonce", nonce: request.nonce, currentNonce: current.toString() },
      });
    }
    const now = await chainTime();
    if (BigInt(request.deadline) <= BigInt(now)) {
      throw new TollgateError("AuthorizationExpired", "the permit's deadline has passed on chain", {
        details: { deadline: request.deadline, chainTime: now },
      });
    }
    const permitCall = permitRelay({
      token,
      owner,
      spender: manager,
      value: BigInt(request.value),
      deadline: BigInt(request.deadline),
      signature: request.signature,
    });
    let result: ApprovalResponse;
    try {
      result = await relay<ApprovalResponse, undefined>(
        "approval",
        owner,
        { owner, token, nonce: request.nonce },
        {
          async prepare() {
            await simulate(permitCall);
            return { call: { to: permitCall.to, data: permitCall.data }, context: undefined };
          },
          async finish(receipt) {
            return {
              owner,
              token,
              spender: getAddress(manager),
              value: request.value,
              nonce: request.nonce,
              transaction: receipt.transactionHash,
              allowance: (await tokenRead(token, "allowance", owner, manager)).toString(),
            };
          },
        },
      );
    } catch (error) {
      // Another permit with this nonce (say, in a relayed subscribe) was mined first: the simulation
      // then fails on the signature, or the permit reverts once mined. Other errors stand as they are.
      const refused =
        error instanceof TollgateError &&
        (error.code === "InvalidSignature" || typeof error.details?.transaction === "string");
      const after = refused ? await used().catch(() => undefined) : undefined;
      if (after !== undefined) throw usedNonce(after);
      throw error;
    }
    // The relay with this nonce was another permit (another value or deadline): this one is spent.
    if (result.value !== request.value) throw usedNonce(nonce + 1n);
    return result;
  }

  // ---- lifecycle ---------------------------------------------------------------------------------

  async function act(
    subscriptionId: bigint,
    action: SubscriptionAction,
    request: SubscriptionActionRequest | SetMaxOverageRequest | SetSpendLimitRequest,
  ): Promise<SubscriptionActionResponse> {
    const sub = await readSubscription(subscriptionId);
    const deadline = BigInt(request.deadline);
    const common = { manager, subscriptionId, deadline, signature: request.signature };
    const call = subscriptionActionForRelay(
      action === "overage"
        ? { ...common, action, maxOverage: BigInt((request as SetMaxOverageRequest).maxOverage) }
        : action === "limit"
          ? { ...common, action, spendLimit: BigInt((request as SetSpendLimitRequest).spendLimit) }
          : { ...common, action },
    );
    return relay<SubscriptionActionResponse, undefined>(
      action,
      sub.subscriber,
      { subscriptionId: subscriptionId.toString(), request },
      {
        async prepare() {
          assertServedToken(await readPlan(sub.planId));
          const now = await chainTime();
          if (deadline <= BigInt(now)) {
            throw new TollgateError("AuthorizationExpired", "the intent's deadline has passed on chain", {
              details: { deadline: request.deadline, chainTime: now },
            });
          }
          await simulate(call);
          return { call: { to: call.to, data: call.data }, context: undefined };
        },
        async finish(receipt) {
          await catchUp();
          return {
            subscriptionId: subscriptionId.toString(),
            action,
            transaction: receipt.transactionHash,
            subscription: await subscriptionInfo(subscriptionId),
          };
        },
      },
    );
  }

  return {
    async getPlan(planId) {
      return planToWire(await readPlan(planId));
    },
    getSubscription: subscriptionInfo,
    async getSubscriber(subscriber, token) {
      const [nonce, now, rows] = await Promise.all([
        intentNonce(subscriber),
        chainTime(),
        subscriptionsOf(ctx.store, scope, subscriber),
      ]);
      const tokenInfo =
        token === undefined
          ? undefined
          : await Promise.all([
              tokenRead(token, "nonces", subscriber),
              tokenRead(token, "allowance", subscriber, manager),
              tokenRead(token, "balanceOf", subscriber),
            ]).then(([permitNonce, allowance, balance]) => ({
              address: token,
              permitNonce: permitNonce.toString(),
              allowance: allowance.toString(),
              balance: balance.toString(),
            }));
      return {
        subscriber,
        intentNonce: nonce.toString(),
        chainTime: now,
        manager,
        ...(tokenInfo === undefined ? {} : { token: tokenInfo }),
        subscriptions: rows.map((row) => ({
          subscriptionId: row.subscription_id.toString(),
          planId: row.plan_id.toString(),
          provider: getAddress(row.provider),
          status: row.status,
          currentPeriodEnd: row.current_period_end,
        })),
      };
    },
    subscribe,
    approve,
    act,
  };
}
