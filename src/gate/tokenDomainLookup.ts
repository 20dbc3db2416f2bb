/**
 * The token's EIP-712 domain (`{ name, version }`), which x402 clients sign with and a gate's 402
 * states in `PAYMENT-REQUIRED`: as configured, or looked up once from the facilitator's `/supported`.
 *
 * Invariants: concurrent callers share one lookup; a failed lookup is logged and not repeated for
 * `DOMAIN_LOOKUP_BACKOFF_MS` (meanwhile 402s go out without `PAYMENT-REQUIRED`); a found domain is
 * kept for good.
 */
import type { Address } from "viem";
import type { FacilitatorClient } from "../http/facilitatorClient.ts";
import type { Clock } from "../protocol/clock.ts";
import type { Network } from "../protocol/network.ts";
import type { GateLogger } from "./gateLogger.ts";

/** How long a failed `/supported` lookup of the token's EIP-712 domain is not repeated. */
export const DOMAIN_LOOKUP_BACKOFF_MS = 30_000;

export type TokenDomain = { name: string; version: string };

export type TokenDomainSource = {
  facilitator: FacilitatorClient;
  network: Network;
  token: Address;
  clock: Clock;
  logger: GateLogger | undefined;
};

export class TokenDomainLookup {
  #domain: TokenDomain | undefined;
  #lookup: Promise<void> | undefined;
  #failedAt = Number.NEGATIVE_INFINITY;
  readonly #source: TokenDomainSource;

  constructor(configured: TokenDomain | undefined, source: TokenDomainSource) {
    this.#domain = configured;
    this.#source = source;
  }

  /** The domain, looking it up when it is not known and no lookup failed within the backoff. */
  async get(): Promise<TokenDomain | undefined> {
    const { clock } = this.#source;
    if (this.#domain !== undefined || clock.now() - this.#failedAt < DOMAIN_LOOKUP_BACKOFF_MS) {
      return this.#domain;
    }
    this.#lookup ??= this.#lookUp().finally(() => {
      this.#lookup = undefined;
    });
    await this.#lookup;
    return this.#domain;
  }

  #lookUp(): Promise<void> {
    const { facilitator, network, token, clock, logger } = this.#source;
    return facilitator
      .supported()
      .then((supported) => {
        const found = supported.networks
          .find((n) => n.network === network)
          ?.tokens.find((t) => t.address.toLowerCase() === token.toLowerCase());
        if (found === undefined) throw new Error("token not listed by the facilitator");
        this.#domain = found.eip712;
      })
      .catch((error: unknown) => {
        this.#failedAt = clock.now();
        logger?.warn(
          { err: error },
          "token EIP-712 domain lookup failed; 402s go out without PAYMENT-REQUIRED",
        );
      });
  }
}
