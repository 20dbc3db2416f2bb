/**
 * Selling over MCP on stdio (docs/mcp.md): the example seller (examples/mcpSeller.ts --stdio) started
 * as a child process and driven by the MCP SDK's standard stdio client, over a real devnet and
 * facilitator: unpaid → payment required with terms; paid → result and settlement in `_meta`; the
 * same proof again → refused.
 */
import { fileURLToPath } from "node:url";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { McpMetaKey } from "../src/protocol/mcpPayment.ts";
import { startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";
import { callTool, tollgateTerms } from "./support/mcpSupport.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let client: Client;
const sellerKey = generatePrivateKey();

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  client = new Client({ name: "stdio-test", version: "1.0.0" });
  await client.connect(
    new StdioClientTransport({
      command: process.execPath,
      args: [
        "--import",
        "tsx",
        fileURLToPath(new URL("../examples/mcpSeller.ts", import.meta.url)),
        "--stdio",
      ],
      env: {
        PATH: process.env.PATH ?? "",
        TOLLGATE_FACILITATOR_URL: tf.url,
        TOLLGATE_NETWORK: devnet.network,
        TOLLGATE_TOKEN: devnet.contracts.usd,
        TOLLGATE_SELLER_KEY: sellerKey,
      },
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      stderr: "ignore",
    }),
  );
}, 120_000);

afterAll(async () => {
  await client?.close();
  await tf?.stop();
  await devnet?.stop();
});

describe("a specialist over MCP stdio", () => {
  it("lists its tools, asks for payment with terms, serves a paid call with its settlement, and refuses the proof again", async () => {
    const { tools } = await client.listTools();
    expect(tools.map((t) => t.name).sort()).toEqual(["count_words", "hello"]);
    expect((await callTool(client, "hello", {})).structuredContent).toEqual({ hello: "world" });

    const unpaid = await callTool(client, "count_words", { text: "one two three" });
    expect(unpaid.isError).toBe(true);
    expect(unpaid.structuredContent).toMatchObject({
      x402Version: 2,
      accepts: [{ scheme: "exact", amount: "2000" }],
    });
    const terms = tollgateTerms(unpaid);
    const payer = createPayer({
      account: devnet.accounts[1]!.account,
      network: devnet.network,
      facilitator: tf.url,
    });
    const receipt = await payer.pay(terms.accepts.find((o) => o.scheme === "exact")!);
    const meta = { [McpMetaKey.TollgatePayment]: receipt.header };
    const paid = await callTool(client, "count_words", { text: "one two three" }, meta);
    expect(paid.structuredContent).toEqual({ words: 3 });
    expect(paid._meta?.[McpMetaKey.X402PaymentResponse]).toMatchObject({
      success: true,
      transaction: receipt.proof.tx,
    });
    const seller = privateKeyToAccount(sellerKey).address;
    expect(await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: seller })).toBe(
      2_000n,
    );

    const replay = await callTool(client, "count_words", { text: "one two three" }, meta);
    expect(tollgateTerms(replay).error).toBe("InvalidPaymentProof");
  });
});
