/**
 * A seller that dies halfway through a paid MCP call (its stdio process killed after the gate took
 * the payment, before it answered): the agent's call fails with the payment on record — the receipt
 * says it was paid, with the amount and transaction, and the ledger holds exactly what left the
 * wallet — and nothing is paid twice.
 */
import { fileURLToPath } from "node:url";
import type { ToolMessage } from "@langchain/core/messages";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createMcpConnections } from "../src/agent/mcp/mcpConnections.ts";
import type { PaidToolReceipt } from "../src/agent/paidTool.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let tf: TestFacilitator;
const connections = createMcpConnections();

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
}, 120_000);

afterAll(async () => {
  await connections.close();
  await tf?.stop();
  await devnet?.stop();
});

describe("a seller dying halfway through a paid MCP call", () => {
  it("leaves the payment on record in the receipt and the ledger, equal to what left the wallet, paid once", async () => {
    const sellerKey = generatePrivateKey();
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: 100_000n });
    const payer = createPayer({ account, network: devnet.network, facilitator: tf.url });
    const budget = createBudgetLedger({ store: tf.store, clock: systemClock });
    await budget.setLimits("mcp-crash", { total: 50_000n });
    const tools = await discoverTools({
      agent: "mcp-crash",
      payer,
      budget,
      mcpConnections: connections,
      mcpServers: [
        {
          command: process.execPath,
          args: [
            "--import",
            "tsx",
            fileURLToPath(new URL("./fixtures/mcpDyingSellerProcess.ts", import.meta.url)),
          ],
          env: {
            TOLLGATE_FACILITATOR_URL: tf.url,
            TOLLGATE_NETWORK: devnet.network,
            TOLLGATE_TOKEN: devnet.contracts.usd,
            TOLLGATE_SELLER_KEY: sellerKey,
          },
          cwd: fileURLToPath(new URL("..", import.meta.url)),
        },
      ],
    });
    const tool = tools.find((t) => t.tool.name === "fragile")!.tool;
    const message = (await tool.invoke({
      type: "tool_call",
      id: "crash-1",
      name: "fragile",
      args: { text: "x" },
    })) as ToolMessage;
    const receipt = message.artifact as PaidToolReceipt;
    expect(String(message.content)).toMatch(/^ERROR /);
    expect(receipt).toMatchObject({ paid: true, amount: "0.004" });
    expect(receipt.transaction).toMatch(/^0x[0-9a-f]{64}$/);
    const paidOnChain =
      100_000n -
      (await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: account.address }));
    expect(paidOnChain).toBe(4_000n);
    expect((await budget.report("mcp-crash")).spent.total).toBe(paidOnChain);
    const seller = privateKeyToAccount(sellerKey).address;
    expect(await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: seller })).toBe(
      4_000n,
    );
  });
});
