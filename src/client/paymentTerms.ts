/**
 * What `payer.pay(terms)` accepts as the terms to pay (the specification's `agent.pay(terms)`), read
 * into the one `exact` option that gets paid:
 *
 * - one `accepts` entry of a 402 (`PaymentOption`): paid as given;
 * - the whole 402 body (`PaymentRequired`): the cheapest option this payer can pay once;
 * - the 402 `Response` itself: its body, read from a clone (the caller's response stays readable).
 *
 * Everything else is refused with a `TollgateError` saying what was expected, before anything is
 * signed: terms come from a server, so they are parsed with the protocol's schemas, never trusted.
 */
import { TollgateError } from "../protocol/errors.ts";
import {
  type PaymentOption,
  PaymentOptionSchema,
  type PaymentRequired,
  PaymentRequiredSchema,
} from "../protocol/paymentRequired.ts";
import { affordableOptions, type CallPayers, noAffordableOption, type PayerView } from "./payableOptions.ts";
import { readPaymentRequired } from "./readPaymentRequired.ts";

/** Terms `payer.pay` pays: one 402 option, the 402 body, or the 402 response. */
export type PaymentTerms = PaymentOption | PaymentRequired | Response;

const EXPECTED =
  "pay() takes one `accepts` entry of a 402, the whole 402 body, the 402 Response, or (with maxAmount) a URL or Request to fetch and pay";

/**
 * The option to pay for `terms`. `maxAmount` (smallest units) only narrows the choice among a 402's
 * options here; the payer checks the chosen option against it again before signing. `payers`: the
 * parts whose options the payer pays once.
 */
export async function paymentOptionOf(
  terms: unknown,
  payer: PayerView,
  maxAmount: bigint | undefined,
  payers: CallPayers,
): Promise<PaymentOption> {
  if (isResponseLike(terms)) return optionOfBody(await bodyOf(terms), payer, maxAmount, payers);
  if (typeof terms !== "object" || terms === null) {
    throw new TollgateError("InvalidRequest", EXPECTED, { details: { type: typeOf(terms) } });
  }
  if ("accepts" in terms) {
    const parsed = PaymentRequiredSchema.safeParse(terms);
    if (!parsed.success) throw malformed("402 body", parsed.error.issues);
    return optionOfBody(parsed.data, payer, maxAmount, payers);
  }
  if ("scheme" in terms) {
    const parsed = PaymentOptionSchema.safeParse(terms);
    if (!parsed.success) throw malformed("402 option", parsed.error.issues);
    // The caller's own object, checked: receipts carry the very option that was chosen.
    return terms as PaymentOption;
  }
  throw new TollgateError("InvalidRequest", EXPECTED, { details: { keys: Object.keys(terms).slice(0, 10) } });
}

async function bodyOf(response: Response): Promise<PaymentRequired> {
  if (response.status !== 402) {
    throw new TollgateError("InvalidRequest", `pay() was given a ${response.status} response, not a 402`, {
      details: { status: response.status },
    });
  }
  if (response.bodyUsed) {
    throw new TollgateError(
      "InvalidRequest",
      "the 402 response's body was already read: pass the parsed body",
    );
  }
  const offer = await readPaymentRequired(response.clone());
  if (offer?.kind === "tollgate") return offer.body;
  throw new TollgateError(
    "InvalidRequest",
    offer === undefined
      ? "this 402 carries no payment terms Tollgate can read"
      : `this 402 carries only ${offer.kind} terms, no accepts body: pay it with fetchWithPayment, which pays them`,
  );
}

function optionOfBody(
  body: PaymentRequired,
  payer: PayerView,
  maxAmount: bigint | undefined,
  payers: CallPayers,
): PaymentOption {
  const ceiling = maxAmount ?? (1n << 256n) - 1n;
  const chosen = affordableOptions(body.accepts, payer, ceiling, payers)[0];
  if (chosen === undefined) throw noAffordableOption(body.accepts, payer, ceiling, payers);
  return chosen;
}

function malformed(what: string, issues: readonly { path: PropertyKey[]; message: string }[]): TollgateError {
  return new TollgateError("InvalidRequest", `pay(): not a valid ${what}`, {
    details: {
      issues: issues
        .slice(0, 5)
        .map((issue) => ({ path: issue.path.map(String).join("."), message: issue.message })),
    },
  });
}

/**
 * A fetch `Response`, by shape: `instanceof Response` fails across implementations (undici's,
 * `@hono/node-server`'s replacement of the global, a polyfill), and a caller's response may come
 * from any of them.
 */
export function isResponseLike(value: unknown): value is Response {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as Partial<Response>;
  return (
    typeof candidate.status === "number" &&
    typeof candidate.clone === "function" &&
    typeof candidate.text === "function" &&
    typeof candidate.headers?.get === "function"
  );
}

/** A fetch `Request`, by shape (see `isResponseLike`). */
export function isRequestLike(value: unknown): value is Request {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as Partial<Request>;
  return (
    typeof candidate.url === "string" &&
    typeof candidate.method === "string" &&
    typeof candidate.clone === "function" &&
    typeof candidate.headers?.get === "function"
  );
}

function typeOf(value: unknown): string {
  return value === null ? "null" : typeof value;
}
