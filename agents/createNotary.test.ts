import { concat, type Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import {
  createNotary,
  documentHash,
  NOTARY_TAG,
  NotarizeInputSchema,
  verifyNotarization,
} from "./createNotary.ts";

describe("createNotary on a devnet", () => {
  let devnet: Devnet;
  let notarize: ReturnType<typeof createNotary>;
  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 2, balance: 0n });
    notarize = createNotary({
      walletClient: devnet.walletClient(devnet.accounts[1]!),
      publicClient: devnet.publicClient,
    });
  });
  afterAll(async () => {
    await devnet?.stop();
  });

  it("records the document's keccak256 in a transaction to itself, tagged TGN1", async () => {
    const text = "The canal was dug in the eighteenth century.";
    const result = await notarize.handler(NotarizeInputSchema.parse({ text }), {});
    const notary = devnet.accounts[1]!.address;
    expect(result.hash).toBe(documentHash(text));
    expect(result.notary).toBe(notary);
    const transaction = await devnet.publicClient.getTransaction({ hash: result.transactionHash as Hex });
    expect(transaction.from).toBe(notary.toLowerCase());
    expect(transaction.to).toBe(notary.toLowerCase());
    expect(transaction.value).toBe(0n);
    expect(transaction.input).toBe(concat([NOTARY_TAG, documentHash(text)]));
    expect(BigInt(result.blockNumber)).toBe(transaction.blockNumber);
    const block = await devnet.publicClient.getBlock({ blockNumber: transaction.blockNumber! });
    expect(result.timestamp).toBe(Number(block.timestamp));
  });

  it("verifies a notarization and refuses another document or notary", async () => {
    const text = "A lighthouse guides ships past the rocks.";
    const result = await notarize.handler(NotarizeInputSchema.parse({ text }), {});
    const transactionHash = result.transactionHash as Hex;
    const valid = await verifyNotarization(devnet.publicClient, { transactionHash, text });
    expect(valid).toMatchObject({
      valid: true,
      hash: documentHash(text),
      blockNumber: BigInt(result.blockNumber),
    });
    expect(await verifyNotarization(devnet.publicClient, { transactionHash, text: `${text}!` })).toEqual({
      valid: false,
      reason: "hash_mismatch",
    });
    expect(
      await verifyNotarization(devnet.publicClient, {
        transactionHash,
        text,
        notary: devnet.accounts[0]!.address,
      }),
    ).toEqual({ valid: false, reason: "wrong_notary" });
  });

  it("records a given hash as is", async () => {
    const hash = documentHash("kept private");
    const result = await notarize.handler(
      NotarizeInputSchema.parse({ hash: hash.toUpperCase().replace("0X", "0x") }),
      {},
    );
    expect(result.hash).toBe(hash);
    expect(
      await verifyNotarization(devnet.publicClient, { transactionHash: result.transactionHash as Hex, hash }),
    ).toMatchObject({
      valid: true,
    });
  });

  it("serializes concurrent calls so each gets its own transaction", async () => {
    const texts = ["one", "two", "three", "four"];
    const results = await Promise.all(
      texts.map((text) => notarize.handler(NotarizeInputSchema.parse({ text }), {})),
    );
    expect(new Set(results.map((result) => result.transactionHash)).size).toBe(4);
    for (const [index, result] of results.entries()) {
      expect(
        await verifyNotarization(devnet.publicClient, {
          transactionHash: result.transactionHash as Hex,
          text: texts[index]!,
        }),
      ).toMatchObject({ valid: true });
    }
  });

  it("says a transaction that is not a notarization is not one", async () => {
    const hash = await devnet
      .walletClient(devnet.accounts[0]!)
      .sendTransaction({ to: devnet.accounts[1]!.address, value: 1n });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    expect(await verifyNotarization(devnet.publicClient, { transactionHash: hash })).toEqual({
      valid: false,
      reason: "not_a_notarization",
    });
    expect(
      await verifyNotarization(devnet.publicClient, { transactionHash: `0x${"ab".repeat(32)}` }),
    ).toEqual({ valid: false, reason: "not_found" });
  });

  it("takes exactly one of text and hash", () => {
    expect(NotarizeInputSchema.safeParse({}).success).toBe(false);
    expect(NotarizeInputSchema.safeParse({ text: "a", hash: documentHash("a") }).success).toBe(false);
    expect(NotarizeInputSchema.safeParse({ hash: "0x1234" }).success).toBe(false);
    expect(notarize.pricing).toEqual([{ type: "one-time", price: "0.05" }]);
  });
});
