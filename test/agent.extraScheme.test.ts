/**
 * A paid tool buys through a scheme that is not built in: the toy scheme (test/support/toyScheme), whose
 * agent part (`Scheme.agent`, test/support/toyScheme/agent.ts) weighs its options as paying once and
 * holds their price in the budget, passed as `paidTool({ schemes })`. The gate offers only the toy; the tool pays it from the
 * budget through the toy's client part, and the ledger records what the ticket paid.
 */
import { randomBytes } from "node:crypto";
import type { ToolMessage } from "@langchain/core/messages";
import { Hono } from "hono";
import { getAddress } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import type { SpendEvent } from "../src/agent/spendReport.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import type { FetchFn } from "../src/http/facilitatorClient.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import { createToyScheme, type ToySale } from "./support/toyScheme/index.ts";

const NETWORK = "eip155:31337" as const;
const TOKEN = getAddress("0x5fbdb2315678afecb367f032d93f642f64180aa3");
const PAY_TO = getAddress("0x70997970c51812dc3a010c7d01b50e0d17dc79c8");
/** The toy scheme pays without a facilitator: a call fails the test. */
const unreachable: FetchFn = async () => {
  throw new Error("the toy scheme must not reach the facilitator");
};

describe("paidTool with an extra scheme", () => {
  it("pays a toy-only route through the toy's parts, out of the budget", async () => {
    const sales: ToySale[] = [];
    const toy = createToyScheme(randomBytes(32), sales);
    const gate = paymentGate({
      payTo: PAY_TO,
      network: NETWORK,
      token: { address: TOKEN, name: "USD Coin", version: "2" },
      facilitator: "http://127.0.0.1:9",
      fetch: unreachable,
      proofKeys: { keys: [] },
      memoSecret: randomBytes(32),
      schemes: [toy],
      routes: { "GET /api/toy": { pricing: [{ type: "toy", amount: 100n }] } },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/toy", (c) => c.json({ scheme: c.get("payment")?.scheme }));
    const fetch: FetchFn = async (input, init) => app.request(new Request(input, init));
    const store = await createTestStore();
    try {
      const budget = createBudgetLedger({ store, clock: systemClock });
      await budget.setLimits("toy-buyer", { total: 1_000n });
      const payer = createPayer({
        account: privateKeyToAccount(generatePrivateKey()),
        network: NETWORK,
        facilitator: "http://127.0.0.1:9",
        fetch: unreachable,
      });
      const spends: SpendEvent[] = [];
      const tool = paidTool(
        {
          name: "toy",
          description: "A toy capability.",
          method: "GET",
          url: "http://toy.test/api/toy",
          input: {},
        },
        { agent: "toy-buyer", payer, budget, fetch, schemes: [toy], onSpend: (e) => spends.push(e) },
      );
      const message = (await tool.invoke({
        type: "tool_call",
        id: "toy-1",
        name: "toy",
        args: {},
      })) as ToolMessage;
      const receipt = message.artifact as PaidToolReceipt;
      expect(JSON.parse(String(message.content))).toEqual({ scheme: "toy" });
      expect(receipt).toMatchObject({ mode: "one-time", amount: "0.0001", provider: PAY_TO });
      expect(receipt.error).toBeUndefined();
      expect(sales).toHaveLength(1);
      expect(spends).toMatchObject([{ ok: true, mode: "one-time", amount: 100n }]);
      const report = await budget.report("toy-buyer");
      expect(report.spent.total).toBe(100n);
      expect(report.reserved.total).toBe(0n);
    } finally {
      await store.close();
    }
  });
});
