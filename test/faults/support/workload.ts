/**
 * The load the fault suite and the soak put on the stack: payers buying one-time requests at the gates
 * the way a careful client does — a 402, `payer.pay`, the paid retry — recovering the way Tollgate's
 * docs say: a payment whose `/authorize` failed is read back by its nonce (`GET /payments/:nonce`,
 * idempotent), and a proof whose presentation failed (gate down, 5xx) is presented again, at another
 * gate if need be, after the answer's `Retry-After` when it gives one (503 `PaymentInFlight`: the proof
 * is held by a request a killed gate never answered, until its lease lapses). Every attempt is recorded
 * for the reconciliation.
 */
import type { Hex } from "viem";
import type { DevnetAccount } from "../../../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../../../src/client/createPayer.ts";
import { memoNonce } from "../../../src/protocol/memo.ts";
import { PaymentRequiredSchema } from "../../../src/protocol/paymentRequired.ts";
import type { FaultStack } from "./faultStack.ts";

export type Purchase = {
  payer: string;
  nonce: Hex | undefined;
  /** The payer holds a proof: the facilitator told it the payment succeeded. */
  paid: boolean;
  /** A gate answered 200 to the paid request. */
  served: boolean;
  /** Why the purchase stopped short, when it did. */
  error?: string;
  /** How the gate refused the proof, when it did (a gate killed after consuming it). */
  refusal?: string;
  /** Answers 503 `PaymentInFlight` to the proof before it was served: a gate died holding it. */
  inFlightWaits: number;
  latencyMs: number;
  startedAt: number;
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

async function fetchSoft(url: string, init?: RequestInit): Promise<Response | undefined> {
  try {
    return await fetch(url, { ...init, signal: AbortSignal.timeout(15_000) });
  } catch {
    return undefined;
  }
}

/** One purchase at a gate; never throws. */
export async function buyOnce(
  stack: FaultStack,
  payer: Payer,
  path: string,
  pick: number,
): Promise<Purchase> {
  const startedAt = Date.now();
  let inFlightWaits = 0;
  const done = (p: Omit<Purchase, "payer" | "latencyMs" | "startedAt" | "inFlightWaits">): Purchase => ({
    payer: payer.address,
    latencyMs: Date.now() - startedAt,
    startedAt,
    inFlightWaits,
    ...p,
  });
  const gateUrl = (i: number) => stack.gateUrls[(pick + i) % stack.gateUrls.length]!;
  // The 402: from any gate that is up.
  let terms: unknown;
  for (let i = 0; i < 20 && terms === undefined; i++) {
    const response = await fetchSoft(`${gateUrl(i)}${path}`);
    if (response?.status === 402) terms = await response.json();
    else await sleep(200);
  }
  if (terms === undefined) return done({ nonce: undefined, paid: false, served: false, error: "no 402" });
  const parsed = PaymentRequiredSchema.safeParse(terms);
  const memo = parsed.success ? parsed.data.accepts[0]?.memo : undefined;
  const nonce = memo === undefined ? undefined : memoNonce(memo);
  // Pay; after a failure that may have left the payment queued, read it back by nonce.
  let header: string | undefined;
  let lastError = "";
  try {
    header = (await payer.pay(terms as never)).header;
  } catch (error) {
    lastError = (error as { code?: string }).code ?? String(error);
  }
  for (let i = 0; header === undefined && nonce !== undefined && i < 60; i++) {
    try {
      const record = await payer.payment(nonce);
      if (record.status === "settled" && record.proof !== undefined) {
        header = Buffer.from(JSON.stringify(record.proof)).toString("base64");
        break;
      }
      if (record.status === "failed") break;
    } catch (error) {
      const code = (error as { code?: string }).code ?? "";
      // NotFound: the payment was refused before a row was written; nothing was queued.
      if (code === "NotFound") break;
    }
    await sleep(500);
  }
  if (header === undefined) return done({ nonce, paid: false, served: false, error: lastError || "unpaid" });
  // Present the proof; again at another gate while gates are down or answer 5xx, for up to a minute
  // (a proof held by a killed gate's request comes back when its lease lapses: faultStack.ts, PROOF_LEASE_SECONDS).
  const giveUpAt = Date.now() + 60_000;
  for (let i = 0; Date.now() < giveUpAt; i++) {
    const response = await fetchSoft(`${gateUrl(i)}${path}`, { headers: { "X-PAYMENT": header } });
    if (response?.status === 200) {
      await response.text();
      return done({ nonce, paid: true, served: true });
    }
    if (response !== undefined && response.status < 500) {
      const text = await response.text();
      return done({ nonce, paid: true, served: false, refusal: `${response.status} ${text.slice(0, 200)}` });
    }
    const retryAfter = Number(response?.headers.get("retry-after") ?? Number.NaN);
    if (response !== undefined) {
      const text = await response.text();
      if (response.status === 503 && text.includes("PaymentInFlight")) inFlightWaits += 1;
    }
    await sleep(Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter * 1000 : 250);
  }
  return done({ nonce, paid: true, served: false, error: "gate never answered" });
}

/**
 * `payers.length` loops of purchases until `stop()`; `slowShare` of them hit the slow route, chosen by
 * `random` (uniform in [0, 1): the run's seeded generator).
 */
export function runPurchases(
  stack: FaultStack,
  payers: readonly DevnetAccount[],
  options: { slowShare: number; random: () => number; pauseMs?: number },
): { purchases: Purchase[]; stop(): Promise<void> } {
  const purchases: Purchase[] = [];
  let stopping = false;
  const loops = payers.map(async (account, index) => {
    const payer = createPayer({
      account: account.account,
      network: stack.devnet.network,
      facilitator: stack.client(),
    });
    for (let n = 0; !stopping; n++) {
      const path = options.random() < options.slowShare ? "/api/slow" : "/api/item";
      purchases.push(await buyOnce(stack, payer, path, index + n));
      if (options.pauseMs !== undefined) await sleep(options.pauseMs);
    }
  });
  return {
    purchases,
    async stop() {
      stopping = true;
      await Promise.all(loops);
    },
  };
}
