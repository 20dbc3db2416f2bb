/**
 * Subscribing a payer to a plan (docs/contracts.md; docs/client.md). Two ways, same result (a subscription whose
 * first period is charged):
 * - gasless (default): the payer signs the SubscriptionManager's `Subscribe` intent and, when the
 *   manager's allowance is short, an EIP-2612 permit; the facilitator relays both (`POST
 *   /subscriptions`). The payer needs no ETH and no RPC of its own.
 * - direct: the payer's wallet client sends `approve` (when the allowance is short) and `subscribe`
 *   itself, paying the gas.
 *
 * Before anything is signed or sent, the plan is read from the facilitator and checked: it exists,
 * is not deprecated (`PlanDeprecated` names the successor), and is priced in a token of the payer's
 * network.
 */
import { BaseError, ContractFunctionRevertedError, type Hash, publicActions } from "viem";
import { subscribe } from "../../../chain/actions/subscriptions/subscribe.ts";
import { approveToken } from "../../../chain/actions/usd/approveToken.ts";
import { getTokenAllowance } from "../../../chain/actions/usd/getTokenAllowance.ts";
import type { WriteClient } from "../../../chain/clientTypes.ts";
import { getSubscriptionIdFromReceipt } from "../../../chain/events/decodeSubscriptionEvents.ts";
import type { TypedDataSigner } from "../../../chain/signers/typedDataSigner.ts";
import { parseTokenAmount, type TokenAmountInput } from "../../../client/parseTokenAmount.ts";
import { parseUsdcCeiling } from "../../../client/parseUsdcCeiling.ts";
import { requireObject } from "../../../http/checkInput.ts";
import {
  type FacilitatorClient,
  type RequestOptions,
  requireFacilitator,
} from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { type ErrorCode, TollgateError } from "../../../protocol/errors.ts";
import { chainIdOf, type Network } from "../../../protocol/network.ts";
import type { PlanInfo } from "../../../protocol/subscriptions.ts";
import {
  DEFAULT_APPROVAL_CYCLES,
  getPlanInfo,
  subscribeThroughFacilitator,
} from "./facilitatorSubscriptions.ts";

/** Kept here too: callers imported it from this module before it had its own. */
export { parseTokenAmount } from "../../../client/parseTokenAmount.ts";

export type SubscribeToPlanOptions = {
  /** The plan's on-chain id: a bigint, decimal text or an integer number. */
  planId: bigint | string | number;
  /**
   * Most overage the provider may deduct per period, in token units as the specification writes it:
   * a number (`2` = 2 USDC) or text (`"2.50"`), converted exactly; or a bigint of smallest units.
   * Default 0 (no overage).
   */
  maxOverage?: TokenAmountInput | undefined;
  /**
   * The most the SubscriptionManager may ever pull for this subscription (first period, renewals and
   * overage together), signed into the subscribe and enforced on every pull, whatever the shared token
   * approval allows: token units (number or text) or a bigint of smallest units. Default: no limit.
   */
  spendLimit?: TokenAmountInput | undefined;
  /**
   * What the SubscriptionManager may pull over time, when an approval (or permit) is needed: token
   * units (number or text) or a bigint of smallest units. Default 12 × (price + maxOverage), a year
   * of monthly renewals.
   */
  approval?: TokenAmountInput | undefined;
  /**
   * The most one period may cost (bigint smallest units or USDC text): checked against the plan the
   * facilitator reads from the chain, before anything is signed (`PriceCeilingExceeded`).
   */
  maxPrice?: bigint | string | undefined;
  /**
   * Set the manager's allowance to exactly `approval`, also when it is already enough (a permit or
   * `approve` replaces the allowance; an agent's budget that held `approval` must not leave more).
   */
  exactApproval?: boolean | undefined;
  /**
   * The 402 option this subscription answers (`fetchWithPayment` passes it): the plan read from the
   * chain must be its payee's, in its token, at no more than its price (`InvalidRequest` otherwise),
   * so a gate cannot sell another party's plan, or a dearer one, under its own terms.
   */
  offer?: { payTo: string; token: string; amount: string } | undefined;
  /** Send `approve` + `subscribe` from the payer's wallet client instead of the gasless relay. */
  direct?: boolean | undefined;
  signal?: AbortSignal | undefined;
};

export type SubscribeResult = {
  subscriptionId: bigint;
  planId: string;
  /** The `subscribe` (or `subscribeFor`) transaction. */
  transaction: Hash;
  plan: PlanInfo;
};

export type SubscribeContext = {
  signer: TypedDataSigner;
  network: Network;
  facilitator: Pick<FacilitatorClient, "request" | "supported">;
  /** For `direct`: a wallet client with the payer's account, on the payer's chain. */
  walletClient?: WriteClient | undefined;
};

/**
 * Subscribes the context's signer to a plan; returns the new subscription's id.
 *
 * @example
 * const { subscriptionId } = await subscribeToPlan({ signer: account, network, facilitator },
 *   { planId: 3n, maxOverage: "2.00" });
 */
export async function subscribeToPlan(
  context: SubscribeContext,
  options: SubscribeToPlanOptions,
): Promise<SubscribeResult> {
  requireObject(context, "subscribeToPlan({ signer, network, facilitator }, { planId, maxOverage? })");
  requireFacilitator(context.facilitator, "subscribeToPlan: facilitator is a FacilitatorClient");
  if (typeof options !== "object" || options === null) {
    throw new TollgateError("InvalidRequest", "subscribe: pass { planId, maxOverage? }", {
      details: { type: options === null ? "null" : typeof options },
    });
  }
  if (options.direct !== undefined && typeof options.direct !== "boolean") {
    throw new TollgateError("InvalidRequest", "subscribe: direct is true or false");
  }
  const planId = parsePlanId(options.planId);
  const maxOverage = parseTokenAmount(options.maxOverage ?? 0n, "maxOverage");
  const spendLimit =
    options.spendLimit === undefined ? undefined : parseTokenAmount(options.spendLimit, "spendLimit");
  const approvalOption =
    options.approval === undefined ? undefined : parseTokenAmount(options.approval, "approval");
  const maxPrice = options.maxPrice === undefined ? undefined : parseUsdcCeiling(options.maxPrice);
  const requestOptions: RequestOptions = { signal: options.signal };
  const plan = await getPlanInfo(context.facilitator, planId, requestOptions);
  if (plan.deprecated) {
    throw new TollgateError(
      "PlanDeprecated",
      `plan ${plan.planId} is deprecated and takes no new subscribers`,
      {
        details: { planId: plan.planId, successorPlanId: plan.successorPlanId },
      },
    );
  }
  if (maxPrice !== undefined && BigInt(plan.amount) > maxPrice) {
    throw new TollgateError(
      "PriceCeilingExceeded",
      `plan ${plan.planId} costs more per period than allowed`,
      {
        details: { planId: plan.planId, amount: plan.amount, maxPrice: maxPrice.toString() },
      },
    );
  }
  if (options.offer !== undefined) assertPlanMatchesOffer(plan, options.offer);
  const approval = approvalOption ?? (BigInt(plan.amount) + maxOverage) * DEFAULT_APPROVAL_CYCLES;

  if (options.direct !== true) {
    const reply = await subscribeThroughFacilitator(
      context.facilitator,
      context.signer,
      { planId, maxOverage, spendLimit, approval, exactApproval: options.exactApproval },
      requestOptions,
    );
    return {
      subscriptionId: BigInt(reply.subscriptionId),
      planId: plan.planId,
      transaction: reply.transaction,
      plan,
    };
  }
  return subscribeDirectly(context, {
    plan,
    maxOverage,
    spendLimit,
    approval,
    exact: options.exactApproval === true,
  });
}

async function subscribeDirectly(
  context: SubscribeContext,
  p: { plan: PlanInfo; maxOverage: bigint; spendLimit: bigint | undefined; approval: bigint; exact: boolean },
): Promise<SubscribeResult> {
  const wallet = context.walletClient;
  if (wallet === undefined) {
    throw new TollgateError("InvalidRequest", "a direct subscribe needs the payer's `walletClient`");
  }
  if (wallet.chain.id !== chainIdOf(context.network)) {
    throw new TollgateError(
      "UnsupportedNetwork",
      `the wallet client is on chain ${wallet.chain.id}, not ${context.network}`,
    );
  }
  if (wallet.account.address.toLowerCase() !== context.signer.address.toLowerCase()) {
    throw new TollgateError("InvalidRequest", "the wallet client's account is not the payer's");
  }
  const supported = await context.facilitator.supported();
  const manager = supported.networks.find((n) => n.network === context.network)?.subscriptionManager;
  if (manager === undefined) {
    throw new TollgateError(
      "UnsupportedNetwork",
      `the facilitator lists no SubscriptionManager on ${context.network}`,
    );
  }
  const client = wallet.extend(publicActions);
  const owner = wallet.account.address;
  const price = BigInt(p.plan.amount);
  try {
    const allowance = await getTokenAllowance(client, { token: p.plan.token, owner, spender: manager });
    if (allowance < price + p.maxOverage || (p.exact && allowance !== p.approval)) {
      const hash = await approveToken(wallet, { token: p.plan.token, spender: manager, amount: p.approval });
      const receipt = await client.waitForTransactionReceipt({ hash });
      if (receipt.status !== "success") {
        throw new TollgateError("InvalidRequest", "the approval transaction reverted", {
          details: { transaction: hash },
        });
      }
    }
    const hash = await subscribe(wallet, {
      manager,
      planId: BigInt(p.plan.planId),
      maxOverage: p.maxOverage,
      spendLimit: p.spendLimit,
    });
    const receipt = await client.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") {
      throw new TollgateError("InvalidRequest", "the subscribe transaction reverted", {
        details: { transaction: hash },
      });
    }
    return {
      subscriptionId: getSubscriptionIdFromReceipt(receipt),
      planId: p.plan.planId,
      transaction: hash,
      plan: p.plan,
    };
  } catch (error) {
    throw toSubscribeError(error);
  }
}

/** Contract errors a direct subscribe can meet, as the codes of docs/protocol.md, "Errors". */
const codeByRevert: Record<string, { code: ErrorCode; message: string }> = {
  PlanIsDeprecated: {
    code: "PlanDeprecated",
    message: "the plan is deprecated and takes no new subscribers",
  },
  PlanNotFound: { code: "NotFound", message: "no such plan" },
  TransferFailed: {
    code: "InsufficientFunds",
    message: "the first period could not be charged: balance or allowance short",
  },
  ERC20InsufficientBalance: { code: "InsufficientFunds", message: "the payer's token balance is short" },
  ERC20InsufficientAllowance: { code: "InsufficientFunds", message: "the manager's allowance is short" },
};

function toSubscribeError(error: unknown): TollgateError {
  if (error instanceof TollgateError) return error;
  if (error instanceof BaseError) {
    const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
    const name = reverted instanceof ContractFunctionRevertedError ? reverted.data?.errorName : undefined;
    const mapped = name === undefined ? undefined : codeByRevert[name];
    if (mapped !== undefined) return new TollgateError(mapped.code, mapped.message, { cause: error });
    if (name !== undefined) {
      return new TollgateError("InvalidRequest", `the chain refused the subscription: ${name}`, {
        cause: error,
      });
    }
    if (/insufficient funds/i.test(error.message)) {
      return new TollgateError(
        "InsufficientFunds",
        "the payer has no ETH for gas; subscribe without `direct`",
        {
          cause: error,
        },
      );
    }
  }
  return new TollgateError("ChainUnavailable", "the subscription could not be sent to the chain", {
    cause: error,
  });
}

function assertPlanMatchesOffer(plan: PlanInfo, offer: { payTo: string; token: string; amount: string }) {
  if (
    !sameAddress(plan.provider, offer.payTo) ||
    !sameAddress(plan.token, offer.token) ||
    BigInt(plan.amount) > BigInt(offer.amount)
  ) {
    throw new TollgateError(
      "InvalidRequest",
      `plan ${plan.planId} on chain is not the plan the 402 offered`,
      {
        details: {
          planId: plan.planId,
          chain: { provider: plan.provider, token: plan.token, amount: plan.amount },
          offered: { payTo: offer.payTo, token: offer.token, amount: offer.amount },
        },
      },
    );
  }
}

/** A plan id as a bigint, decimal text or a safe integer number (`planId: 3`). */
function parsePlanId(planId: bigint | string | number): bigint {
  const text =
    typeof planId === "bigint" || typeof planId === "string" || Number.isSafeInteger(planId)
      ? String(planId)
      : "";
  if (!/^(0|[1-9][0-9]{0,77})$/.test(text)) {
    throw new TollgateError("InvalidRequest", "a plan id is a decimal integer", {
      details: { planId: typeof planId === "string" ? planId.slice(0, 100) : String(typeof planId) },
    });
  }
  return BigInt(text);
}
