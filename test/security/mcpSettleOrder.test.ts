/**
 * A paid tool that fails after an x402 payment must not charge the buyer.
 *
 * The gate settled an x402 payment before it ran the tool (or the HTTP handler): a tool that threw left
 * the payer charged, with no result and no way to retry, since the authorization was used. As x402's
 * reference servers do, the gate now verifies the payment, runs the tool, and settles only when it
 * succeeded; a failed tool settles nothing, says so (`x402/payment-response` with `success: false`),
 * and the same payment then buys a successful call.
 *
 * Over a real devnet and facilitator: an x402 MCP client (the MCP SDK's client and `@x402/core`'s, the
 * payload in `_meta["x402/payment"]`) against a specialist's MCP endpoint, and a standard x402 HTTP
 * client against the Hono, Express and `node:http` adapters.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Client } from "@x402/core/client";
import {
  decodePaymentRequiredHeader,
  decodePaymentResponseHeader,
  encodePaymentSignatureHeader,
} from "@x402/core/http";
import type { PaymentPayload, PaymentRequired } from "@x402/core/types";
import { ExactEvmScheme as ExactEvmClientScheme } from "@x402/evm/exact/client";
import express from "express";
import { Hono } from "hono";
import type { Address, Hex, PrivateKeyAccount } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createSpecialist, type Specialist } from "../../src/agent/createSpecialist.ts";
import { defineCapability } from "../../src/agent/tools/capability.ts";
import { cancelAuthorization } from "../../src/chain/actions/usd/cancelAuthorization.ts";
import { getAuthorizationState } from "../../src/chain/actions/usd/getAuthorizationState.ts";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { signCancelAuthorization } from "../../src/chain/signers/signCancelAuthorization.ts";
import { type Devnet, startDevnet } from "../../src/chain/startDevnet.ts";
import { type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { expressPaymentGate } from "../../src/gate/expressPaymentGate.ts";
import { honoPaymentGate } from "../../src/gate/honoPaymentGate.ts";
import { nodePaymentGate } from "../../src/gate/nodePaymentGate.ts";
import { type PaymentGate, paymentGate } from "../../src/gate/paymentGate.ts";
import { McpMetaKey } from "../../src/protocol/mcpPayment.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";
import { callTool, connectHttpClient, type ToolResult } from "../support/mcpSupport.ts";

const NETWORK = "eip155:31337" as const;
const PRICE = 10_000n;
const FUNDS = 50_000n;

let devnet: Devnet;
let tf: TestFacilitator;
let specialist: Specialist;
const closers: (() => Promise<void>)[] = [];
/** How many times each tool's handler ran. */
const runs = { shout: 0 };
/** Run by the tool on "cancel", while it runs (before the gate settles). */
let duringRun: () => Promise<void> = async () => undefined;

const balanceOf = (owner: Address) =>
  getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

async function freshAccount(usd: bigint): Promise<PrivateKeyAccount> {
  const account = privateKeyToAccount(generatePrivateKey());
  await devnet.fund(account.address, { usd });
  return account;
}

/** The standard x402 client for `account`, allowed to pay the devnet token. */
function standardClient(account: PrivateKeyAccount): x402Client {
  return new x402Client()
    .register(NETWORK, new ExactEvmClientScheme(account))
    .setSpendControls({ allowedAssets: [{ network: NETWORK, asset: devnet.contracts.usd }] });
}

/** Whether the payload's EIP-3009 authorization was used on chain. */
function authorizationUsed(payload: PaymentPayload): Promise<boolean> {
  const authorization = (payload.payload as { authorization: { from: Address; nonce: Hex } }).authorization;
  return getAuthorizationState(devnet.publicClient, {
    token: devnet.contracts.usd,
    authorizer: authorization.from,
    nonce: authorization.nonce,
  });
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 5 });
  tf = await startTestFacilitator(devnet);
  specialist = createSpecialist({
    name: "shouter",
    account: devnet.accounts[2]!.account,
    capabilities: [
      defineCapability({
        name: "shout",
        description: "Upper-cases a text; fails on 'boom'.",
        input: z.object({ text: z.string().max(200) }),
        output: z.object({ text: z.string() }),
        pricing: [{ type: "one-time", amount: PRICE }],
        handler: async ({ text }) => {
          runs.shout += 1;
          if (text === "boom") throw new Error("the tool broke");
          if (text === "cancel") await duringRun();
          return { text: text.toUpperCase() };
        },
      }),
    ],
    facilitator: tf.url,
    network: NETWORK,
    token: devnet.contracts.usd,
  });
  await specialist.start();
}, 120_000);

afterAll(async () => {
  for (const close of closers) await close();
  await specialist?.stop();
  await tf?.stop();
  await devnet?.stop();
});

describe("an x402 MCP payment for a tool that fails", () => {
  it("settles nothing when the tool throws, says so, and the same payment then buys a successful call, settled once", async () => {
    const client = await connectHttpClient(specialist.manifest!.mcp!.url);
    closers.push(() => client.close());
    const account = await freshAccount(FUNDS);
    const sellerBefore = await balanceOf(specialist.payTo);
    const unpaid = await callTool(client, "shout", { text: "boom" });
    expect(unpaid.isError).toBe(true);
    const payload = await standardClient(account).createPaymentPayload(
      unpaid.structuredContent as unknown as PaymentRequired,
    );
    const meta = { [McpMetaKey.X402Payment]: payload };
    const runsBefore = runs.shout;

    const failed = await callTool(client, "shout", { text: "boom" }, meta);
    expect(runs.shout).toBe(runsBefore + 1);
    expect(failed.isError).toBe(true);
    expect(failed.structuredContent).toMatchObject({ error: { code: "Internal" } });
    // Nothing moved on chain, the authorization is still unused, and the result says so.
    expect(await balanceOf(account.address)).toBe(FUNDS);
    expect(await balanceOf(specialist.payTo)).toBe(sellerBefore);
    expect(await authorizationUsed(payload)).toBe(false);
    expect(failed._meta?.[McpMetaKey.X402PaymentResponse]).toMatchObject({
      success: false,
      errorReason: "handler_failed",
      transaction: "",
      payer: account.address,
    });

    // The same payment, sent again, buys the call once it succeeds.
    const paid: ToolResult = await callTool(client, "shout", { text: "hi" }, meta);
    expect(paid.isError).toBeFalsy();
    expect(paid.structuredContent).toEqual({ text: "HI" });
    const settlement = paid._meta?.[McpMetaKey.X402PaymentResponse] as { success: boolean; transaction: Hex };
    expect(settlement).toMatchObject({ success: true, network: NETWORK, payer: account.address });
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: settlement.transaction });
    expect(receipt.status).toBe("success");
    expect(await authorizationUsed(payload)).toBe(true);
    expect(await balanceOf(account.address)).toBe(FUNDS - PRICE);
    expect((await balanceOf(specialist.payTo)) - sellerBefore).toBe(PRICE);

    // Served once: a replay is refused before the tool runs, and nothing moves again.
    const runsServed = runs.shout;
    const replay = await callTool(client, "shout", { text: "hi" }, meta);
    expect(replay.isError).toBe(true);
    expect((replay.structuredContent as unknown as PaymentRequired).error).toBe(
      "invalid_exact_evm_nonce_already_used",
    );
    expect(runs.shout).toBe(runsServed);
    expect(await balanceOf(account.address)).toBe(FUNDS - PRICE);
  });

  it("answers the payment-required result instead of the tool's content when the settlement fails after it ran, charging nothing", async () => {
    const client = await connectHttpClient(specialist.manifest!.mcp!.url);
    closers.push(() => client.close());
    const account = await freshAccount(FUNDS);
    const unpaid = await callTool(client, "shout", { text: "cancel" });
    const payload = await standardClient(account).createPaymentPayload(
      unpaid.structuredContent as unknown as PaymentRequired,
    );
    const nonce = (payload.payload as { authorization: { nonce: Hex } }).authorization.nonce;
    // While the tool runs, the payer burns the authorization on chain: it can no longer settle.
    duringRun = async () => {
      const signature = await signCancelAuthorization(account, {
        domain: {
          name: "USD Coin",
          version: "2",
          chainId: devnet.chain.id,
          verifyingContract: devnet.contracts.usd,
        },
        nonce,
      });
      const hash = await cancelAuthorization(devnet.walletClient(devnet.accounts[4]!), {
        token: devnet.contracts.usd,
        authorizer: account.address,
        nonce,
        signature,
      });
      await devnet.publicClient.waitForTransactionReceipt({ hash });
    };
    const runsBefore = runs.shout;
    const result = await callTool(client, "shout", { text: "cancel" }, { [McpMetaKey.X402Payment]: payload });
    duringRun = async () => undefined;
    expect(runs.shout).toBe(runsBefore + 1);
    // x402's settlement-failed result (its PaymentRequired), not the tool's "CANCEL".
    expect(result.isError).toBe(true);
    expect(JSON.stringify(result)).not.toMatch(/CANCEL/);
    expect((result.structuredContent as unknown as PaymentRequired).x402Version).toBe(2);
    expect((result.structuredContent as unknown as PaymentRequired).accepts.length).toBeGreaterThan(0);
    expect(result._meta?.[McpMetaKey.X402PaymentResponse]).toBeUndefined();
    expect(await balanceOf(account.address)).toBe(FUNDS);
  });

  it("charges a succeeding tool once, with the settlement in the result", async () => {
    const client = await connectHttpClient(specialist.manifest!.mcp!.url);
    closers.push(() => client.close());
    const account = await freshAccount(FUNDS);
    const unpaid = await callTool(client, "shout", { text: "ok" });
    const payload = await standardClient(account).createPaymentPayload(
      unpaid.structuredContent as unknown as PaymentRequired,
    );
    const [a, b] = await Promise.all([
      callTool(client, "shout", { text: "ok" }, { [McpMetaKey.X402Payment]: payload }),
      callTool(client, "shout", { text: "ok" }, { [McpMetaKey.X402Payment]: payload }),
    ]);
    // Concurrent copies: the key is held while the tool runs, so one is served and one refused.
    expect([a.isError === true, b.isError === true].sort()).toEqual([false, true]);
    const served = a.isError === true ? b : a;
    expect(served._meta?.[McpMetaKey.X402PaymentResponse]).toMatchObject({ success: true });
    expect(await balanceOf(account.address)).toBe(FUNDS - PRICE);
  });
});

type HttpGate = { url: string; status: { value: number }; runs: { value: number } };

/** A gate in front of `GET /api/report`; each adapter's handler throws while its `status` is 500. */
function reportGate(): PaymentGate {
  return paymentGate({
    payTo: devnet.accounts[3]!.address,
    network: NETWORK,
    token: devnet.contracts.usd,
    facilitator: tf.url,
    routes: { "GET /api/report": { amount: PRICE, description: "one report" } },
  });
}

async function listen(server: Server): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  closers.push(() => new Promise((resolve) => server.close(() => resolve())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}/api/report`;
}

async function honoGate(): Promise<HttpGate> {
  const status = { value: 500 };
  const count = { value: 0 };
  const app = new Hono();
  // Hono's own error handler logs the stack; this one answers the same 500 quietly.
  app.onError((_error, c) => c.json({ error: "the report broke" }, 500));
  app.use("/api/*", honoPaymentGate(reportGate()));
  app.get("/api/report", (c) => {
    count.value += 1;
    if (status.value >= 500) throw new Error("the report broke");
    return c.json({ report: "the numbers" }, status.value as 200);
  });
  const server: RunningServer = await serveApp(app);
  closers.push(() => server.close());
  return { url: `${server.url}/api/report`, status, runs: count };
}

async function expressGate(): Promise<HttpGate> {
  const status = { value: 500 };
  const count = { value: 0 };
  const app = express();
  app.use("/api", expressPaymentGate(reportGate()));
  app.get("/api/report", (_req, res) => {
    count.value += 1;
    if (status.value >= 500) throw new Error("the report broke");
    // Written in pieces, as a streaming handler does: all of it is held until the settlement.
    res.status(status.value).type("application/json");
    res.write('{"report":');
    res.end('"the numbers"}');
  });
  // Express's own error handler logs the stack; this one answers the same bare 500 quietly.
  app.use((_error: unknown, _req: express.Request, res: express.Response, _next: express.NextFunction) => {
    res.status(500).json({ error: "the report broke" });
  });
  return { url: await listen(createServer(app)), status, runs: count };
}

async function nodeGate(): Promise<HttpGate> {
  const status = { value: 500 };
  const count = { value: 0 };
  const handler = nodePaymentGate(
    reportGate(),
    (_req, res) => {
      count.value += 1;
      if (status.value >= 500) throw new Error("the report broke");
      res.writeHead(status.value, { "content-type": "application/json" });
      res.end(JSON.stringify({ report: "the numbers" }));
    },
    { prefix: "/api" },
  );
  return { url: await listen(createServer(handler)), status, runs: count };
}

describe("an x402 HTTP payment for a handler that fails", () => {
  const adapters = [
    ["Hono", honoGate],
    ["Express", expressGate],
    ["node:http", nodeGate],
  ] as const;
  for (const [name, start] of adapters) {
    it(`${name}: a handler that throws settles nothing; the same header then buys the report, settled once`, async () => {
      const gate = await start();
      const account = await freshAccount(FUNDS);
      const unpaid = await fetch(gate.url);
      expect(unpaid.status).toBe(402);
      const required = decodePaymentRequiredHeader(unpaid.headers.get("PAYMENT-REQUIRED") ?? "");
      const payload = await standardClient(account).createPaymentPayload(required);
      const headers = { "PAYMENT-SIGNATURE": encodePaymentSignatureHeader(payload) };

      const failed = await fetch(gate.url, { headers });
      expect(failed.status).toBe(500);
      expect(gate.runs.value).toBe(1);
      expect(await balanceOf(account.address)).toBe(FUNDS);
      expect(await authorizationUsed(payload)).toBe(false);
      expect(decodePaymentResponseHeader(failed.headers.get("PAYMENT-RESPONSE") ?? "")).toMatchObject({
        success: false,
        errorReason: "handler_failed",
      });

      gate.status.value = 200;
      const served = await fetch(gate.url, { headers });
      expect(served.status).toBe(200);
      expect(await served.json()).toEqual({ report: "the numbers" });
      const settlement = decodePaymentResponseHeader(served.headers.get("PAYMENT-RESPONSE") ?? "");
      expect(settlement).toMatchObject({ success: true, payer: account.address });
      const receipt = await devnet.publicClient.getTransactionReceipt({
        hash: settlement.transaction as Hex,
      });
      expect(receipt.status).toBe("success");
      expect(await balanceOf(account.address)).toBe(FUNDS - PRICE);

      const replay = await fetch(gate.url, { headers });
      expect(replay.status).toBe(402);
      expect(gate.runs.value).toBe(2);
      expect(await balanceOf(account.address)).toBe(FUNDS - PRICE);
    });
  }
});
