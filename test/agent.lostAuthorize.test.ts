/**
 * An agent's budget ledger when the facilitator's answer to `/authorize` is lost (docs/budgets.md,
 * "Payments whose answer was lost"), on a real devnet, facilitator and gate. Between the agent's payer
 * and the facilitator sits a proxy that can forward `/authorize` and cut the connection before the
 * answer reaches the payer (the payment settled), answer 503 without forwarding (it never settled), and
 * refuse read-backs for a while (the facilitator unreachable). After each case the ledger's spend equals
 * what the wallet moved.
 */
import { randomBytes } from "node:crypto";
import { createServer, type IncomingMessage, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import type { ToolMessage } from "@langchain/core/messages";
import type { Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BudgetLedger, createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { resolvePendingPayments } from "../src/agent/budget/pendingPayments.ts";
import { type PaidToolReceipt, paidTool } from "../src/agent/paidTool.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { fiatTokenV2_2Abi } from "../src/chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { nodePaymentGate } from "../src/gate/nodePaymentGate.ts";
import { paymentGate } from "../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { type Clock, systemClock } from "../src/protocol/clock.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const PRICE = 10_000n;

/** How the proxy treats `/authorize` and the read-backs (`GET /payments/…`). */
type Mode = { authorize: "pass" | "cut-after-forwarding" | "503-unforwarded"; readBacks: "pass" | "503" };

let devnet: Devnet;
let tf: TestFacilitator;
let store: Store;
let budget: BudgetLedger;
const servers: Server[] = [];
let gateUrl: string;
let proxyUrl: string;
const mode: Mode = { authorize: "pass", readBacks: "pass" };

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  servers.push(server);
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

async function bodyOf(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const chunk of req) chunks.push(chunk as Buffer);
  return Buffer.concat(chunks);
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  tf = await startTestFacilitator(devnet);
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  budget = createBudgetLedger({ store, clock: systemClock });
  proxyUrl = await listen(
    createServer(async (req, res) => {
      const path = req.url ?? "/";
      const unavailable = () => {
        res.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
        res.end(JSON.stringify({ error: { code: "ChainUnavailable", message: "proxy: facilitator down" } }));
      };
      if (path.startsWith("/payments/") && mode.readBacks === "503") return unavailable();
      if (path === "/authorize" && mode.authorize === "503-unforwarded") return unavailable();
      const body = req.method === "GET" || req.method === "HEAD" ? null : new Uint8Array(await bodyOf(req));
      const headers = new Headers();
      for (const [name, value] of Object.entries(req.headers)) {
        if (typeof value === "string" && name !== "host" && name !== "content-length")
          headers.set(name, value);
      }
      const answer = await fetch(`${tf.url}${path}`, { method: req.method ?? "GET", headers, body });
      const text = await answer.text();
      // The facilitator settled and answered; the answer never reaches the payer.
      if (path === "/authorize" && mode.authorize === "cut-after-forwarding") return req.socket.destroy();
      res.writeHead(answer.status, { "content-type": answer.headers.get("content-type") ?? "text/plain" });
      res.end(text);
    }),
  );
  const seller = devnet.accounts[1]!;
  const gate = paymentGate({
    payTo: seller.address,
    network: devnet.network,
    token: devnet.contracts.usd,
    // The gate's facilitator is the proxy too (it advertises the URL the payer settles through).
    facilitator: proxyUrl,
    fetch,
    memoSecret: randomBytes(32),
    routes: { "GET /api/item": { price: "0.01" } },
  });
  gateUrl = await listen(
    createServer(
      nodePaymentGate(gate, (_req, res) => {
        res.setHeader("content-type", "application/json");
        res.end(JSON.stringify({ item: true }));
      }),
    ),
  );
});

afterAll(async () => {
  for (const s of servers) await new Promise((resolve) => s.close(resolve));
  await store?.close();
  await tf?.stop();
  await devnet?.stop();
});

function agentPayer(account: DevnetAccount): Payer {
  return createPayer({
    account: account.account,
    network: devnet.network,
    facilitator: createFacilitatorClient({ url: proxyUrl, fetch }),
  });
}

function itemTool(agent: string, payer: Payer) {
  const tool = paidTool(
    {
      name: "item",
      description: "An item, paid once per call",
      method: "GET",
      url: `${gateUrl}/api/item`,
      input: { type: "object", properties: {} },
    },
    {
      agent,
      payer,
      budget,
      maxPrice: PRICE,
      wait: (ms) => new Promise((r) => setTimeout(r, Math.min(ms, 100))),
    },
  );
  let n = 0;
  return async (): Promise<PaidToolReceipt> => {
    const message = (await tool.invoke({
      type: "tool_call",
      id: `${agent}-${n++}`,
      name: "item",
      args: {},
    })) as ToolMessage;
    return message.artifact as PaidToolReceipt;
  };
}

const balanceOf = (account: DevnetAccount) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: account.account.address });

async function ledgerOf(agent: string) {
  const report = await budget.report(agent);
  return { spent: report.spent.total, reserved: report.reserved.total };
}

/** The clock of a later look, `seconds` from now. */
const later = (seconds: number): Clock => ({ now: () => Date.now() + seconds * 1000 });

describe("an agent whose /authorize answer is lost", () => {
  it("records a payment that settled although its answer was lost, and the call is served with its proof", async () => {
    const account = devnet.accounts[2]!;
    const agent = "lost-answer";
    await budget.setLimits(agent, { total: 1_000_000n });
    const call = itemTool(agent, agentPayer(account));
    const before = await balanceOf(account);
    mode.authorize = "cut-after-forwarding";
    const receipt = await call();
    mode.authorize = "pass";
    expect(receipt.error).toBeUndefined();
    expect(receipt.amount).toBe("0.01");
    expect(before - (await balanceOf(account))).toBe(PRICE);
    expect(await ledgerOf(agent)).toEqual({ spent: PRICE, reserved: 0n });
    expect(await budget.pendingPayments(agent)).toEqual([]);
  });

  it("holds a payment whose outcome is unknown; the next call records it once the facilitator answers and redeems its unused proof", async () => {
    const account = devnet.accounts[3]!;
    const agent = "lost-and-unreadable";
    await budget.setLimits(agent, { total: 1_000_000n });
    const call = itemTool(agent, agentPayer(account));
    const before = await balanceOf(account);
    mode.authorize = "cut-after-forwarding";
    mode.readBacks = "503";
    const failed = await call();
    mode.authorize = "pass";
    expect(failed.error?.code).toBe("ChainUnavailable");
    expect(failed.error?.message).toMatch(/outcome is unknown/);
    // The money moved; the ledger holds it (not released, not yet recorded as spent).
    expect(before - (await balanceOf(account))).toBe(PRICE);
    expect(await ledgerOf(agent)).toEqual({ spent: 0n, reserved: PRICE });
    expect(await budget.pendingPayments(agent)).toHaveLength(1);
    // The facilitator answers read-backs again: the next call reads the payment back and, since its
    // proof never reached the seller, redeems it instead of paying again.
    mode.readBacks = "pass";
    const redeemed = await call();
    expect(redeemed.error).toBeUndefined();
    expect(redeemed.amount).toBe("0");
    expect(before - (await balanceOf(account))).toBe(PRICE);
    expect(await ledgerOf(agent)).toEqual({ spent: PRICE, reserved: 0n });
    expect(await budget.pendingPayments(agent)).toEqual([]);
    // The call after that pays as usual.
    expect((await call()).amount).toBe("0.01");
    expect(before - (await balanceOf(account))).toBe(2n * PRICE);
    expect(await ledgerOf(agent)).toEqual({ spent: 2n * PRICE, reserved: 0n });
  });

  it("keeps the proof of a payment another process read back as settled, and the next call of any process redeems it", async () => {
    const key = `0x${randomBytes(32).toString("hex")}` as Hex;
    const account = { account: privateKeyToAccount(key) } as DevnetAccount;
    await devnet.fund(account.account.address, { usd: 1_000_000n });
    const agent = "lost-elsewhere";
    await budget.setLimits(agent, { total: 1_000_000n });
    const first = itemTool(agent, agentPayer(account));
    mode.authorize = "cut-after-forwarding";
    mode.readBacks = "503";
    const failed = await first();
    mode.authorize = "pass";
    mode.readBacks = "pass";
    expect(failed.error?.code).toBe("ChainUnavailable");
    expect(await budget.pendingPayments(agent)).toEqual([
      expect.objectContaining({ target: `GET ${gateUrl}/api/item` }),
    ]);
    // The subscription keeper's look, or the end of `tollgate run`, in another process reads it back.
    const elsewhere = await resolvePendingPayments({
      agent,
      budget,
      payer: agentPayer(account),
      clock: systemClock,
    });
    expect(elsewhere.map((r) => r.outcome)).toEqual(["settled"]);
    expect(await ledgerOf(agent)).toEqual({ spent: PRICE, reserved: 0n });
    // A third process's tool: its first call presents the kept proof instead of paying again.
    const later = itemTool(agent, agentPayer(account));
    const redeemed = await later();
    expect(redeemed.error).toBeUndefined();
    expect(redeemed.amount).toBe("0");
    expect(1_000_000n - (await balanceOf(account))).toBe(PRICE);
    expect(await store.query("SELECT nonce FROM agent_redeemable_proofs WHERE agent = $1", [agent])).toEqual(
      [],
    );
    // And the call after that pays as usual.
    expect((await later()).amount).toBe("0.01");
    expect(1_000_000n - (await balanceOf(account))).toBe(2n * PRICE);
    expect(await ledgerOf(agent)).toEqual({ spent: 2n * PRICE, reserved: 0n });
  });

  it("releases a payment that never settled only after its authorization expired", async () => {
    const account = devnet.accounts[4]!;
    const agent = "never-settled";
    await budget.setLimits(agent, { total: 1_000_000n });
    const payer = agentPayer(account);
    const call = itemTool(agent, payer);
    const before = await balanceOf(account);
    mode.authorize = "503-unforwarded";
    const failed = await call();
    mode.authorize = "pass";
    expect(failed.error?.code).toBe("ChainUnavailable");
    expect(await ledgerOf(agent)).toEqual({ spent: 0n, reserved: PRICE });
    const [pending] = await budget.pendingPayments(agent);
    expect(pending).toBeDefined();
    // The facilitator has no record of it, but until validBefore a request in flight could still settle it.
    const now = await resolvePendingPayments({ agent, budget, payer, clock: systemClock });
    expect(now.map((r) => r.outcome)).toEqual(["pending"]);
    expect(await ledgerOf(agent)).toEqual({ spent: 0n, reserved: PRICE });
    // Past validBefore (the offer's expiry at most) and the chain's clock skew: released.
    const afterExpiry = await resolvePendingPayments({ agent, budget, payer, clock: later(3600) });
    expect(afterExpiry.map((r) => r.outcome)).toEqual(["released"]);
    expect(await ledgerOf(agent)).toEqual({ spent: 0n, reserved: 0n });
    expect(await budget.pendingPayments(agent)).toEqual([]);
    // The wallet never moved, and the authorization was never used on chain.
    expect(await balanceOf(account)).toBe(before);
    const used = await devnet.publicClient.readContract({
      address: devnet.contracts.usd,
      abi: fiatTokenV2_2Abi,
      functionName: "authorizationState",
      args: [account.address, pending!.nonce as Hex],
    });
    expect(used).toBe(false);
  });
});
