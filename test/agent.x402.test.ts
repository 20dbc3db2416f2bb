/**
 * A paid tool buys from a standard x402 v2 server (`@x402/express`, whose facilitator client points at
 * `<facilitator>/x402`), through the agent's budget: the payment is reserved and committed like any
 * other, and a spend the budget refuses signs nothing.
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
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { createSpendCollector } from "../src/agent/spendReport.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { tollgateUsdDomain } from "../src/chain/networks.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const NETWORK = "eip155:31337" as const;
const PRICE = 10_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let payTo: Address;
let server: Server;
let origin: string;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 4 });
  tf = await startTestFacilitator(devnet);
  payTo = devnet.accounts[2]!.address;
  const resourceServer = new x402ResourceServer(
    new HTTPFacilitatorClient({ url: `${tf.url}/x402` }),
  ).register(NETWORK, new ExactEvmServerScheme());
  const app = express();
  app.use(express.json());
  app.use(
    paymentMiddleware(
      {
        "POST /weather": {
          accepts: {
            scheme: "exact" as const,
            network: NETWORK,
            payTo,
            price: { amount: PRICE.toString(), asset: devnet.contracts.usd, extra: { ...tollgateUsdDomain } },
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

async function weatherTool(agent: string, total: bigint) {
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
      url: `${origin}/weather`,
      input: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
    },
    {
      agent,
      payer: createPayer({ account, network: NETWORK, facilitator: tf.url }),
      budget,
      onSpend: spend.record,
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
  return { account, budget, spend, call };
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
