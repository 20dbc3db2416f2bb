/**
 * The x402 reference stack for the paid-request bench, wired the way x402's own examples wire it: a
 * facilitator from `@x402/core`'s `x402Facilitator` with `@x402/evm`'s exact scheme over a viem wallet
 * client extended with public actions, served over HTTP (`/verify`, `/settle`, `/supported`); an
 * `@x402/express` resource server with `@x402/evm`'s exact server scheme, using that facilitator
 * through `HTTPFacilitatorClient`; and `@x402/fetch` with `@x402/evm`'s exact client scheme per payer
 * (payingFetch.ts).
 *
 * Two settings differ from the examples, both in x402's favour or neutral: the viem client polls every
 * 50 ms, as Tollgate's facilitator does on a devnet (viem's default would poll a 2 s chain every 4 s),
 * and the devnet token is allowed with `setSpendControls`, which x402 v2 clients require for assets
 * they do not know. It settles in the devnet's token (`devnet.contracts.usd`, the same contract as
 * Tollgate's stack: Circle's FiatToken v2.2 in paidRequests.ts), with the domain read from the chain.
 *
 * With `nonceManager: true` the facilitator's account carries viem's `nonceManager` (nonces counted
 * locally instead of read from the node per transaction): the strongest wiring of the reference, since
 * concurrent settlements no longer race for the same nonce.
 */
import type { Server } from "node:http";
import type { AddressInfo } from "node:net";
import { x402Facilitator } from "@x402/core/facilitator";
import { HTTPFacilitatorClient } from "@x402/core/http";
import type { PaymentPayload, PaymentRequirements } from "@x402/core/types";
import { toFacilitatorEvmSigner } from "@x402/evm";
import { registerExactEvmScheme } from "@x402/evm/exact/facilitator";
import { ExactEvmScheme as ExactEvmServerScheme } from "@x402/evm/exact/server";
import { paymentMiddleware, x402ResourceServer } from "@x402/express";
import express from "express";
import { type Address, createWalletClient, http, publicActions } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { createNonceManager, jsonRpc } from "viem/nonce";
import type { Devnet, DevnetAccount } from "../../src/chain/startDevnet.ts";
import { lazyPayingFetches, type PayerSpec } from "./payingFetch.ts";
import type { RpcCounter } from "./rpcCounter.ts";
import type { PaidStack } from "./tollgateStack.ts";

/** A settle failure's reason with the node's words for it when it has them (a nonce race shows here). */
function failureReason(errorReason: string | undefined, errorMessage: string | undefined): string {
  const known = errorMessage?.match(
    /nonce too low|nonce too high|replacement transaction underpriced|already known|insufficient funds|timed out/i,
  );
  const detail = known?.[0] ?? errorMessage?.split("\n")[0]?.slice(0, 60);
  return detail === undefined ? (errorReason ?? "unknown") : `${errorReason ?? "error"}: ${detail}`;
}

async function listen(app: express.Express): Promise<{ url: string; close(): Promise<void> }> {
  const server = await new Promise<Server>((resolve) => {
    const s = app.listen(0, "127.0.0.1", () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

export async function startX402Stack(options: {
  devnet: Devnet;
  gas: DevnetAccount;
  payers: readonly DevnetAccount[];
  payTo: Address;
  price: bigint;
  path: string;
  rpc: RpcCounter;
  /** Give the facilitator's account viem's `nonceManager` (the strongest wiring). */
  nonceManager?: boolean | undefined;
}): Promise<PaidStack> {
  const { devnet } = options;
  const network = devnet.network;
  const failures = new Map<string, number>();

  const account =
    options.nonceManager === true
      ? // A manager of its own: viem's shared `nonceManager` remembers nonces per address and chain id
        // across devnets, and the next devnet reuses both.
        privateKeyToAccount(options.gas.privateKey, {
          nonceManager: createNonceManager({ source: jsonRpc() }),
        })
      : options.gas.account;
  const viemClient = createWalletClient({
    account,
    chain: devnet.chain,
    transport: http(devnet.rpcUrl, { fetchFn: options.rpc.fetchFn }),
    pollingInterval: 50,
  }).extend(publicActions);
  const signer = toFacilitatorEvmSigner({
    address: options.gas.address,
    readContract: (args) => viemClient.readContract({ ...args, args: args.args ?? [] }),
    verifyTypedData: (args) =>
      viemClient.verifyTypedData(args as Parameters<typeof viemClient.verifyTypedData>[0]),
    writeContract: (args) => viemClient.writeContract({ ...args, args: args.args ?? [] }),
    sendTransaction: (args) => viemClient.sendTransaction(args),
    waitForTransactionReceipt: (args) => viemClient.waitForTransactionReceipt(args),
    getCode: (args) => viemClient.getCode(args),
  });
  const facilitator = new x402Facilitator();
  registerExactEvmScheme(facilitator, { signer, networks: network });

  type Body = { paymentPayload: PaymentPayload; paymentRequirements: PaymentRequirements };
  const facilitatorApp = express();
  facilitatorApp.use(express.json());
  facilitatorApp.post("/verify", async (req, res) => {
    const { paymentPayload, paymentRequirements } = req.body as Body;
    try {
      res.json(await facilitator.verify(paymentPayload, paymentRequirements));
    } catch (error) {
      res.status(500).json({ error: (error as Error).message });
    }
  });
  facilitatorApp.post("/settle", async (req, res) => {
    const { paymentPayload, paymentRequirements } = req.body as Body;
    try {
      const settled = await facilitator.settle(paymentPayload, paymentRequirements);
      if (!settled.success) {
        const reason = failureReason(settled.errorReason, settled.errorMessage);
        failures.set(reason, (failures.get(reason) ?? 0) + 1);
      }
      res.json(settled);
    } catch (error) {
      const reason = failureReason("thrown", (error as Error).message);
      failures.set(reason, (failures.get(reason) ?? 0) + 1);
      res.status(500).json({ error: (error as Error).message });
    }
  });
  facilitatorApp.get("/supported", (_req, res) => {
    res.json(facilitator.getSupported());
  });
  const facilitatorServer = await listen(facilitatorApp);

  const resourceServer = new x402ResourceServer(
    new HTTPFacilitatorClient({ url: facilitatorServer.url }),
  ).register(network, new ExactEvmServerScheme());
  const app = express();
  app.use(
    paymentMiddleware(
      {
        [`GET ${options.path}`]: {
          accepts: {
            scheme: "exact",
            network,
            payTo: options.payTo,
            price: {
              amount: options.price.toString(),
              asset: devnet.contracts.usd,
              // The same token as Tollgate's stack on this devnet, with its domain as read from the chain.
              extra: { name: devnet.token.name, version: devnet.token.version },
            },
            maxTimeoutSeconds: 120,
          },
          description: "one item",
          mimeType: "application/json",
        },
      },
      resourceServer,
    ),
  );
  app.get(options.path, (_req, res) => {
    res.json({ item: 1 });
  });
  const api = await listen(app);

  const spec: PayerSpec = { kind: "x402", network, asset: devnet.contracts.usd };
  const keys = options.payers.map((p) => p.privateKey);
  const paying = lazyPayingFetches(spec, keys);
  return {
    name: options.nonceManager === true ? "x402+nm" : "x402",
    url: `${api.url}${options.path}`,
    gasAddress: options.gas.address,
    rpc: options.rpc,
    payingFetch: paying,
    payers: { spec, keys },
    facilitatorFailures: () => failures,
    async stop() {
      await api.close();
      await facilitatorServer.close();
    },
  };
}
