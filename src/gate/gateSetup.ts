/**
 * What `paymentGate` builds once from its checked options: its effects (clock, random source,
 * facilitator client, replay guard, logger), its memo secret, its token, and the context every
 * scheme's gate part is created with (`GateSchemeContext`).
 */
import { randomBytes } from "node:crypto";
import type { Address } from "viem";
import { createFacilitatorClient, type FacilitatorClient } from "../http/facilitatorClient.ts";
import { normalizeAddress } from "../http/rateLimits.ts";
import { USDC_DECIMALS } from "../protocol/amount.ts";
import { type Clock, systemClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { GateSchemeContext } from "../schemes/types.ts";
import { createMemoryReplayGuard } from "../store/createMemoryReplayGuard.ts";
import type { ReplayGuard } from "../store/replayGuard.ts";
import type { GateLogger } from "./gateLogger.ts";
import { memoSecretOf } from "./memo.ts";
import type { ParsedPaymentGateOptions } from "./paymentGateOptions.ts";
import { TokenDomainLookup } from "./tokenDomainLookup.ts";

export type GateSetup = {
  config: ParsedPaymentGateOptions;
  clock: Clock;
  random: (bytes: number) => Uint8Array;
  logger: GateLogger | undefined;
  memoSecret: Uint8Array;
  /** The origin of the URL routes functions are given; never the request's `Host`. */
  routeOrigin: string;
  trustedProxies: ReadonlySet<string>;
  token: Address;
  /** The token's decimals, for prices given as token text. */
  decimals: number;
  memoTtlSeconds: number;
  facilitator: FacilitatorClient;
  replayGuard: ReplayGuard;
  tokenDomain: TokenDomainLookup;
};

/** The gate's setup from its options (already checked by `PaymentGateOptionsSchema`). */
export function gateSetupOf(config: ParsedPaymentGateOptions): GateSetup {
  const clock: Clock = config.clock ?? systemClock;
  const logger: GateLogger | undefined = config.logger;
  const random = config.random ?? ((bytes: number) => randomBytes(bytes));
  const memoSecret = memoSecretOfOptions(config.memoSecret, logger);
  const token = typeof config.token === "string" ? { address: config.token } : config.token;
  const facilitator: FacilitatorClient =
    typeof config.facilitator === "string"
      ? createFacilitatorClient({ url: config.facilitator, fetch: config.fetch ?? globalThis.fetch })
      : config.facilitator;
  return {
    config,
    clock,
    random,
    logger,
    memoSecret,
    routeOrigin: config.publicOrigin ?? "http://localhost",
    trustedProxies: new Set(
      (config.trustedProxies ?? []).map((address) => normalizeAddress(address) ?? address),
    ),
    token: token.address,
    decimals: token.decimals ?? USDC_DECIMALS,
    memoTtlSeconds: config.memoTtlSeconds ?? 300,
    facilitator,
    replayGuard: config.replayGuard ?? createMemoryReplayGuard({ clock }),
    tokenDomain: new TokenDomainLookup(
      token.name !== undefined && token.version !== undefined
        ? { name: token.name, version: token.version }
        : undefined,
      { facilitator, network: config.network, token: token.address, clock, logger },
    ),
  };
}

/** What every scheme's gate part is created with. */
export function schemeContextOf(setup: GateSetup): GateSchemeContext {
  const { config } = setup;
  return {
    payTo: config.payTo,
    network: config.network,
    token: setup.token,
    decimals: setup.decimals,
    facilitator: setup.facilitator,
    replayGuard: setup.replayGuard,
    clock: setup.clock,
    random: setup.random,
    memoSecret: setup.memoSecret,
    memoTtlSeconds: setup.memoTtlSeconds,
    publicOrigin: config.publicOrigin,
    logger: setup.logger,
    tokenEip712: () => setup.tokenDomain.get(),
    options: config as GateSchemeContext["options"],
  };
}

/** The configured memo secret, checked; without one a random secret for this process, with a warning. */
function memoSecretOfOptions(
  configured: ParsedPaymentGateOptions["memoSecret"],
  logger: GateLogger | undefined,
): Uint8Array {
  if (configured === undefined) {
    const note =
      "paymentGate: no memoSecret given, so this process uses a random one. Several instances serving one API must share one secret (e.g. TOLLGATE_MEMO_SECRET), or each refuses the others' memos.";
    // Not `random`: that one is injectable for memos and may be deterministic in tests.
    const secret = randomBytes(32);
    if (logger === undefined) process.emitWarning(note, { code: "TOLLGATE_MEMO_SECRET_GENERATED" });
    else logger.warn({}, note);
    return secret;
  }
  try {
    return memoSecretOf(configured);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `paymentGate options: memoSecret: ${(cause as Error).message}`);
  }
}
