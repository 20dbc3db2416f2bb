/**
 * Paying a standard x402 v2 server: an Express API protected by `@x402/express`'s `paymentMiddleware`
 * (with `@x402/evm`'s exact scheme), whose x402 facilitator client points at Tollgate's facilitator
 * (`<facilitator>/x402`). Tollgate's `fetchWithPayment` reads the `PAYMENT-REQUIRED` header, pays
 * with `PAYMENT-SIGNATURE` and gets the weather.
 *
 *   npx tsx examples/payX402Server.ts
 *
 * `@x402/core`, `@x402/evm`, `@x402/express` and `express` are dev dependencies of Tollgate: fine for
 * an example; an API of your own adds them as its dependencies.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { decodePaymentResponseHeader, HTTPFacilitatorClient } from "@x402/core/http";
import { ExactEvmScheme } from "@x402/evm/exact/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import express from "express";
import { getTokenBalance } from "tollgate/chain";
import { createPayer, fetchWithPayment } from "tollgate/client";
import { formatUnitsExact } from "tollgate/protocol";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

export type PayX402ServerResult = {
  unpaidStatus: number;
  hasPaymentRequiredHeader: boolean;
  paidStatus: number;
  body: unknown;
  /** From the server's `PAYMENT-RESPONSE` header. */
  settlement: { success: boolean; transaction: string; payer?: string | undefined };
  price: bigint;
  buyerPaid: bigint;
  sellerReceived: bigint;
};

export async function main(options: ExampleOptions = {}): Promise<PayX402ServerResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  let server: Server | undefined;
  try {
    const { devnet, facilitatorUrl } = stack;
    const seller = devnet.accounts[1]!;
    const buyer = devnet.accounts[2]!;
    const price = 10_000n; // 0.01 USDC

    // A standard x402 resource server; nothing of Tollgate in it but the facilitator's URL.
    const resourceServer = new x402ResourceServer(
      new HTTPFacilitatorClient({ url: `${facilitatorUrl}/x402` }),
    ).register(devnet.network, new ExactEvmScheme());
    const app = express();
    app.use(
      paymentMiddleware(
        {
          "GET /weather": {
            accepts: {
              scheme: "exact",
              network: devnet.network,
              payTo: seller.address,
              // The devnet's test USDC, with its EIP-712 domain (x402 knows real USDC's by itself).
              price: {
                amount: price.toString(),
                asset: devnet.contracts.usd,
                extra: { name: devnet.token.name, version: devnet.token.version },
              },
              maxTimeoutSeconds: 120,
            },
            description: "today's weather",
            mimeType: "application/json",
          },
        },
        resourceServer,
      ),
    );
    app.get("/weather", (_req, res) => {
      res.json({ forecast: "sunny" });
    });
    const listening = await new Promise<Server>((resolve) => {
      const s = app.listen(0, "127.0.0.1", () => resolve(s));
    });
    server = listening;
    const origin = `http://127.0.0.1:${(listening.address() as AddressInfo).port}`;
    print(`x402 server ${origin}, its facilitator ${facilitatorUrl}/x402`);

    const balanceOf = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const before = { buyer: await balanceOf(buyer.address), seller: await balanceOf(seller.address) };

    const unpaid = await fetch(`${origin}/weather`);
    print(
      `GET /weather without paying → ${unpaid.status}, PAYMENT-REQUIRED header: ${unpaid.headers.has("PAYMENT-REQUIRED")}`,
    );

    // Tollgate's payer, exactly as for a Tollgate gate.
    const payer = createPayer({
      account: buyer.account,
      network: devnet.network,
      facilitator: facilitatorUrl,
    });
    const paidFetch = fetchWithPayment(fetch, payer, { maxPrice: "0.05" });
    const paid = await paidFetch(`${origin}/weather`);
    const body: unknown = await paid.json();
    const settlement = decodePaymentResponseHeader(paid.headers.get("PAYMENT-RESPONSE") ?? "");
    print(`paid → ${paid.status} ${JSON.stringify(body)}, settled in ${settlement.transaction}`);

    const buyerPaid = before.buyer - (await balanceOf(buyer.address));
    const sellerReceived = (await balanceOf(seller.address)) - before.seller;
    print(
      `buyer paid ${formatUnitsExact(buyerPaid)} USDC, seller received ${formatUnitsExact(sellerReceived)} USDC`,
    );
    return {
      unpaidStatus: unpaid.status,
      hasPaymentRequiredHeader: unpaid.headers.has("PAYMENT-REQUIRED"),
      paidStatus: paid.status,
      body,
      settlement: {
        success: settlement.success,
        transaction: settlement.transaction,
        payer: settlement.payer,
      },
      price,
      buyerPaid,
      sellerReceived,
    };
  } finally {
    const s = server;
    if (s !== undefined) {
      await new Promise<void>((resolve) => {
        s.close(() => resolve());
        s.closeAllConnections();
      });
    }
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
