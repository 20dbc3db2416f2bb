/**
 * The approval top-up: an owner-signed permit for the manager relayed. Anyone may post a permit here
 * and the facilitator pays its gas, so only a permit that can serve this manager's subscriptions is
 * relayed: the spender is the manager, the token is one this facilitator serves, and the owner holds
 * a live subscription (Active, Paused or PastDue) to a plan in that token here. A permit's nonce
 * already used on the token is 409 `NonceAlreadyUsed` before anything is simulated; a bad signature is
 * refused by the simulation (422 `InvalidSignature`). The relay is keyed by (owner, token, nonce), so
 * two permits with one nonce are one transaction at most.
 */
import { type Address, getAddress } from "viem";
import { permitRelay } from "../../../chain/actions/usd/permitRelay.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { ApprovalRequest, ApprovalResponse } from "../../../protocol/subscriptions.ts";
import { chainTime, type ServiceDeps, simulate, tokenRead } from "./serviceReads.ts";
import { relay } from "./subscriptionRelays.ts";

const usedNonce = (request: ApprovalRequest, current: bigint) =>
  new TollgateError("NonceAlreadyUsed", "the permit's nonce has been used on the token", {
    details: { nonce: request.nonce, currentNonce: current.toString() },
  });

export async function relayedApproval(
  deps: ServiceDeps,
  request: ApprovalRequest,
): Promise<ApprovalResponse> {
  const { manager } = deps;
  const owner = getAddress(request.owner);
  const token = getAddress(request.token);
  const nonce = BigInt(request.nonce);
  await assertServesSubscriptions(deps, request, owner, token);
  const current = await tokenRead(deps, token, "nonces", owner);
  if (nonce < current) throw usedNonce(request, current);
  if (nonce > current) {
    throw new TollgateError("InvalidRequest", "the permit's nonce is not the token's next one", {
      details: { reason: "nonce", nonce: request.nonce, currentNonce: current.toString() },
    });
  }
  const now = await chainTime(deps);
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
      deps,
      "approval",
      owner,
      { owner, token, nonce: request.nonce },
      {
        async prepare() {
          await simulate(deps, permitCall);
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
            allowance: (await tokenRead(deps, token, "allowance", owner, manager)).toString(),
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
    const after = refused ? await nonceUsed(deps, token, owner, nonce).catch(() => undefined) : undefined;
    if (after !== undefined) throw usedNonce(request, after);
    throw error;
  }
  // The relay with this nonce was another permit (another value or deadline): this one is spent.
  if (result.value !== request.value) throw usedNonce(request, nonce + 1n);
  return result;
}

/** The token's permit nonce for `owner` when it has moved past `nonce`. */
async function nonceUsed(deps: ServiceDeps, token: Address, owner: Address, nonce: bigint) {
  const current = await tokenRead(deps, token, "nonces", owner);
  return current > nonce ? current : undefined;
}

/** Refuses a permit for another spender, an unserved token, or an owner with no live subscription in it here. */
async function assertServesSubscriptions(
  deps: ServiceDeps,
  request: ApprovalRequest,
  owner: Address,
  token: Address,
): Promise<void> {
  const { ctx, manager } = deps;
  if (getAddress(request.spender) !== getAddress(manager)) {
    throw new TollgateError("InvalidRequest", "the permit's spender must be this SubscriptionManager", {
      details: { reason: "spender", spender: getAddress(request.spender), manager: getAddress(manager) },
    });
  }
  if (!deps.servedTokens.has(token.toLowerCase())) {
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
}
