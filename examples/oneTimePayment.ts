/**
 * One-time payment: an API provider prices a route at 0.50 USDC; a client pays it with
 * `fetchWithPayment` and gets the report. The same gate serves a Hono app and an Express app.
 *
 *   npx tsx examples/oneTimePayment.ts
 *
 * Express is a dev dependency of Tollgate (the gate only needs its types), fine for an example.
 */
import { randomBytes } from "node:crypto";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import express from "express";
import { Hono } from "hono";
import { getTokenBalance } from "tollgate/chain";
import { createPayer, fetchWithPayment } from "tollgate/client";
import { serveApp } from "tollgate/facilitator";
import { expressPaymentGate, honoPaymentGate, type PaymentGateEnv, paymentGate } from "tollgate/gate";
import { formatUnitsExact } from "tollgate/protocol";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

export type OneTimePaymentResult = {
  unpaidStatus: number;
  honoStatus: number;
  expressStatus: number;
  report: unknown;
  /** The price of one report, in smallest units. */
  price: bigint;
  buyerPaid: bigint;
  providerReceived: bigint;
};

export async function main(options: ExampleOptions = {}): Promise<OneTimePaymentResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  const stops: (() => Promise<void>)[] = [];
  try {
    const { devnet, facilitatorUrl } = stack;
    const provider = devnet.accounts[1]!;
    const buyer = devnet.accounts[2]!;

    // The provider's side: one gate, priced per route.
    const gate = paymentGate({
      payTo: provider.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: facilitatorUrl,
      memoSecret: randomBytes(32), // share one ≥ 32-byte secret between instances of an API
      routes: { "GET /api/reports/:id": { price: "0.50", description: "one report" } },
    });

    const hono = new Hono<PaymentGateEnv>();
    hono.use("/api/*", honoPaymentGate(gate));
    hono.get("/api/reports/:id", (c) => c.json({ id: c.req.param("id"), paidBy: c.get("payment")?.payer }));
    const honoServer = await serveApp(hono);
    stops.push(() => honoServer.close());

    const app = express();
    app.use("/api", expressPaymentGate(gate));
    app.get("/api/reports/:id", (req, res) => {
      res.json({ id: req.params.id, paidBy: res.locals.payment?.payer });
    });
    const expressServer = createServer(app);
    await new Promise<void>((resolve) => expressServer.listen(0, "127.0.0.1", resolve));
    stops.push(
      () =>
        new Promise<void>((resolve) => {
          expressServer.close(() => resolve());
          expressServer.closeAllConnections();
        }),
    );
    const expressUrl = `http://127.0.0.1:${(expressServer.address() as AddressInfo).port}`;
    print(`API (Hono) ${honoServer.url}, API (Express) ${expressUrl}, facilitator ${facilitatorUrl}`);

    // The client's side.
    const balances = async () => ({
      buyer: await getTokenBalance(devnet.publicClient, {
        token: devnet.contracts.usd,
        owner: buyer.address,
      }),
      provider: await getTokenBalance(devnet.publicClient, {
        token: devnet.contracts.usd,
        owner: provider.address,
      }),
    });
    const before = await balances();

    const unpaid = await fetch(`${honoServer.url}/api/reports/42`);
    print(`GET /api/reports/42 without paying → ${unpaid.status}`);

    const payer = createPayer({
      account: buyer.account,
      network: devnet.network,
      facilitator: facilitatorUrl,
    });
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "1" });
    const viaHono = await paidFetch(`${honoServer.url}/api/reports/42`);
    const report: unknown = await viaHono.json();
    print(`paid through Hono → ${viaHono.status} ${JSON.stringify(report)}`);
    const viaExpress = await paidFetch(`${expressUrl}/api/reports/7`);
    print(`paid through Express → ${viaExpress.status} ${JSON.stringify(await viaExpress.json())}`);

    const after = await balances();
    const result: OneTimePaymentResult = {
      unpaidStatus: unpaid.status,
      honoStatus: viaHono.status,
      expressStatus: viaExpress.status,
      report,
      price: 500_000n,
      buyerPaid: before.buyer - after.buyer,
      providerReceived: after.provider - before.provider,
    };
    print(
      `buyer paid ${formatUnitsExact(result.buyerPaid)} USDC, provider received ${formatUnitsExact(result.providerReceived)} USDC`,
    );
    return result;
  } finally {
    for (const stop of stops.reverse()) await stop();
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
