/**
 * A paid tool buys from a standard x402 v2 server (`@x402/express`, whose facilitator client points at
 * `<facilitator>/x402`), through the agent's budget: the payment is reserved and committed like any
 * other, and a spend the budget refuses signs nothing. A payment the seller answered with an error
 * (and did not settle) is held pending and read back from the chain: released once its authorization
 * expired unused, committed if the seller settled it after all.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { ToolMessage } from "@langchain/core/messages";
import { HTTPFacilitatorClient } from "@x402/core/http";
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import express from "express";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../src/agent/budget/pendingPayments.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { transferWithAuthorization } from "../src/chain/actions/usd/transferWithAuthorization.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { createFixedClock, systemClock } from "../src/protocol/clock.ts";
import { decodeJsonHeader } from "../src/protocol/header.ts";
import { authorizationMessage } from "../src/protocol/signedPayment.ts";
import { X402ExactEip3009PayloadSchema, X402PaymentPayloadSchema } from "../src/protocol/x402.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const NETWORK = "eip155:31337" as const;
const PRICE = 10_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let payTo: Address;
let server: Server;
let origin: string;
/** The PAYMENT-SIGNATURE headers the failing route received, in order: what its seller could settle. */
const flakyPayments: string[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  payTo = devnet.accounts[2]!.address;
  const resourceServer = new x402ResourceServer(
    new HTTPFacilitatorClient({ url: `${tf.url}/x402` }),
  ).register(NETWORK, new ExactEvmServerScheme());
  const accepts = {
    scheme: "exact" as const,
    network: NETWORK,
    payTo,
    price: {
      amount: PRICE.toString(),
      asset: devnet.contracts.usd,
      extra: { name: devnet.token.name, version: devnet.token.version },
    },
    maxTimeoutSeconds: 120,
  };
  const app = express();
  app.use(express.json());
  app.use("/flaky", (req, _res, next) => {
    const header = req.headers["payment-signature"];
    if (typeof header === "string") flakyPayments.push(header);
    next();
  });
  app.use(
    paymentMiddleware(
      {
        // Takes the payment, then fails: the x402 middleware settles only answers under 400.
        "POST /flaky": { accepts, description: "a forecast that fails", mimeType: "application/json" },
        "POST /weather": {
          accepts: {
            scheme: "exact" as const,
            network: NETWORK,
            payTo,
            price: {
              amount: PRICE.toString(),
              asset: devnet.contracts.usd,
              extra: { name: devnet.token.name, version: devnet.token.version },
            },
            maxTimeoutSeconds: 120,
          },
          description: "today's weather for a city",
          mimeType: "application/json",
        },
      },
      resourceServer,
    ),
  );
  app.post("/weather", (req, res) => {
    res.json({ city: (req.body as { city?: string }).city, forecast: "sunny" });
  });
  app.post("/flaky", (_req, res) => {
    res.status(500).json({ error: "Internal", message: "the forecast model is down" });
  });
  server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, "127.0.0.1", () => resolve(s));
  });
  origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise<void>((resolve) => (server ? server.close(() => resolve()) : resolve()));
  await tf?.stop();
  await devnet?.stop();
});

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function weatherTool(agent: string, total: bigint, options: { path?: string; chain?: boolean } = {}) {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd: 100_000n });
  const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
  await budget.setLimits(agent, { total });
  const spend = createSpendCollector();
  const tool = paidTool(
    {
      name: "weather",
      description: "Today's weather for a city.",
      method: "POST",
      url: `${origin}${options.path ?? "/weather"}`,
      input: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
    {
      agent,
      payer: createPayer({ account, network: NETWORK, facilitator: tf.url }),
      budget,
      onSpend: spend.record,
      ...(options.chain === true ? { chain: devnet.publicClient } : {}),
    },
  );
  const call = async () => {
    const message = (await tool.invoke({
      type: "tool_call",
      id: `${agent}-call`,
      name: "weather",
      args: { city: "Porto" },
    })) as ToolMessage;
    return { content: String(message.content), receipt: message.artifact as PaidToolReceipt };
  };
  const payer = {
    address: account.address,
    payment: createPayer({ account, network: NETWORK, facilitator: tf.url }).payment,
  };
  return { account, budget, spend, call, payer };
}

describe("a paid tool buying from a standard x402 server", () => {
  it("pays with PAYMENT-SIGNATURE out of the budget: result as content, receipt as artifact, ledger equals chain", async () => {
    const agent = await weatherTool("x402-buyer", 50_000n);
    const sellerBefore = await balanceOf(payTo);
    const { content, receipt } = await agent.call();
    expect(JSON.parse(content)).toEqual({ city: "Porto", forecast: "sunny" });
    expect(receipt).toMatchObject({ tool: "weather", mode: "one-time", amount: "0.01" });
    expect(receipt.provider?.toLowerCase()).toBe(payTo.toLowerCase());
    expect(await balanceOf(agent.account.address)).toBe(100_000n - PRICE);
    expect(await balanceOf(payTo)).toBe(sellerBefore + PRICE);
    const report = await agent.budget.report("x402-buyer");
    expect(report.spent.total).toBe(PRICE);
    expect(report.reserved.total).toBe(0n);
    expect(agent.spend.report().total).toBe(PRICE);
  });

  it("refuses a payment the budget cannot cover with BudgetExceeded text, and nothing moves", async () => {
    const agent = await weatherTool("x402-tight", PRICE - 1n);
    const { content, receipt } = await agent.call();
    expect(content).toMatch(/^ERROR BudgetExceeded/);
    expect(receipt).toMatchObject({ amount: "0", paid: false, error: { code: "BudgetExceeded" } });
    expect(await balanceOf(agent.account.address)).toBe(100_000n);
    expect((await agent.budget.report("x402-tight")).spent.total).toBe(0n);
  });
});

describe("an x402 payment the seller answered with an error", () => {
  /** The authorization of the latest payment the failing route took: its nonce and expiry. */
  const lastAuthorization = () => {
    const payload = decodeJsonHeader(flakyPayments.at(-1)!, X402PaymentPayloadSchema);
    return X402ExactEip3009PayloadSchema.parse(payload.payload);
  };

  it("is held pending, not spent, and released once its authorization expired unused on chain", async () => {
    const agent = await weatherTool("x402-failed", 50_000n, { path: "/flaky", chain: true });
    const { content, receipt } = await agent.call();
    expect(content).toMatch(
      /^ERROR Internal: weather answered 500 Internal after being sent a payment of 0\.01 USDC, held/,
    );
    expect(receipt).toMatchObject({ amount: "0", paid: false });
    const { authorization } = lastAuthorization();
    expect(authorization.from.toLowerCase()).toBe(agent.account.address.toLowerCase());
    // Nothing moved; the payment is held (it could still settle until it expires), not spent.
    expect(await balanceOf(agent.account.address)).toBe(100_000n);
    let report = await agent.budget.report("x402-failed");
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(PRICE);
    const [pending] = await agent.budget.pendingPayments("x402-failed");
    expect(pending).toMatchObject({ nonce: authorization.nonce, amount: PRICE, token: devnet.contracts.usd });

    // Before it expires the chain's "unused" proves nothing: still held.
    const now = await resolvePendingPayments({
      agent: "x402-failed",
      budget: agent.budget,
      payer: agent.payer,
      clock: systemClock,
      chain: devnet.publicClient,
    });
    expect(now.map((r) => r.outcome)).toEqual(["pending"]);
    // Without a chain to read it back it stays held too.
    const later = createFixedClock((Number(authorization.validBefore) + 61) * 1000);
    const blind = await resolvePendingPayments({
      agent: "x402-failed",
      budget: agent.budget,
      payer: agent.payer,
      clock: later,
    });
    expect(blind.map((r) => r.outcome)).toEqual(["pending"]);
    // Past validBefore and the skew, unused on chain: no transfer can use it any more.
    const resolved = await resolvePendingPayments({
      agent: "x402-failed",
      budget: agent.budget,
      payer: agent.payer,
      clock: later,
      chain: devnet.publicClient,
    });
    expect(resolved.map((r) => r.outcome)).toEqual(["released"]);
    report = await agent.budget.report("x402-failed");
    expect(report.spent.total).toBe(0n);
    expect(report.reserved.total).toBe(0n);
    expect(await agent.budget.pendingPayments("x402-failed")).toEqual([]);
  });

  it("is committed when the seller settles it after failing the call: ledger equals chain", async () => {
    const agent = await weatherTool("x402-late", 50_000n, { path: "/flaky", chain: true });
    const { content } = await agent.call();
    expect(content).toMatch(/^ERROR Internal/);
    const { authorization, signature } = lastAuthorization();
    // The seller (any holder of the header) settles the authorization on chain after answering 500.
    const seller = devnet.accounts[3]!;
    const hash = await transferWithAuthorization(devnet.walletClient(seller), {
      token: devnet.contracts.usd,
      authorization: authorizationMessage(authorization),
      signature,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    expect(await balanceOf(agent.account.address)).toBe(100_000n - PRICE);

    const resolved = await resolvePendingPayments({
      agent: "x402-late",
      budget: agent.budget,
      payer: agent.payer,
      clock: systemClock,
      chain: devnet.publicClient,
    });
    expect(resolved.map((r) => r.outcome)).toEqual(["settled"]);
    const report = await agent.budget.report("x402-late");
    expect(report.spent.total).toBe(PRICE);
    expect(report.reserved.total).toBe(0n);
    expect(100_000n - (await balanceOf(agent.account.address))).toBe(report.spent.total);
  });

  it("counts as spent when the agent has no chain to read it back (the ledger never under-counts)", async () => {
    const agent = await weatherTool("x402-blind", 50_000n, { path: "/flaky" });
    const { content } = await agent.call();
    expect(content).toMatch(/^ERROR Internal: weather answered 500 Internal after being paid 0\.01 USDC/);
    const report = await agent.budget.report("x402-blind");
    expect(report.spent.total).toBe(PRICE);
    expect(report.reserved.total).toBe(0n);
    expect(await agent.budget.pendingPayments("x402-blind")).toEqual([]);
  });
});
