/**
 * Revert data as a person reads it on the dashboard: `ErrorName(arg, …)` decoded against the errors
 * of Tollgate's contracts and of the token (OpenZeppelin's ERC-6093 errors, which test tokens raise;
 * Circle's USDC reverts with `Error(string)`, which viem decodes on its own). Data nothing recognises
 * is shown as the hex it is, so a reason is never hidden.
 */
import { type Abi, decodeErrorResult, type Hex, parseAbi } from "viem";
import { batchSettlerAbi } from "../../chain/contracts/artifacts/BatchSettler.ts";
import { subscriptionManagerAbi } from "../../chain/contracts/artifacts/SubscriptionManager.ts";
import { tollgateChannelsAbi } from "../../chain/contracts/artifacts/TollgateChannels.ts";

// ERC-6093: the custom errors of OpenZeppelin's ERC-20 (0xe450d38c is ERC20InsufficientBalance).
const erc20ErrorsAbi = parseAbi([
  "error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)",
  "error ERC20InvalidSender(address sender)",
  "error ERC20InvalidReceiver(address receiver)",
  "error ERC20InsufficientAllowance(address spender, uint256 allowance, uint256 needed)",
  "error ERC20InvalidApprover(address approver)",
  "error ERC20InvalidSpender(address spender)",
]);

// One list of errors: the contracts share some (ECDSA's), and decoding picks the first by selector.
const errorsAbi: Abi = [
  ...erc20ErrorsAbi,
  ...[...batchSettlerAbi, ...subscriptionManagerAbi, ...tollgateChannelsAbi].filter(
    (item) => item.type === "error",
  ),
];

const REVERT_HEX = /^0x(?:[0-9a-fA-F]{2})*$/;

function argText(value: unknown): string {
  if (typeof value === "string") return /^0x[0-9a-fA-F]*$/.test(value) ? value : JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(argText).join(", ")}]`;
  return String(value);
}

/** `ErrorName(arg, …)` for revert data; the data itself when it decodes to no known error. */
export function describeRevert(data: string): string {
  if (data === "0x") return "reverted without a reason (0x)";
  if (!REVERT_HEX.test(data)) return data;
  try {
    const decoded = decodeErrorResult({ abi: errorsAbi, data: data as Hex });
    const args = (decoded.args ?? []) as readonly unknown[];
    return `${decoded.errorName}(${args.map(argText).join(", ")})`;
  } catch {
    return data;
  }
}

/**
 * A failure message with any revert data it quotes (`revert data 0x…`) decoded in place, for messages
 * written before the reason was decoded where the failure was recorded.
 */
export function describeFailureMessage(message: string): string {
  return message.replace(
    /revert data (0x[0-9a-fA-F]*)/g,
    (_, hex: string) => `revert ${describeRevert(hex)}`,
  );
}
