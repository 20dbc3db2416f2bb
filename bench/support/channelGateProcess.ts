/**
 * The gate of bench/channel.ts in its own process, so its CPU time is its own (`GET /_cpu` answers
 * `process.cpuUsage()` of this process, unpriced): `paymentGate` with one channel route on `node:http`,
 * the default journal voucher store, vouchers forwarded to the facilitator every second, no per-client
 * share of lookups (every payer of the bench is at one loopback address).
 * Configuration: JSON in argv[2]. Prints `listening <url>` once serving.
 */
import { createServer } from "node:http";
import type { Address } from "viem";
import { nodePaymentGate } from "../../src/gate/nodePaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";

const config = JSON.parse(process.argv[2] ?? "{}") as {
  payTo: Address;
  network: `eip155:${number}`;
  /** The devnet's token with its EIP-712 domain as read from the chain (bench/support/benchToken.ts). */
  token: { address: Address; name: string; version: string };
  facilitator: string;
  apiKey: string;
  contract: Address;
  journal: string;
  price: string;
  path: string;
};

const gate = paymentGate({
  payTo: config.payTo,
  network: config.network,
  token: config.token,
  facilitator: config.facilitator,
  providerApiKey: config.apiKey,
  memoSecret: "a-bench-memo-secret-of-at-least-32-bytes!",
  routes: { [`GET ${config.path}`]: { pricing: [{ type: "channel", amount: BigInt(config.price) }] } },
  schemeOptions: {
    channel: {
      contract: config.contract,
      journal: config.journal,
      forwardIntervalMs: 1_000,
      // Every payer of the bench is at 127.0.0.1, so one client's share of the reads of ids new to the
      // gate (5 at once, 1/s) would refuse most of the 64 channels opened at once and the renewals:
      // it would measure the bench's single address. The gate's own limits stay on.
      lookups: { perClient: false },
    },
  },
});
const body = '{"item":1}';
const server = createServer(
  nodePaymentGate(
    gate,
    (req, res) => {
      if (req.url === "/_cpu") {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(process.cpuUsage()));
        return;
      }
      res.writeHead(200, { "content-type": "application/json", "content-length": body.length });
      res.end(body);
    },
    { prefix: "/api" },
  ),
);
server.keepAliveTimeout = 60_000;
server.listen(0, "127.0.0.1", () => {
  const address = server.address();
  if (address === null || typeof address === "string") throw new Error("no port");
  process.stdout.write(`listening http://127.0.0.1:${address.port}\n`);
});
process.on("SIGTERM", () => {
  server.close();
  void gate.close().then(() => process.exit(0));
});
