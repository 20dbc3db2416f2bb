/**
 * A specialist's capability called over MCP (Streamable HTTP, stateless: one MCP server and transport
 * per POST) against the same capability over its HTTP route, in one run, as ratios. Both calls are
 * served on a subscription (`_meta["tollgate/subscription"]` versus `X-Tollgate-Sub`), so each passes
 * the same gate checks and no payment or chain work happens per call: what differs is the transport.
 *
 * Phases alternate (`ROUNDS` each) so that load from other processes falls on both alike; every answer
 * must be a success, or the run fails.
 *
 *   npx tsx bench/mcp.ts
 */
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import { startLocalStack } from "../examples/startLocalStack.ts";
import { createSpecialist } from "../src/agent/createSpecialist.ts";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { createPlan } from "../src/chain/actions/subscriptions/createPlan.ts";
import { getPlanIdFromReceipt } from "../src/chain/events/decodeSubscriptionEvents.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { McpMetaKey } from "../src/protocol/mcpPayment.ts";
import { elapsedMs, fmt, percentile, ratio, table } from "./support/stats.ts";

const ROUNDS = 3;
const CALLS_PER_PHASE = 200;
const MONTH = 30 * 86_400;

const stack = await startLocalStack();
try {
  const { devnet, facilitatorUrl } = stack;
  const seller = devnet.accounts[2]!;
  const hash = await createPlan(devnet.walletClient(seller), {
    manager: devnet.contracts.subscriptionManager,
    token: devnet.contracts.usd,
    amount: 50_000n,
    interval: BigInt(MONTH),
    includedUnits: 0n,
    overageUnitPrice: 0n,
  });
  const planId = getPlanIdFromReceipt(
    await devnet.publicClient.waitForTransactionReceipt({ hash }),
  ).toString();
  const echo = defineCapability({
    name: "echo",
    description: "Returns its text.",
    input: z.object({ text: z.string() }),
    output: z.object({ text: z.string() }),
    pricing: [
      {
        type: "subscription",
        plan: { price: "0.05", interval: MONTH, includedUnits: 0, overageUnitPrice: "0" },
      },
    ],
    handler: async ({ text }) => ({ text }),
  });
  const specialist = createSpecialist({
    name: "echo",
    account: seller.account,
    capabilities: [echo],
    facilitator: facilitatorUrl,
    network: devnet.network,
    token: devnet.contracts.usd,
    plans: {
      echo: {
        planId,
        amount: 50_000n,
        interval: MONTH,
        includedUnits: 0,
        overageUnitPrice: 0n,
        manager: devnet.contracts.subscriptionManager,
      },
    },
  });
  const { url } = await specialist.start();
  try {
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 1_000_000n });
    const payer = createPayer({ account, network: devnet.network, facilitator: facilitatorUrl });
    const subscriptionId = await payer.subscribe({ planId });
    const headers = await payer.subscriptionHeaders(subscriptionId, url);
    const credential = { id: headers["X-Tollgate-Sub"]!, auth: headers["X-Tollgate-Sub-Auth"]! };
    const client = new Client({ name: "bench", version: "1.0.0" });
    await client.connect(new StreamableHTTPClientTransport(new URL(`${url}/mcp`)));

    const overHttp = async () => {
      const response = await fetch(`${url}/echo`, {
        method: "POST",
        headers: { "content-type": "application/json", ...headers },
        body: '{"text":"hi"}',
      });
      if (response.status !== 200) throw new Error(`HTTP answered ${response.status}`);
      await response.arrayBuffer();
    };
    const overMcp = async () => {
      const result = await client.callTool({
        name: "echo",
        arguments: { text: "hi" },
        _meta: { [McpMetaKey.TollgateSubscription]: credential },
      });
      if (result.isError === true)
        throw new Error(`MCP answered an error: ${JSON.stringify(result).slice(0, 200)}`);
    };
    const samples: Record<"http" | "mcp", number[]> = { http: [], mcp: [] };
    // Warm-up: the gate's token and status caches, the JIT.
    for (let i = 0; i < 20; i++) {
      await overHttp();
      await overMcp();
    }
    for (let round = 0; round < ROUNDS; round++) {
      for (const [name, call] of [
        ["http", overHttp],
        ["mcp", overMcp],
      ] as const) {
        for (let i = 0; i < CALLS_PER_PHASE; i++) {
          const start = process.hrtime.bigint();
          await call();
          samples[name].push(elapsedMs(start));
        }
      }
    }
    await client.close();
    const p50 = (name: "http" | "mcp") => percentile(samples[name], 50);
    const p99 = (name: "http" | "mcp") => percentile(samples[name], 99);
    console.log(
      table(
        ["transport", "calls", "p50 ms", "p99 ms", "p50 vs HTTP"],
        [
          ["HTTP route", String(samples.http.length), fmt(p50("http")), fmt(p99("http")), "1x"],
          [
            "MCP (Streamable HTTP)",
            String(samples.mcp.length),
            fmt(p50("mcp")),
            fmt(p99("mcp")),
            ratio(p50("mcp"), p50("http")),
          ],
        ],
      ),
    );
  } finally {
    await specialist.stop();
  }
} finally {
  await stack.stop();
}
