import {
  type Address,
  concat,
  type Hex,
  isHex,
  keccak256,
  type PublicClient,
  size,
  slice,
  stringToHex,
} from "viem";
import { sendTransaction } from "viem/actions";
import { z } from "zod";
import { type Capability, defineCapability } from "../src/agent/tools/capability.ts";
import type { WriteClient } from "../src/chain/clientTypes.ts";
import { TollgateError } from "../src/protocol/errors.ts";

/**
 * Tag in front of every notarized hash: "TGN1" (Tollgate notary, format 1). A notarization is a
 * zero-value transaction from the notary's account to itself whose data is the tag and the 32-byte
 * keccak256 of the document, so it needs no contract and anyone can check it from the transaction.
 */
export const NOTARY_TAG: Hex = stringToHex("TGN1");

const Bytes32Schema = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, { error: "expected a 32-byte hex hash" })
  .transform((hash) => hash.toLowerCase() as Hex);

export const NotarizeInputSchema = z
  .object({
    text: z
      .string()
      .min(1)
      .max(1_000_000)
      .optional()
      .describe("The document; its keccak256 hash is recorded."),
    hash: Bytes32Schema.optional().describe(
      "A keccak256 hash to record instead of a document (0x + 64 hex).",
    ),
  })
  .refine((input) => (input.text === undefined) !== (input.hash === undefined), {
    error: "give exactly one of text and hash",
  });
export type NotarizeInput = z.input<typeof NotarizeInputSchema>;

export const NotarizeOutputSchema = z.object({
  hash: z.string(),
  transactionHash: z.string(),
  /** Decimal block number. */
  blockNumber: z.string(),
  /** Block timestamp, Unix seconds. */
  timestamp: z.int().nonnegative(),
  notary: z.string(),
});
export type NotarizeOutput = z.infer<typeof NotarizeOutputSchema>;

export type NotaryClients = {
  /** Sends the notarizing transactions from its account (which pays their gas). */
  walletClient: WriteClient;
  publicClient: Pick<PublicClient, "waitForTransactionReceipt" | "getBlock">;
};

/** The keccak256 of a document's UTF-8 bytes: what the notary records. */
export function documentHash(text: string): Hex {
  return keccak256(stringToHex(text));
}

/**
 * The on-chain notary capability: records a document's keccak256 hash in a transaction from the
 * notary's account to itself and returns the transaction and its block. One transaction at a time per
 * notary, so concurrent calls never race for a nonce. Pay once per call, 0.05 USDC.
 */
export function createNotary(
  clients: NotaryClients,
): Capability<typeof NotarizeInputSchema, typeof NotarizeOutputSchema> {
  const { walletClient, publicClient } = clients;
  let queue: Promise<unknown> = Promise.resolve();

  async function record(hash: Hex): Promise<NotarizeOutput> {
    const transactionHash = await sendTransaction(walletClient, {
      account: walletClient.account,
      chain: walletClient.chain,
      to: walletClient.account.address,
      value: 0n,
      data: concat([NOTARY_TAG, hash]),
    });
    const receipt = await publicClient.waitForTransactionReceipt({ hash: transactionHash });
    if (receipt.status !== "success") {
      throw new TollgateError("ChainUnavailable", "the notarizing transaction reverted", {
        details: { transactionHash },
      });
    }
    const block = await publicClient.getBlock({ blockNumber: receipt.blockNumber });
    return {
      hash,
      transactionHash,
      blockNumber: receipt.blockNumber.toString(),
      timestamp: Number(block.timestamp),
      notary: walletClient.account.address,
    };
  }

  return defineCapability({
    name: "notarize",
    description:
      "Notarize a document on chain: records its keccak256 hash in a blockchain transaction and " +
      "returns the transaction hash and block, as a timestamped proof that the document existed.",
    input: NotarizeInputSchema,
    output: NotarizeOutputSchema,
    pricing: [{ type: "one-time", price: "0.05" }],
    handler: async (input) => {
      const hash = input.hash ?? documentHash(input.text ?? "");
      const result = queue.then(() => record(hash));
      queue = result.catch(() => undefined);
      return result;
    },
  });
}

export type NotarizationCheck =
  | { valid: true; hash: Hex; notary: Address; blockNumber: bigint; timestamp: bigint }
  | { valid: false; reason: "not_found" | "not_a_notarization" | "hash_mismatch" | "wrong_notary" };

/**
 * Whether transaction `transactionHash` notarizes `text` (or `hash`), optionally by `notary`.
 * A missing or foreign transaction is an expected outcome, so it is data with a reason.
 */
export async function verifyNotarization(
  publicClient: Pick<PublicClient, "getTransaction" | "getBlock">,
  check: { transactionHash: Hex; text?: string; hash?: Hex; notary?: Address },
): Promise<NotarizationCheck> {
  let transaction: Awaited<ReturnType<PublicClient["getTransaction"]>>;
  try {
    transaction = await publicClient.getTransaction({ hash: check.transactionHash });
  } catch {
    return { valid: false, reason: "not_found" };
  }
  const data = transaction.input;
  const sentToSelf = transaction.to?.toLowerCase() === transaction.from.toLowerCase();
  if (!sentToSelf || !isHex(data) || size(data) !== 36 || slice(data, 0, 4) !== NOTARY_TAG) {
    return { valid: false, reason: "not_a_notarization" };
  }
  const recorded = slice(data, 4, 36);
  const expected = check.hash ?? (check.text === undefined ? undefined : documentHash(check.text));
  if (expected !== undefined && recorded.toLowerCase() !== expected.toLowerCase()) {
    return { valid: false, reason: "hash_mismatch" };
  }
  if (check.notary !== undefined && check.notary.toLowerCase() !== transaction.from.toLowerCase()) {
    return { valid: false, reason: "wrong_notary" };
  }
  if (transaction.blockNumber === null) return { valid: false, reason: "not_found" };
  const block = await publicClient.getBlock({ blockNumber: transaction.blockNumber });
  return {
    valid: true,
    hash: recorded,
    notary: transaction.from,
    blockNumber: transaction.blockNumber,
    timestamp: block.timestamp,
  };
}
