/**
 * ERC-1271: asks a contract whether a signature over a hash is its own, as Circle's FiatToken v2.2 and
 * OpenZeppelin's SignatureChecker do on chain for a signer with code. The answer is yes only for the
 * exact 32-byte word `0x1626ba7e` followed by zeros (what SignatureChecker accepts); a revert, a
 * shorter or other answer, or an address without code (the call returns nothing) is no.
 *
 * The call is an `eth_call` capped at `gas`: a wallet is anyone's contract, and one whose
 * `isValidSignature` loops costs the node at most that much and answers no. It is sent once: viem
 * retries a request the node failed with an internal error, which is how nodes report running out of
 * gas, so a gas-burning wallet would cost four calls and a second of backoff instead of one.
 */
import {
  type Address,
  BaseError,
  type BlockTag,
  encodeFunctionData,
  type Hex,
  HttpRequestError,
  numberToHex,
  type PublicClient,
  TimeoutError,
  WebSocketRequestError,
} from "viem";

const erc1271Abi = [
  {
    type: "function",
    name: "isValidSignature",
    stateMutability: "view",
    inputs: [
      { name: "hash", type: "bytes32" },
      { name: "signature", type: "bytes" },
    ],
    outputs: [{ type: "bytes4" }],
  },
] as const;

/** `bytes4(keccak256("isValidSignature(bytes32,bytes)"))`, left-aligned in a 32-byte word. */
const MAGIC_WORD = `0x1626ba7e${"0".repeat(56)}`;

/**
 * Gas a wallet's check may use: what BatchSettler gives a whole `transferWithAuthorization`
 * (BatchSettler.ITEM_GAS), so a wallet whose check needs more could not settle a payment anyway.
 */
export const ERC1271_CHECK_GAS = 150_000n;

export type IsValidErc1271SignatureParameters = {
  /** The wallet. */
  address: Address;
  /** What was signed: an EIP-712 digest, or an EIP-191 message hash. */
  hash: Hex;
  signature: Hex;
  /** The most gas the call may use (default ERC1271_CHECK_GAS). */
  gas?: bigint | undefined;
  blockTag?: BlockTag | undefined;
};

/**
 * Whether the contract at `address` accepts `signature` for `hash` now. Throws only when the node
 * cannot be reached (the caller's to map); every answer of the node is a yes or a no.
 *
 * @example
 * const ok = await isValidErc1271Signature(publicClient, { address: wallet, hash: digest, signature });
 */
export async function isValidErc1271Signature(
  client: Pick<PublicClient, "request">,
  { address, hash, signature, gas, blockTag }: IsValidErc1271SignatureParameters,
): Promise<boolean> {
  const data = encodeFunctionData({
    abi: erc1271Abi,
    functionName: "isValidSignature",
    args: [hash, signature],
  });
  try {
    const answer = await client.request(
      {
        method: "eth_call",
        params: [{ to: address, data, gas: numberToHex(gas ?? ERC1271_CHECK_GAS) }, blockTag ?? "latest"],
      },
      { retryCount: 0 },
    );
    return typeof answer === "string" && answer.toLowerCase() === MAGIC_WORD;
  } catch (error) {
    if (isTransportFailure(error)) throw error;
    // A revert, running out of its gas, or any other refusal by the node to run it: not a yes.
    return false;
  }
}

function isTransportFailure(error: unknown): boolean {
  if (!(error instanceof BaseError)) return true;
  return (
    error.walk(
      (e) => e instanceof HttpRequestError || e instanceof TimeoutError || e instanceof WebSocketRequestError,
    ) !== null
  );
}
