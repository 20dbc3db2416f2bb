/**
 * Logs of a facilitator, a gate and an agent in one flow, read back from the buffer pino writes to:
 * every line is one JSON object with one `name`, a settlement and a refusal are one info line each,
 * and no line carries a memo or a payment proof.
 */
import { Writable } from "node:stream";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { summarizer } from "../agents/summarizer.ts";
import { createBudgetLedger, createSpecialist, discoverTools, type Specialist } from "../src/agent/index.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { createLogger } from "../src/facilitator/createLogger.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

/** Every line written, as written. */
const lines: string[] = [];
const destination = new Writable({
  write(chunk: Buffer, _encoding, done) {
    for (const line of chunk.toString("utf8").split("\n")) if (line !== "") lines.push(line);
    done();
  },
});

let devnet: Devnet;
let store: Store;
let tf: TestFacilitator;
let seller: Specialist;
/** Memos and X-PAYMENT headers the agent saw and sent: none may reach a log line. */
const secrets: string[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  // The store logs the migrations it applies (on a fresh PGlite): each with one `name` too.
  store = await createTestStore({
    databaseUrl: process.env.DATABASE_URL,
    logger: createLogger({ name: "store", level: "info", destination }),
  });
  tf = await startTestFacilitator(devnet, {
    store,
    logger: createLogger({ name: "facilitator", level: "info", destination }),
  });
  // The seller's application logger, with the gate's lines (debug included) under a component key.
  const api = createLogger({ name: "summarizer-api", level: "debug", destination });
  seller = createSpecialist({
    name: "summarizer",
    account: devnet.accounts[2]!.account,
    capabilities: [summarizer],
    facilitator: tf.url,
    network: devnet.network,
    token: devnet.contracts.usd,
    logger: api.child({ component: "specialist" }),
  });
  await seller.start();
}, 180_000);

afterAll(async () => {
  await seller?.stop();
  await tf?.stop();
  await store?.close();
  await devnet?.stop();
});

/** The top-level keys of a JSON object's text, duplicates kept (JSON.parse keeps the last silently). */
function topLevelKeys(text: string): string[] {
  const keys: string[] = [];
  let depth = 0;
  let expectKey = false;
  for (let i = 0; i < text.length; i++) {
    const ch = text[i]!;
    if (ch === '"') {
      let end = i + 1;
      while (text[end] !== '"') end += text[end] === "\\" ? 2 : 1;
      if (depth === 1 && expectKey) keys.push(JSON.parse(text.slice(i, end + 1)) as string);
      expectKey = false;
      i = end;
    } else if (ch === "{" || ch === "[") {
      depth++;
      expectKey = ch === "{" && depth === 1;
    } else if (ch === "}" || ch === "]") {
      depth--;
    } else if (ch === "," && depth === 1) {
      expectKey = true;
    }
  }
  return keys;
}

async function newAgent(name: string, usd: bigint) {
  const account = privateKeyToAccount(generatePrivateKey());
  if (usd > 0n) await devnet.fund(account.address, { usd });
  const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(name, { total: 500_000n });
  const logger = createLogger({ name: "agent", level: "info", destination }).child({ agent: name });
  // The agent's fetch, watched: what it must never find in a log.
  const fetch = async (input: Request | string | URL, init?: RequestInit) => {
    const request = new Request(input, init);
    const header = request.headers.get("x-payment");
    if (header !== null) secrets.push(header);
    const response = await globalThis.fetch(request);
    if (response.status === 402) {
      const body = (await response.clone().json()) as { accepts: { memo: string }[] };
      for (const option of body.accepts) secrets.push(option.memo);
    }
    return response;
  };
  const [tool] = await discoverTools({ urls: [seller.url!], agent: name, payer, budget, fetch, logger });
  return { account, tool: tool!.tool };
}

describe("logs", () => {
  it("are JSON lines with one name each; one line per settlement and per refusal, without secrets", async () => {
    const text = "Tollgate charges per request. Agents buy tools. Budgets keep spending bounded. The end.";
    const rich = await newAgent("rich", 1_000_000n);
    const bought = await rich.tool.invoke({ type: "tool_call", id: "a", name: "summarize", args: { text } });
    expect(bought.artifact).toMatchObject({ mode: "one-time", amount: "0.02" });

    const poor = await newAgent("poor", 0n);
    const refused = await poor.tool.invoke({ type: "tool_call", id: "b", name: "summarize", args: { text } });
    expect(String(refused.content)).toMatch(/^ERROR InsufficientFunds/);

    // A forged proof at the gate: refused, and the gate says so through the seller's logger.
    const forged = await fetch(`${seller.url}/summarize`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-payment": "bm90IGEgcHJvb2Y=" },
      body: JSON.stringify({ text }),
    });
    expect(forged.status).toBe(402);

    // A gate given a logger warns there, not through process.emitWarning.
    const warnings: Error[] = [];
    const onWarning = (warning: Error) => warnings.push(warning);
    process.on("warning", onWarning);
    const gate = paymentGate({
      payTo: devnet.accounts[2]!.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: tf.url,
      publicOrigin: "http://127.0.0.1:1",
      routes: { "POST /x": { price: "0.01" } },
      logger: createLogger({ name: "gate", level: "info", destination }),
    });
    await gate.close();
    await new Promise((resolve) => setImmediate(resolve));
    process.off("warning", onWarning);
    expect(warnings).toEqual([]);

    expect(lines.length).toBeGreaterThan(0);
    const entries = lines.map((line) => {
      const keys = topLevelKeys(line);
      expect(
        keys.filter((key) => key === "name"),
        line,
      ).toHaveLength(1);
      expect(new Set(keys).size, `duplicate keys in ${line}`).toBe(keys.length);
      return JSON.parse(line) as Record<string, unknown>;
    });
    const settled = entries.filter((e) => e.event === "payment.settled" && e.payer === rich.account.address);
    expect(settled).toHaveLength(1);
    expect(settled[0]).toMatchObject({
      name: "facilitator",
      level: 30,
      amount: "20000",
      msg: "payment settled",
    });
    const refusals = entries.filter((e) => e.event === "payment.refused");
    expect(refusals).toHaveLength(1);
    expect(refusals[0]).toMatchObject({
      name: "facilitator",
      level: 30,
      code: "InsufficientFunds",
      payer: poor.account.address,
      msg: "payment refused",
    });
    expect(entries.some((e) => e.name === "summarizer-api" && e.msg === "payment proof refused")).toBe(true);
    expect(entries.some((e) => e.name === "gate" && String(e.msg).includes("memoSecret"))).toBe(true);
    expect(
      entries.some((e) => e.name === "agent" && e.agent === "poor" && e.msg === "paid tool call failed"),
    ).toBe(true);

    expect(secrets.length).toBeGreaterThan(2);
    for (const secret of secrets) {
      for (const line of lines) expect(line.includes(secret), "a memo or proof in a log line").toBe(false);
    }
  }, 120_000);
});
