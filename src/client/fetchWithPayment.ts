/**
 * `fetchWithPayment` (docs/client.md): a `fetch` that answers a 402 by paying and retrying.
 *
 * Flow: send the request; on a 402, read the offer, choose an option within the price ceiling, pay it
 * with its scheme's client part, and send the request again with the part's credential (`X-PAYMENT`
 * for a one-time proof). If the gate refuses the payment (402 `InvalidPaymentProof`), the fresh 402 it
 * answered with is paid and retried, at most `maxProofRetries` times. Each payment is bounded by
 * `maxPrice`, so the most one call can spend is `maxPrice × (1 + maxProofRetries)`.
 *
 * A paid request answered 5xx is handed to the part that paid it (`resend`: a one-time proof is re-sent,
 * at most `maxServerErrorRetries` times, since the gate hands a proof back when its handler fails); a
 * fresh 402 is never paid after a 5xx, so a failing seller is paid at most once per call.
 *
 * The request body is buffered once, so the retry sends the same bytes (a stream cannot be replayed).
 *
 * What a scheme does besides paying one option comes from its client part's `flows`, asked through the
 * registry: a credential kept over the request's attempts (a subscription sent up front, taken out on
 * a 402, or refused), the default chooser's preference (a plan the caller allowed), and 402s whose
 * terms only it reads (x402's `PAYMENT-REQUIRED`). The client core names no scheme.
 */
import type { Address } from "viem";
import type { FacilitatorClient, FetchFn } from "../http/facilitatorClient.ts";
import { systemClock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import type { Network } from "../protocol/network.ts";
import type { PaymentOption } from "../protocol/paymentRequired.ts";
import { createSchemeRegistry } from "../schemes/registry.ts";
import type { ClientFlows, ClientSchemePart } from "../schemes/types.ts";
import { type BuiltinFetchPayer, clientSchemes } from "./clientSchemes.ts";
import type { ChoosePaymentOption, FetchWithPaymentOptions } from "./fetchOptions.ts";
import { type PaidCallSettings, runPaidCall } from "./paidCall.ts";
import { parseUsdcCeiling } from "./parseUsdcCeiling.ts";
import { oneTimePayersOf } from "./payableOptions.ts";
import type { PayerSigner, PaymentReceipt, PayOptions } from "./payerTypes.ts";

/** What `fetchWithPayment` needs of a payer: paying one option once, and optionally subscribing. */
export type FetchPayer = {
  readonly address: Address;
  readonly network: Network;
  readonly facilitator: FacilitatorClient;
  readonly account?: PayerSigner;
  pay(option: PaymentOption, options: PayOptions): Promise<PaymentReceipt>;
} & BuiltinFetchPayer;

/**
 * Wraps `fetch` so that 402s are paid.
 *
 * Throws `TollgateError`: `PriceCeilingExceeded` when every option costs more than `maxPrice`,
 * `UnsupportedNetwork` when no option is payable by this payer, `InvalidPaymentProof` when the gate
 * still refuses after the retries, `PaidRequestFailed` when a paid request keeps being answered 5xx
 * (`details`: `paid`, `amount`, `transaction`, `status`, `body`, and the `proof` header, redeemable
 * until `redeemableUntil`, unix seconds), and the payer's or facilitator's errors (`InsufficientFunds`, …).
 *
 * @example
 * const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "0.50" });
 * const response = await paidFetch("https://api.example.com/reports/1");
 */
export function fetchWithPayment(
  fetch: FetchFn,
  payer: FetchPayer,
  options: FetchWithPaymentOptions,
): FetchFn {
  const settings = paidCallSettings(fetch, payer, options);
  return async function fetchWithPayment(input, init) {
    return runPaidCall(settings, new Request(input, init));
  };
}

/** Checks the arguments once and looks up, once, what each registered client part does. */
function paidCallSettings(
  fetch: FetchFn,
  payer: FetchPayer,
  options: FetchWithPaymentOptions,
): PaidCallSettings {
  checkArguments(fetch, payer, options);
  const maxPrice = parseUsdcCeiling(options.maxPrice);
  const clock = options.clock ?? systemClock;
  const registry = createSchemeRegistry(clientSchemes, options.schemes ?? []);
  const flows = registry.schemes.flatMap((scheme) => {
    const part = scheme.client;
    if (part?.flows === undefined) return [];
    const built = part.flows({ payer, maxPrice, clock, options: options as Record<string, unknown> });
    return [{ id: scheme.id, flows: built }];
  });
  const maxProofRetries = options.maxProofRetries ?? 2;
  if (!Number.isSafeInteger(maxProofRetries) || maxProofRetries < 0 || maxProofRetries > 10) {
    throw new TollgateError("InvalidRequest", "fetchWithPayment: maxProofRetries must be an integer 0..10");
  }
  const maxResends = options.maxServerErrorRetries ?? 2;
  if (!Number.isSafeInteger(maxResends) || maxResends < 0 || maxResends > 10) {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment: maxServerErrorRetries must be an integer 0..10",
    );
  }
  const delayMs = delayOption(options.serverErrorRetryDelayMs, 500, "serverErrorRetryDelayMs");
  const maxDelayMs = delayOption(options.maxServerErrorRetryDelayMs, 10_000, "maxServerErrorRetryDelayMs");
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  if (options.choose !== undefined && typeof options.choose !== "function") {
    throw new TollgateError("InvalidRequest", "fetchWithPayment: choose must be a function");
  }
  const payers = (scheme: string) => registry.client(scheme);
  return {
    fetch,
    payer,
    options,
    maxPrice,
    clock,
    maxProofRetries,
    resend: { maxResends, delayMs, maxDelayMs, sleep },
    choose: options.choose ?? defaultChooser(flows.map((entry) => entry.flows)),
    payers,
    oneTimePayers: oneTimePayersOf(payers),
    upFrontParts: registry.schemes.flatMap((scheme) =>
      scheme.client?.upFront === undefined ? [] : [scheme.client as UpFrontPart],
    ),
    flows,
  };
}

type UpFrontPart = Required<Pick<ClientSchemePart, "upFront">> & ClientSchemePart;

/**
 * The default chooser: a part's preference first (the subscription part's: a plan the gate flags
 * for subscribers, within the price per period the caller allowed), otherwise the cheapest option
 * payable once.
 */
function defaultChooser(flows: readonly ClientFlows[]): ChoosePaymentOption {
  return (offered, context) => {
    if (context.refusal === undefined) {
      for (const flow of flows) {
        const preferred = flow.prefer?.(offered);
        if (preferred !== undefined) return preferred;
      }
    }
    return context.affordable[0];
  };
}

function checkArguments(fetch: FetchFn, payer: FetchPayer, options: FetchWithPaymentOptions): void {
  if (typeof fetch !== "function") {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment(fetch, payer, options): fetch must be a function",
    );
  }
  if (
    typeof payer !== "object" ||
    payer === null ||
    typeof payer.pay !== "function" ||
    typeof payer.network !== "string" ||
    typeof payer.facilitator?.url !== "string"
  ) {
    throw new TollgateError(
      "InvalidRequest",
      "fetchWithPayment(fetch, payer, options): payer is what createPayer returns",
    );
  }
  if (typeof options !== "object" || options === null) {
    throw new TollgateError(
      "InvalidRequest",
      'fetchWithPayment(fetch, payer, options): options need maxPrice, e.g. { maxPrice: "0.50" }',
    );
  }
}

function delayOption(value: number | undefined, fallback: number, name: string): number {
  const ms = value ?? fallback;
  if (!Number.isSafeInteger(ms) || ms < 0) {
    throw new TollgateError("InvalidRequest", `fetchWithPayment: ${name} must be a whole number of ms`);
  }
  return ms;
}
