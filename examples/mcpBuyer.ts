/**
 * Buying over MCP: an agent finds a seller's tools by its MCP endpoint (Streamable HTTP) and by a
 * stdio command it starts itself, and buys them under a budget. Each paid call meets x402's
 * payment-required result, is paid once through the facilitator, is retried with the proof in
 * `_meta`, and is recorded in the ledger; the free tool costs nothing; the call the budget cannot
 * cover is refused before anything is signed.
 *
 *   npx tsx examples/mcpBuyer.ts
 */
import { fileURLToPath } from "node:url";
import {
  createBudgetLedger,
  createMcpConnections,
  discoverTools,
  type PaidToolReceipt,
} from "tollgate/agent";
import { getTokenBalance } from "tollgate/chain";
import { createPayer } from "tollgate/client";
import { formatUnitsExact, parseUnitsExact, systemClock } from "tollgate/protocol";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { startMcpSeller } from "./mcpSeller.ts";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

export type McpBuyerResult = {
  /** Tool names found over Streamable HTTP and over stdio. */
  httpTools: string[];
  stdioTools: string[];
  /** What each call answered and its receipt, in order. */
  calls: { via: "http" | "stdio"; tool: string; content: string; receipt: PaidToolReceipt }[];
  /** The budget's record of the agent's spend, and what left its wallet. */
  ledgerSpent: bigint;
  buyerPaid: bigint;
  /** What each seller received on chain. */
  httpSellerReceived: bigint;
  stdioSellerReceived: bigint;
};

const TEXT = "Tollgate sells tools over MCP and HTTP alike.";

export async function main(options: ExampleOptions = {}): Promise<McpBuyerResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  const connections = createMcpConnections();
  let stopSeller: (() => Promise<void>) | undefined;
  try {
    const { devnet, facilitatorUrl, store } = stack;
    const balanceOf = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

    // The seller over Streamable HTTP, in this process.
    const httpSellerKey = generatePrivateKey();
    const seller = await startMcpSeller({
      facilitatorUrl,
      network: devnet.network,
      token: devnet.contracts.usd,
      sellerKey: httpSellerKey,
    });
    stopSeller = () => seller.stop();
    const mcpUrl = seller.manifest!.mcp!.url;
    print(`seller ${seller.name}: HTTP ${seller.url}, MCP ${mcpUrl}`);

    // The same seller as a local stdio server the agent starts; its key is handed over in its environment.
    const stdioSellerKey = generatePrivateKey();
    const stdioServer = {
      command: process.execPath,
      args: ["--import", "tsx", fileURLToPath(new URL("./mcpSeller.ts", import.meta.url)), "--stdio"],
      env: {
        TOLLGATE_FACILITATOR_URL: facilitatorUrl,
        TOLLGATE_NETWORK: devnet.network,
        TOLLGATE_TOKEN: devnet.contracts.usd,
        TOLLGATE_SELLER_KEY: stdioSellerKey,
      },
      cwd: fileURLToPath(new URL("..", import.meta.url)),
    };

    // The buyer: a funded dev account, a budget of 0.005 USDC in the ledger.
    const buyer = devnet.accounts[1]!;
    const payer = createPayer({
      account: buyer.account,
      network: devnet.network,
      facilitator: facilitatorUrl,
    });
    const budget = createBudgetLedger({ store, clock: systemClock });
    await budget.setLimits("mcp-buyer", { total: parseUnitsExact("0.005") });
    const before = await balanceOf(buyer.address);

    const common = { agent: "mcp-buyer", payer, budget, mcpConnections: connections };
    const overHttp = await discoverTools({ ...common, mcpServers: [mcpUrl] });
    const overStdio = await discoverTools({ ...common, mcpServers: [stdioServer] });
    const toolIn = (tools: typeof overHttp, name: string) => tools.find((t) => t.tool.name === name)!.tool;
    print(`over HTTP: ${overHttp.map((t) => t.tool.name).join(", ")}`);
    print(`over stdio: ${overStdio.map((t) => t.tool.name).join(", ")}`);

    const calls: McpBuyerResult["calls"] = [];
    const call = async (via: "http" | "stdio", name: string, args: Record<string, unknown>) => {
      const tool = toolIn(via === "http" ? overHttp : overStdio, name);
      const message = (await tool.invoke({
        type: "tool_call",
        id: `${via}-${calls.length}`,
        name,
        args,
      })) as {
        content: unknown;
        artifact: PaidToolReceipt;
      };
      const entry = { via, tool: name, content: String(message.content), receipt: message.artifact };
      calls.push(entry);
      print(`${via} ${name} → ${entry.content} (${entry.receipt.mode}, ${entry.receipt.amount} USDC)`);
    };
    await call("http", "hello", {});
    await call("http", "count_words", { text: TEXT });
    await call("stdio", "count_words", { text: TEXT });
    // 0.004 spent of 0.005: a third paid call does not fit, and nothing is signed for it.
    await call("stdio", "count_words", { text: TEXT });

    const stdioSeller = privateKeyToAccount(stdioSellerKey).address;
    const result: McpBuyerResult = {
      httpTools: overHttp.map((t) => t.tool.name).sort(),
      stdioTools: overStdio.map((t) => t.tool.name).sort(),
      calls,
      ledgerSpent: (await budget.report("mcp-buyer")).spent.total,
      buyerPaid: before - (await balanceOf(buyer.address)),
      httpSellerReceived: await balanceOf(seller.payTo),
      stdioSellerReceived: await balanceOf(stdioSeller),
    };
    print(
      `ledger ${formatUnitsExact(result.ledgerSpent)} USDC, wallet paid ${formatUnitsExact(result.buyerPaid)} USDC`,
    );
    return result;
  } finally {
    await connections.close();
    await stopSeller?.();
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
