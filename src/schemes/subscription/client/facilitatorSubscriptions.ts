/**
 * Typed calls to the facilitator's subscription endpoints (docs/subscriptions.md) and
 * the signers that build their bodies. A subscriber needs no ETH and no RPC of its own: the facilitator
 * reports nonces and chain time (`GET /subscribers/:address`) and relays the signed intents.
 *
 * Low-level: `getPlanInfo`, `getSubscriptionInfo`, `getSubscriberInfo`, `relaySubscribe`,
 * `relaySubscriptionAction`, `signSubscribeRequest`, `signSubscriptionActionRequest`,
 * `signSetMaxOverageRequest`, `signSetSpendLimitRequest`, `relayApproval`, `signApprovalRequest`. High-level: `subscribeThroughFacilitator`,
 * `changeSubscriptionThroughFacilitator`, `approveThroughFacilitator`.
 */
import type { Address } from "viem";
import { NO_SPEND_LIMIT, type TokenDomain } from "../../../chain/signers/eip712Types.ts";
import { signPermit } from "../../../chain/signers/signPermit.ts";
import {
  signCancelIntent,
  signPauseIntent,
  signResumeIntent,
  signSetMaxOverageIntent,
  signSetSpendLimitIntent,
  signSubscribeIntent,
} from "../../../chain/signers/signSubscriptionIntents.ts";
import type { TypedDataSigner } from "../../../chain/signers/typedDataSigner.ts";
import type { FacilitatorClient, RequestOptions } from "../../../http/facilitatorClient.ts";
import { sameAddress } from "../../../protocol/address.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import type { SupportedResponse } from "../../../protocol/facilitator.ts";
import { chainIdOf } from "../../../protocol/network.ts";
import {
  type ApprovalRequest,
  type ApprovalResponse,
  ApprovalResponseSchema,
  type PlanInfo,
  PlanInfoSchema,
  type SetMaxOverageRequest,
  type SetSpendLimitRequest,
  type SubscribeRequest,
  type SubscribeResponse,
  SubscribeResponseSchema,
  type SubscriberInfo,
  SubscriberInfoSchema,
  type SubscriptionAction,
  type SubscriptionActionRequest,
  type SubscriptionActionResponse,
  SubscriptionActionResponseSchema,
  type SubscriptionInfo,
  SubscriptionInfoSchema,
} from "../../../protocol/subscriptions.ts";

/** What these calls need of a facilitator client (`createFacilitatorClient` returns it). */
export type SubscriptionsClient = Pick<FacilitatorClient, "request">;

/** `GET /plans/:id`. */
export function getPlanInfo(
  client: SubscriptionsClient,
  planId: bigint | string,
  options?: RequestOptions,
): Promise<PlanInfo> {
  return client.request("GET", `/plans/${planId}`, PlanInfoSchema, options);
}

/** `GET /subscriptions/:id`: status read from the chain now. */
export function getSubscriptionInfo(
  client: SubscriptionsClient,
  subscriptionId: bigint | string,
  options?: RequestOptions,
): Promise<SubscriptionInfo> {
  return client.request("GET", `/subscriptions/${subscriptionId}`, SubscriptionInfoSchema, options);
}

/** `GET /subscribers/:address`: intent nonce, chain time, token permit state, subscriptions. */
export function getSubscriberInfo(
  client: SubscriptionsClient,
  subscriber: Address,
  options: RequestOptions & { token?: Address | undefined } = {},
): Promise<SubscriberInfo> {
  const { token, ...rest } = options;
  const query = token === undefined ? "" : `?token=${token}`;
  return client.request("GET", `/subscribers/${subscriber}${query}`, SubscriberInfoSchema, rest);
}

/** `POST /subscriptions`: relays a signed subscribe (and permit); the first period is charged. */
export function relaySubscribe(
  client: SubscriptionsClient,
  request: SubscribeRequest,
  options?: RequestOptions,
): Promise<SubscribeResponse> {
  // Relaying waits for one or two transactions to be mined.
  return client.request("POST", "/subscriptions", SubscribeResponseSchema, {
    timeoutMs: 120_000,
    ...options,
    body: request,
  });
}

/** `POST /subscriptions/:id/{pause|resume|cancel|overage}`: relays a subscriber-signed action. */
export function relaySubscriptionAction(
  client: SubscriptionsClient,
  subscriptionId: bigint | string,
  action: SubscriptionAction,
  request: SubscriptionActionRequest | SetMaxOverageRequest | SetSpendLimitRequest,
  options?: RequestOptions,
): Promise<SubscriptionActionResponse> {
  return client.request(
    "POST",
    `/subscriptions/${subscriptionId}/${action}`,
    SubscriptionActionResponseSchema,
    {
      timeoutMs: 120_000,
      ...options,
      body: request,
    },
  );
}

/** `POST /subscriptions/approval`: relays an owner-signed permit for the manager (an allowance top-up). */
export function relayApproval(
  client: SubscriptionsClient,
  request: ApprovalRequest,
  options?: RequestOptions,
): Promise<ApprovalResponse> {
  return client.request("POST", "/subscriptions/approval", ApprovalResponseSchema, {
    timeoutMs: 120_000,
    ...options,
    body: request,
  });
}

/** Signs the body of `POST /subscriptions/approval`: a permit for `manager` with the token's current `nonce`. */
export async function signApprovalRequest(
  signer: TypedDataSigner,
  p: { manager: Address; domain: TokenDomain; value: bigint; nonce: bigint; deadline: bigint },
): Promise<ApprovalRequest> {
  const signature = await signPermit(signer, {
    domain: p.domain,
    spender: p.manager,
    value: p.value,
    nonce: p.nonce,
    deadline: p.deadline,
  });
  return {
    owner: signer.address,
    token: p.domain.verifyingContract,
    spender: p.manager,
    value: p.value.toString(),
    nonce: p.nonce.toString(),
    deadline: p.deadline.toString(),
    signature,
  };
}

type IntentDomainParams = { chainId: number; manager: Address };

/**
 * Signs the body of `POST /subscriptions`: a Subscribe intent with the subscriber's current manager
 * `nonce`, and optionally an EIP-2612 permit (with the token's current permit `nonce`) approving the
 * manager for `value`.
 */
export async function signSubscribeRequest(
  signer: TypedDataSigner,
  p: IntentDomainParams & {
    planId: bigint;
    maxOverage: bigint;
    /** The most ever pulled for the subscription; default none (`NO_SPEND_LIMIT` is signed). */
    spendLimit?: bigint | undefined;
    nonce: bigint;
    deadline: bigint;
    permit?: { domain: TokenDomain; value: bigint; nonce: bigint; deadline: bigint } | undefined;
  },
): Promise<SubscribeRequest> {
  const spendLimit = p.spendLimit ?? NO_SPEND_LIMIT;
  const signature = await signSubscribeIntent(signer, { ...p, spendLimit });
  const request: SubscribeRequest = {
    subscriber: signer.address,
    planId: p.planId.toString(),
    maxOverage: p.maxOverage.toString(),
    deadline: p.deadline.toString(),
    signature,
  };
  if (p.spendLimit !== undefined) request.spendLimit = p.spendLimit.toString();
  if (p.permit !== undefined) {
    const permitSignature = await signPermit(signer, {
      domain: p.permit.domain,
      spender: p.manager,
      value: p.permit.value,
      nonce: p.permit.nonce,
      deadline: p.permit.deadline,
    });
    request.permit = {
      value: p.permit.value.toString(),
      deadline: p.permit.deadline.toString(),
      signature: permitSignature,
    };
  }
  return request;
}

/** Signs the body of `POST /subscriptions/:id/{pause|resume|cancel}`. */
export async function signSubscriptionActionRequest(
  signer: TypedDataSigner,
  p: IntentDomainParams & {
    action: "pause" | "resume" | "cancel";
    subscriptionId: bigint;
    nonce: bigint;
    deadline: bigint;
  },
): Promise<SubscriptionActionRequest> {
  const sign = { pause: signPauseIntent, resume: signResumeIntent, cancel: signCancelIntent }[p.action];
  const signature = await sign(signer, p);
  return { deadline: p.deadline.toString(), signature };
}

/** Signs the body of `POST /subscriptions/:id/limit`. */
export async function signSetSpendLimitRequest(
  signer: TypedDataSigner,
  p: IntentDomainParams & { subscriptionId: bigint; spendLimit: bigint; nonce: bigint; deadline: bigint },
): Promise<SetSpendLimitRequest> {
  const signature = await signSetSpendLimitIntent(signer, p);
  return { spendLimit: p.spendLimit.toString(), deadline: p.deadline.toString(), signature };
}

/** Signs the body of `POST /subscriptions/:id/overage`. */
export async function signSetMaxOverageRequest(
  signer: TypedDataSigner,
  p: IntentDomainParams & { subscriptionId: bigint; maxOverage: bigint; nonce: bigint; deadline: bigint },
): Promise<SetMaxOverageRequest> {
  const signature = await signSetMaxOverageIntent(signer, p);
  return { maxOverage: p.maxOverage.toString(), deadline: p.deadline.toString(), signature };
}

/** Cycles of price plus overage cap that a permit approves by default: a year of monthly plans. */
export const DEFAULT_APPROVAL_CYCLES = 12n;

type Deployment = { chainId: number; manager: Address; supported: SupportedResponse };

async function deployment(
  client: Pick<FacilitatorClient, "supported">,
  options?: RequestOptions,
): Promise<Deployment> {
  const supported = await client.supported(options);
  const network = supported.networks.find((n) => n.subscriptionManager !== undefined);
  if (network?.subscriptionManager === undefined) {
    throw new TollgateError("UnsupportedNetwork", "the facilitator offers no subscriptions");
  }
  return { chainId: chainIdOf(network.network), manager: network.subscriptionManager, supported };
}

/**
 * Subscribes `signer` to a plan with no gas and no RPC of its own: reads the plan and the subscriber's
 * nonces from the facilitator, signs the intent (and a permit when the manager's allowance is below
 * one period's price plus `maxOverage`), and relays it. The permit approves `approval` (default
 * 12 × (price + maxOverage)), so renewals and overage can be pulled later.
 *
 * @example
 * const facilitator = createFacilitatorClient({ url, fetch });
 * const { subscriptionId } = await subscribeThroughFacilitator(facilitator, account, { planId: 3n, maxOverage: 2_000_000n });
 */
export async function subscribeThroughFacilitator(
  client: Pick<FacilitatorClient, "request" | "supported">,
  signer: TypedDataSigner,
  p: {
    planId: bigint;
    maxOverage: bigint;
    /** The most ever pulled for the subscription, signed into the intent (default: no limit). */
    spendLimit?: bigint | undefined;
    approval?: bigint | undefined;
    /** Permit exactly `approval` whenever the allowance differs from it, not only when it is short. */
    exactApproval?: boolean | undefined;
    /** Lifetime of the signed intent and permit, in chain seconds (default 600). */
    deadlineSeconds?: number | undefined;
  },
  options?: RequestOptions,
): Promise<SubscribeResponse> {
  const { chainId, manager, supported } = await deployment(client, options);
  const plan = await getPlanInfo(client, p.planId, options);
  const info = await getSubscriberInfo(client, signer.address, { ...options, token: plan.token });
  const deadline = BigInt(info.chainTime + (p.deadlineSeconds ?? 600));
  const price = BigInt(plan.amount);
  const allowance = BigInt(info.token?.allowance ?? "0");
  let permit: { domain: TokenDomain; value: bigint; nonce: bigint; deadline: bigint } | undefined;
  const approval = p.approval ?? (price + p.maxOverage) * DEFAULT_APPROVAL_CYCLES;
  if (allowance < price + p.maxOverage || (p.exactApproval === true && allowance !== approval)) {
    const token = supported.networks.flatMap((n) => n.tokens).find((t) => sameAddress(t.address, plan.token));
    if (token === undefined) {
      throw new TollgateError(
        "UnsupportedToken",
        "the facilitator does not know the plan token's permit domain",
        {
          details: { token: plan.token },
        },
      );
    }
    permit = {
      domain: { ...token.eip712, chainId, verifyingContract: token.address },
      value: approval,
      nonce: BigInt(info.token?.permitNonce ?? "0"),
      deadline,
    };
  }
  const request = await signSubscribeRequest(signer, {
    chainId,
    manager,
    planId: p.planId,
    maxOverage: p.maxOverage,
    spendLimit: p.spendLimit,
    nonce: BigInt(info.intentNonce),
    deadline,
    permit,
  });
  return relaySubscribe(client, request, options);
}

/** Pauses, resumes, cancels or sets the overage cap of the signer's subscription through the facilitator. */
export async function changeSubscriptionThroughFacilitator(
  client: Pick<FacilitatorClient, "request" | "supported">,
  signer: TypedDataSigner,
  p: { subscriptionId: bigint; deadlineSeconds?: number | undefined } & (
    | { action: "pause" | "resume" | "cancel" }
    | { action: "overage"; maxOverage: bigint }
    | { action: "limit"; spendLimit: bigint }
  ),
  options?: RequestOptions,
): Promise<SubscriptionActionResponse> {
  const { chainId, manager } = await deployment(client, options);
  const info = await getSubscriberInfo(client, signer.address, options);
  const common = {
    chainId,
    manager,
    subscriptionId: p.subscriptionId,
    nonce: BigInt(info.intentNonce),
    deadline: BigInt(info.chainTime + (p.deadlineSeconds ?? 600)),
  };
  const request =
    p.action === "overage"
      ? await signSetMaxOverageRequest(signer, { ...common, maxOverage: p.maxOverage })
      : p.action === "limit"
        ? await signSetSpendLimitRequest(signer, { ...common, spendLimit: p.spendLimit })
        : await signSubscriptionActionRequest(signer, { ...common, action: p.action });
  return relaySubscriptionAction(client, p.subscriptionId, p.action, request, options);
}

/**
 * Sets the manager's allowance over the signer's `token` to exactly `value` through a relayed permit
 * (no gas, no RPC of its own). The facilitator relays it only for a signer holding a live subscription
 * in that token; a permit replaces the allowance, so `value` is the whole approval, not an increment.
 *
 * @example
 * await approveThroughFacilitator(facilitator, account, { token: plan.token, value: 90_000n });
 */
export async function approveThroughFacilitator(
  client: Pick<FacilitatorClient, "request" | "supported">,
  signer: TypedDataSigner,
  p: { token: Address; value: bigint; deadlineSeconds?: number | undefined },
  options?: RequestOptions,
): Promise<ApprovalResponse> {
  const { chainId, manager, supported } = await deployment(client, options);
  const token = supported.networks.flatMap((n) => n.tokens).find((t) => sameAddress(t.address, p.token));
  if (token === undefined) {
    throw new TollgateError("UnsupportedToken", "the facilitator does not serve that token", {
      details: { token: p.token },
    });
  }
  const info = await getSubscriberInfo(client, signer.address, { ...options, token: p.token });
  const request = await signApprovalRequest(signer, {
    manager,
    domain: { ...token.eip712, chainId, verifyingContract: token.address },
    value: p.value,
    nonce: BigInt(info.token?.permitNonce ?? "0"),
    deadline: BigInt(info.chainTime + (p.deadlineSeconds ?? 600)),
  });
  return relayApproval(client, request, options);
}
