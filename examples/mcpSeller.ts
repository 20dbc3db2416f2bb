/**
 * Selling over MCP: a specialist whose capability is an MCP tool as well as an HTTP route, behind one
 * gate. `startMcpSeller` serves it over Streamable HTTP at `<url>/mcp`; run as a script with
 * `--stdio`, the same seller answers MCP on stdin/stdout, as a local tool server that an MCP host
 * (an agent, an IDE) starts as a child process:
 *
 *   TOLLGATE_FACILITATOR_URL=… TOLLGATE_NETWORK=eip155:31337 TOLLGATE_TOKEN=0x… \
 *   TOLLGATE_SELLER_KEY=0x… npx tsx examples/mcpSeller.ts --stdio
 *
 * Its own payout key signs its manifest; read it from the environment, never from a file in the repo.
 * On stdio, stdout carries the protocol: nothing else may be printed there.
 */
import { StdioServerTransport } from "@modelcontextprotocol/sdk/server/stdio.js";
import { type Capability, createSpecialist, defineCapability, type Specialist } from "tollgate/agent";
import { privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import { runIfMain } from "./startLocalStack.ts";

/** The tool sold: a word count, 0.002 USDC a call, paid once per call. */
export const countWords = defineCapability({
  name: "count_words",
  description: "Counts the words of a text.",
  input: z.object({ text: z.string().max(10_000) }),
  output: z.object({ words: z.number() }),
  pricing: [{ type: "one-time", price: "0.002" }],
  handler: async ({ text }) => ({ words: text.split(/\s+/).filter((word) => word !== "").length }),
});

/** A free tool beside it, served over MCP without the gate: any MCP client may call it. */
export const hello: Capability = {
  name: "hello",
  description: "Says hello; free.",
  input: z.object({}),
  output: z.object({ hello: z.string() }),
  pricing: [],
  handler: async () => ({ hello: "world" }),
};

export type McpSellerOptions = {
  facilitatorUrl: string;
  network: `eip155:${number}`;
  token: `0x${string}`;
  /** The seller's payout key (0x-prefixed hex). */
  sellerKey: `0x${string}`;
};

/** Starts the seller on a free local port: HTTP routes, manifest, and the MCP endpoint at `/mcp`. */
export async function startMcpSeller(options: McpSellerOptions): Promise<Specialist> {
  const specialist = createSpecialist({
    name: "word-counter",
    description: "Counts words, over HTTP and MCP.",
    account: privateKeyToAccount(options.sellerKey),
    capabilities: [countWords],
    facilitator: options.facilitatorUrl,
    network: options.network,
    token: options.token,
    mcp: { freeTools: [hello] },
  });
  await specialist.start();
  return specialist;
}

const EnvSchema = z.object({
  TOLLGATE_FACILITATOR_URL: z.url(),
  TOLLGATE_NETWORK: z.string().regex(/^eip155:[0-9]+$/),
  TOLLGATE_TOKEN: z.string().regex(/^0x[0-9a-fA-F]{40}$/),
  TOLLGATE_SELLER_KEY: z.string().regex(/^0x[0-9a-fA-F]{64}$/),
});

/** `--stdio`: serve MCP on stdin/stdout until the host closes stdin. */
async function serveStdio(): Promise<void> {
  const env = EnvSchema.parse(process.env);
  const specialist = await startMcpSeller({
    facilitatorUrl: env.TOLLGATE_FACILITATOR_URL,
    network: env.TOLLGATE_NETWORK as `eip155:${number}`,
    token: env.TOLLGATE_TOKEN as `0x${string}`,
    sellerKey: env.TOLLGATE_SELLER_KEY as `0x${string}`,
  });
  const transport = new StdioServerTransport();
  transport.onclose = () => {
    void specialist.stop().then(() => process.exit(0));
  };
  process.stdin.on("end", () => void transport.close());
  await specialist.serveMcp(transport);
  process.stderr.write(`word-counter serving MCP on stdio (HTTP at ${specialist.url})\n`);
}

await runIfMain(import.meta.url, async () => {
  if (process.argv.includes("--stdio")) await serveStdio();
  else process.stderr.write("run with --stdio, or see examples/mcpBuyer.ts\n");
});
