/**
 * The scheme seam end to end: a toy scheme (test/support/toyScheme: its own folder, registered only
 * through the `schemes` option) is offered by a real gate next to `exact`, paid by `fetchWithPayment`,
 * served once, booked before the response leaves, and sent up front on the next call. Its facilitator
 * part (the toy bank) is reached on a real facilitator through one registration line, `schemes`; an
 * agent's paid tool buys through its agent part; and no file outside its folder names it.
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import type { ToolMessage } from "@langchain/core/messages";
import { Hono } from "hono";
import { getAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { createFacilitator } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import type { FetchFn } from "../src/http/facilitatorClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { PaymentRequiredSchema } from "../src/protocol/paymentRequired.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { createToyScheme, type ToySale, toyFacilitator } from "./support/toyScheme/index.ts";
import { signToyTicket, TOY_TICKET_HEADER } from "./support/toyScheme/ticket.ts";

const NETWORK = "eip155:31337" as const;
const TOKEN = getAddress("0x5fbdb2315678afecb367f032d93f642f64180aa3");
const PAY_TO = getAddress("0x70997970c51812dc3a010c7d01b50e0d17dc79c8");
/** The facilitator is never asked anything on these paths; a call fails the test. */
const unreachable: FetchFn = async () => {
  throw new Error("the toy scheme must not reach the facilitator");
};

function setup() {
  const secret = randomBytes(32);
  const sales: ToySale[] = [];
  const toy = createToyScheme(secret, sales);
  const gate = paymentGate({
    payTo: PAY_TO,
    network: NETWORK,
    token: { address: TOKEN, name: "USD Coin", version: "2" },
    facilitator: "http://127.0.0.1:9",
    fetch: unreachable,
    proofKeys: { keys: [] },
    memoSecret: randomBytes(32),
    schemes: [toy],
    routes: {
      "GET /api/toy": {
        pricing: [
          { type: "one-time", amount: 1_000n },
          { type: "toy", amount: 100n },
        ],
      },
      "GET /api/fail": { pricing: [{ type: "toy", amount: 100n }] },
      "GET /api/ticket": { pricing: [{ type: "toy", amount: 100n }] },
    },
  });
  const app = new Hono<PaymentGateEnv>();
  app.use("/api/*", honoPaymentGate(gate));
  app.get("/api/toy", (c) => {
    const payment = c.get("payment");
    return c.json({ scheme: payment?.scheme, amount: payment?.amount.toString(), booked: sales.length });
  });
  app.get("/api/ticket", (c) => c.json({ scheme: c.get("payment")?.scheme }));
  let failures = 1;
  app.get("/api/fail", (c) => (failures-- > 0 ? c.text("down", 503) : c.text("up")));
  const exchanges: Request[] = [];
  const fetch: FetchFn = async (input, init) => {
    const request = new Request(input, init);
    exchanges.push(request);
    return app.request(request);
  };
  const account = privateKeyToAccount(generatePrivateKey());
  const payer = createPayer({
    account,
    network: NETWORK,
    facilitator: "http://127.0.0.1:9",
    fetch: unreachable,
  });
  return { secret, sales, toy, gate, app, fetch, exchanges, payer, account };
}

/**
 * A facilitator that is built, not started: nothing reaches the chain, and the toy part only reads its
 * secret.
 */
function facilitatorOptions(store: Store) {
  return {
    store,
    rpcUrl: "http://127.0.0.1:9",
    network: NETWORK,
    gasAccount: privateKeyToAccount(generatePrivateKey()),
    proofKeys: [generateProofKey().key],
    batchSettler: PAY_TO,
    tokens: [{ address: TOKEN, name: "USD Coin", version: "2", symbol: "USDC", decimals: 6 }],
  };
}

describe("payment scheme seam", () => {
  it("offers a registered scheme's entry, with its extra terms, next to exact in the 402", async () => {
    const { app } = setup();
    const response = await app.request("/api/toy");
    expect(response.status).toBe(402);
    const body = PaymentRequiredSchema.parse(await response.json());
    expect(body.accepts.map((o) => [o.scheme, o.amount])).toEqual([
      ["exact", "1000"],
      ["toy", "100"],
    ]);
    expect(body.accepts[1]?.extra).toEqual({ bank: "toy" });
    // Only exact entries go into x402's header.
    const x402 = JSON.parse(Buffer.from(response.headers.get("payment-required") ?? "", "base64").toString());
    expect(x402.accepts).toHaveLength(1);
  });

  it("is paid by fetchWithPayment through the scheme's client part, served once and booked before the response", async () => {
    const { fetch, payer, toy, exchanges, sales } = setup();
    const paid: string[] = [];
    const paidFetch = fetchWithPayment(fetch, payer, {
      maxPrice: 5_000n,
      schemes: [toy],
      onSchemePayment: (payment) => paid.push(`${payment.scheme}:${payment.amount}`),
    });
    const response = await paidFetch("http://localhost/api/toy");
    expect(response.status).toBe(200);
    // The handler saw the toy payment, and the sale was booked before the body left.
    expect(await response.json()).toEqual({ scheme: "toy", amount: "100", booked: 0 });
    expect(sales).toEqual([{ nonce: expect.any(String), amount: 100n, status: 200 }]);
    expect(response.headers.get("x-toy-receipt")).toBe(sales[0]?.nonce);
    expect(paid).toEqual(["toy:100"]);
    expect(exchanges).toHaveLength(2);

    // The next call to the known route pays up front: one exchange.
    const again = await paidFetch("http://localhost/api/toy");
    expect(again.status).toBe(200);
    expect(exchanges).toHaveLength(3);
    expect(exchanges[2]?.headers.get(TOY_TICKET_HEADER)).not.toBeNull();
    expect(sales).toHaveLength(2);
  });

  it("refuses a replayed ticket, one for another path, and a forged one with a fresh 402", async () => {
    const { app, secret, account } = setup();
    const ticket = { p: account.address, a: "100", m: "GET", u: "/api/toy", n: "0".repeat(32) };
    const header = signToyTicket(secret, ticket);
    expect((await app.request("/api/toy", { headers: { [TOY_TICKET_HEADER]: header } })).status).toBe(200);
    const replay = await app.request("/api/toy", { headers: { [TOY_TICKET_HEADER]: header } });
    expect(replay.status).toBe(402);
    expect((await replay.json()).message).toMatch(/ticket already used/);
    const elsewhere = signToyTicket(secret, { ...ticket, u: "/api/other", n: "1".repeat(32) });
    const moved = await app.request("/api/toy", { headers: { [TOY_TICKET_HEADER]: elsewhere } });
    expect((await moved.json()).message).toMatch(/another request/);
    const forged = signToyTicket(randomBytes(32), { ...ticket, n: "2".repeat(32) });
    const refused = await app.request("/api/toy", { headers: { [TOY_TICKET_HEADER]: forged } });
    expect(refused.status).toBe(402);
    expect((await refused.json()).message).toMatch(/not signed by the toy bank/);
  });

  it("hands a ticket back through complete when the handler fails, so the same ticket is served once", async () => {
    const { app, secret, account, sales } = setup();
    const header = signToyTicket(secret, {
      p: account.address,
      a: "100",
      m: "GET",
      u: "/api/fail",
      n: "3".repeat(32),
    });
    const failed = await app.request("/api/fail", { headers: { [TOY_TICKET_HEADER]: header } });
    expect(failed.status).toBe(503);
    const served = await app.request("/api/fail", { headers: { [TOY_TICKET_HEADER]: header } });
    expect(served.status).toBe(200);
    expect((await app.request("/api/fail", { headers: { [TOY_TICKET_HEADER]: header } })).status).toBe(402);
    expect(sales.map((sale) => sale.status)).toEqual([503, 200]);
  });

  it("does not pay a scheme the client did not register, and a gate refuses pricing no scheme compiles", async () => {
    const { fetch, payer } = setup();
    // Without the toy scheme only exact is payable; its price is above this ceiling.
    const plain = fetchWithPayment(fetch, payer, { maxPrice: 500n });
    await expect(plain("http://localhost/api/toy")).rejects.toMatchObject({ code: "PriceCeilingExceeded" });
    let error: unknown;
    try {
      paymentGate({
        payTo: PAY_TO,
        network: NETWORK,
        token: TOKEN,
        facilitator: "http://127.0.0.1:9",
        memoSecret: randomBytes(32),
        pricing: [{ type: "toy", amount: 100n }],
      });
    } catch (caught) {
      error = caught;
    }
    expect(error).toBeInstanceOf(TollgateError);
    expect((error as TollgateError).message).toMatch(/no registered scheme prices type "toy"/);
  });

  it("refuses a scheme that would replace a built-in one", () => {
    const { toy } = setup();
    expect(() =>
      paymentGate({
        payTo: PAY_TO,
        network: NETWORK,
        token: TOKEN,
        facilitator: "http://127.0.0.1:9",
        memoSecret: randomBytes(32),
        schemes: [{ ...toy, id: "exact" }],
        pricing: [{ type: "one-time", amount: 1n }],
      }),
    ).toThrow(/registered twice/);
  });

  it("reaches the toy bank's facilitator part through one registration line, and redeems a served ticket once", async () => {
    const { app, secret, account } = setup();
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    const base = facilitatorOptions(store);
    try {
      const ticket = signToyTicket(secret, {
        p: account.address,
        a: "100",
        m: "GET",
        u: "/api/toy",
        n: "4".repeat(32),
      });
      expect((await app.request("/api/toy", { headers: { [TOY_TICKET_HEADER]: ticket } })).status).toBe(200);
      const redeem = (facilitator: { app: { request: Hono["request"] } }, text: string) =>
        facilitator.app.request("/toy/redeem", {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ ticket: text }),
        });

      const without = createFacilitator(base);
      expect((await redeem(without, ticket)).status).toBe(404);
      expect(without.schemes.has("toy")).toBe(false);

      const facilitator = createFacilitator({ ...base, schemes: [toyFacilitator(secret)] });
      const first = await redeem(facilitator, ticket);
      expect(first.status).toBe(200);
      expect(await first.json()).toEqual({ nonce: "4".repeat(32), payer: account.address, amount: "100" });
      const again = await redeem(facilitator, ticket);
      expect(again.status).toBe(409);
      expect((await again.json()).error).toMatchObject({ code: "NonceAlreadyUsed" });
      const forged = signToyTicket(randomBytes(32), {
        p: account.address,
        a: "1",
        m: "GET",
        u: "/",
        n: "5".repeat(32),
      });
      expect((await redeem(facilitator, forged)).status).toBe(402);

      // The same part through its functions: check, settle.
      const part = facilitator.schemes.get("toy");
      expect(await part?.check?.({ body: { ticket } })).toEqual({ valid: true });
      expect(await part?.check?.({ body: { ticket: forged } })).toEqual({
        valid: false,
        reason: "ticket not signed by the toy bank",
      });
      await expect(part?.settle?.({ body: { ticket } })).rejects.toMatchObject({ code: "NonceAlreadyUsed" });
      // The built-in parts are there beside it, in list order, the toy one last.
      expect([...facilitator.schemes.keys()]).toEqual([
        "exact",
        "x402Exact",
        "subscription",
        "metered",
        "channel",
        "toy",
      ]);
      expect(await facilitator.schemes.get("exact")?.check?.({ body: {} })).toEqual({
        valid: false,
        reason: "malformed",
      });
    } finally {
      await store.close();
    }
    // A store with its migrations takes seconds on a loaded machine.
  }, 120_000);
  it("runs from its folder alone: an agent's paid tool buys a toy route, the gate serves it once, the seller redeems the ticket at the facilitator", async () => {
    const { fetch, payer, toy, exchanges, sales, secret, account } = setup();
    const store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    try {
      const budget = createBudgetLedger({ store, clock: systemClock });
      await budget.setLimits("toy-buyer", { total: 1_000n });
      // The agent side: the same one registration, `schemes: [toy]`.
      const tool = paidTool(
        {
          name: "ticket",
          description: "A toy capability.",
          method: "GET",
          url: "http://localhost/api/ticket",
          input: {},
        },
        { agent: "toy-buyer", payer, budget, fetch, schemes: [toy] },
      );
      const message = (await tool.invoke({
        type: "tool_call",
        id: "t-1",
        name: "ticket",
        args: {},
      })) as ToolMessage;
      expect(JSON.parse(String(message.content))).toEqual({ scheme: "toy" });
      expect(message.artifact as PaidToolReceipt).toMatchObject({
        mode: "one-time",
        amount: "0.0001",
        provider: PAY_TO,
      });
      expect(sales).toEqual([{ nonce: expect.any(String), amount: 100n, status: 200 }]);
      const report = await budget.report("toy-buyer");
      expect([report.spent.total, report.reserved.total]).toEqual([100n, 0n]);

      // The seller redeems the ticket it served at a facilitator carrying the toy's facilitator part.
      const ticket = exchanges.map((r) => r.headers.get(TOY_TICKET_HEADER)).find((t) => t !== null);
      expect(ticket).toBeDefined();
      const facilitator = createFacilitator({
        ...facilitatorOptions(store),
        schemes: [toyFacilitator(secret)],
      });
      const redeemed = await facilitator.app.request("/toy/redeem", {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ ticket }),
      });
      expect(redeemed.status).toBe(200);
      expect(await redeemed.json()).toEqual({
        nonce: sales[0]?.nonce,
        payer: account.address,
        amount: "100",
      });
    } finally {
      await store.close();
    }
  }, 120_000);

  it("needs no file outside its folder: nothing in src/ names it, and its folder imports only the seam and the cores", () => {
    const root = resolve(import.meta.dirname, "..");
    const walk = (dir: string): string[] =>
      readdirSync(dir, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith(".ts") ? [join(dir, e.name)] : [],
      );
    // No built-in list, switch or registry in the code had to learn the toy's id (doc comments may
    // use it as an example).
    const codeOf = (text: string) => text.replace(/\/\*[\s\S]*?\*\//g, "").replace(/^\s*\/\/.*$/gm, "");
    const naming = walk(join(root, "src"))
      .filter((file) => !file.endsWith(".test.ts") && !file.includes("/artifacts/"))
      .filter((file) => /["'`]toy["'`]|toyScheme/.test(codeOf(readFileSync(file, "utf8"))))
      .map((file) => relative(root, file));
    expect(naming).toEqual([]);
    // The folder builds on the seam and the cores only: no built-in scheme, no side's list of built-ins.
    const folder = join(root, "test/support/toyScheme");
    const imports = walk(folder).flatMap((file) =>
      [...readFileSync(file, "utf8").matchAll(/from "(\.[^"]+)"/g)].map((m) =>
        relative(root, resolve(dirname(file), m[1] ?? "")),
      ),
    );
    const outside = imports.filter((path) => !path.startsWith("test/support/toyScheme/"));
    expect(outside.length).toBeGreaterThan(0);
    expect(
      outside.filter(
        (path) =>
          /^src\/schemes\/[^/]+\//.test(path) ||
          /(gateSchemes|clientSchemes|facilitatorSchemes|agentSchemes|builtinSchemes)\.ts$/.test(path) ||
          !/^src\/(protocol|http|schemes|gate|client|facilitator|agent)\//.test(path),
      ),
    ).toEqual([]);
  });
});
