/**
 * Signers for the SubscriptionManager's relayed calls. Each intent commits to the subscriber's current
 * `nonces(subscriber)` (`getSubscriptionNonce`) and a deadline (unix seconds, inclusive), so a relayer can
 * submit it once and only until then.
 */
import type { Address, Hex } from "viem";
import {
  cancelIntentTypes,
  pauseIntentTypes,
  resumeIntentTypes,
  setMaxOverageIntentTypes,
  setSpendLimitIntentTypes,
  subscribeIntentTypes,
  subscriptionManagerDomain,
} from "./eip712Types.ts";
import type { TypedDataSigner } from "./typedDataSigner.ts";

export type IntentDomain = { chainId: number; manager: Address };

/**
 * Signs a Subscribe intent for `subscribeFor`: the signer subscribes to `planId` with a per-cycle
 * overage cap and a spend limit (the most ever pulled for the subscription; `NO_SPEND_LIMIT` for none).
 */
export function signSubscribeIntent(
  signer: TypedDataSigner,
  p: IntentDomain & {
    planId: bigint;
    maxOverage: bigint;
    spendLimit: bigint;
    nonce: bigint;
    deadline: bigint;
  },
): Promise<Hex> {
  return signer.signTypedData({
    domain: subscriptionManagerDomain(p.chainId, p.manager),
    types: subscribeIntentTypes,
    primaryType: "Subscribe",
    message: {
      subscriber: signer.address,
      planId: p.planId,
      maxOverage: p.maxOverage,
      spendLimit: p.spendLimit,
      nonce: p.nonce,
      deadline: p.deadline,
    },
  });
}

type ActionIntent = IntentDomain & { subscriptionId: bigint; nonce: bigint; deadline: bigint };

function message(p: ActionIntent) {
  return { subscriptionId: p.subscriptionId, nonce: p.nonce, deadline: p.deadline };
}

/** Signs a Pause intent for `pauseFor`. */
export function signPauseIntent(signer: TypedDataSigner, p: ActionIntent): Promise<Hex> {
  return signer.signTypedData({
    domain: subscriptionManagerDomain(p.chainId, p.manager),
    types: pauseIntentTypes,
    primaryType: "Pause",
    message: message(p),
  });
}

/** Signs a Resume intent for `resumeFor`. */
export function signResumeIntent(signer: TypedDataSigner, p: ActionIntent): Promise<Hex> {
  return signer.signTypedData({
    domain: subscriptionManagerDomain(p.chainId, p.manager),
    types: resumeIntentTypes,
    primaryType: "Resume",
    message: message(p),
  });
}

/** Signs a Cancel intent for `cancelFor`. */
export function signCancelIntent(signer: TypedDataSigner, p: ActionIntent): Promise<Hex> {
  return signer.signTypedData({
    domain: subscriptionManagerDomain(p.chainId, p.manager),
    types: cancelIntentTypes,
    primaryType: "Cancel",
    message: message(p),
  });
}

/** Signs a SetMaxOverage intent for `setMaxOverageFor`. */
export function signSetMaxOverageIntent(
  signer: TypedDataSigner,
  p: ActionIntent & { maxOverage: bigint },
): Promise<Hex> {
  return signer.signTypedData({
    domain: subscriptionManagerDomain(p.chainId, p.manager),
    types: setMaxOverageIntentTypes,
    primaryType: "SetMaxOverage",
    message: { ...message(p), maxOverage: p.maxOverage },
  });
}

/** Signs a SetSpendLimit intent for `setSpendLimitFor`. */
export function signSetSpendLimitIntent(
  signer: TypedDataSigner,
  p: ActionIntent & { spendLimit: bigint },
): Promise<Hex> {
  return signer.signTypedData({
    domain: subscriptionManagerDomain(p.chainId, p.manager),
    types: setSpendLimitIntentTypes,
    primaryType: "SetSpendLimit",
    message: { ...message(p), spendLimit: p.spendLimit },
  });
}
