/**
 * Every public function of `tollgate/client`, called with the wrong arguments, answers with a
 * `TollgateError` naming what it expected — never a `TypeError` from destructuring `undefined`.
 */
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import {
  createFacilitatorClient,
  createPayer,
  createPayX402,
  createX402Payment,
  fetchWithPayment,
  getPayment,
  parseTokenAmount,
  parseUsdcCeiling,
  payerReadHeaders,
  readPaymentRequired,
  registerProvider,
  subscribeToPlan,
} from "../client/index.ts";
import { TollgateError } from "../protocol/errors.ts";
import { createSubscriptionAuth } from "../schemes/subscription/client/subscriptionAuth.ts";

const account = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const facilitator = createFacilitatorClient({ url: "http://facilitator.test", fetch });
const NONCE = `0x${"ab".repeat(32)}`;

/** The code a call fails with: a TollgateError's code, or the name of any other error. */
async function failure(run: () => unknown): Promise<string> {
  try {
    await run();
  } catch (error) {
    return error instanceof TollgateError
      ? error.code
      : `untyped ${(error as Error)?.name}: ${String(error)}`;
  }
  return "accepted";
}

const any = (value: unknown) => value as never;

describe("tollgate/client inputs", () => {
  it.each([
    ["createPayer()", () => createPayer(any(undefined))],
    ["createPayer without an account", () => createPayer(any({ network: "eip155:1", facilitator }))],
    ["createFacilitatorClient()", () => createFacilitatorClient(any(undefined))],
    ["createFacilitatorClient without fetch", () => createFacilitatorClient(any({ url: "http://f.test" }))],
    ["fetchWithPayment()", () => fetchWithPayment(any(undefined), any(undefined), any(undefined))],
    ["getPayment without a facilitator", () => getPayment(any(undefined), NONCE)],
    ["registerProvider without an account", () => registerProvider(facilitator, any(undefined))],
    ["registerProvider without a facilitator", () => registerProvider(any(undefined), account)],
    ["payerReadHeaders()", () => payerReadHeaders(any(undefined), any(undefined))],
    ["payerReadHeaders without a request", () => payerReadHeaders(account, any(undefined))],
    ["readPaymentRequired()", () => readPaymentRequired(any(undefined))],
    ["createX402Payment()", () => createX402Payment(any(undefined), any(undefined), any(undefined))],
    [
      "createX402Payment without terms",
      () => createX402Payment(any({ network: "eip155:1" }), any({}), { maxPrice: "1" }),
    ],
    ["createPayX402()", () => createPayX402(any(undefined))],
    ["createSubscriptionAuth()", () => createSubscriptionAuth(any(undefined))],
    ["subscribeToPlan()", () => subscribeToPlan(any(undefined), any(undefined))],
    [
      "subscribeToPlan without options",
      () => subscribeToPlan({ signer: account, network: "eip155:1", facilitator }, any(undefined)),
    ],
  ])("%s is refused with InvalidRequest", async (_name, run) => {
    expect(await failure(run)).toBe("InvalidRequest");
  });

  it.each([
    ["parseUsdcCeiling()", () => parseUsdcCeiling(any(undefined))],
    ["parseUsdcCeiling(0.5)", () => parseUsdcCeiling(any(0.5))],
    ["parseTokenAmount()", () => parseTokenAmount(any(undefined), "maxOverage")],
    [
      "fetchWithPayment without maxPrice",
      () => fetchWithPayment(fetch, createPayer({ account, network: "eip155:1", facilitator }), any({})),
    ],
  ])("%s is refused with InvalidAmount", async (_name, run) => {
    expect(await failure(run)).toBe("InvalidAmount");
  });
});
