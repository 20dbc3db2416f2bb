/**
 * The hashes TollgateChannels computes, reproduced off chain so a payer, gate or facilitator needs no
 * round trip: the channel id, the EIP-3009 nonces that open and top up a channel, and the voucher
 * message and digest the session key signs. Each matches the contract's view of the same name; the
 * contract tests compare them.
 */
import { type Address, encodeAbiParameters, type Hex, keccak256, sha256, stringToBytes } from "viem";

/** keccak256("TollgateChannels.Voucher.v1"): the first word of every voucher message. */
export const CHANNEL_VOUCHER_TAG: Hex = keccak256(stringToBytes("TollgateChannels.Voucher.v1"));
/** keccak256("TollgateChannels.Open.v1"). */
export const CHANNEL_OPEN_TAG: Hex = keccak256(stringToBytes("TollgateChannels.Open.v1"));
/** keccak256("TollgateChannels.TopUp.v1"). */
export const CHANNEL_TOP_UP_TAG: Hex = keccak256(stringToBytes("TollgateChannels.TopUp.v1"));

/** Where a channel lives: the chain and the TollgateChannels contract. */
export type ChannelDomain = { chainId: number; channels: Address };

/** keccak256(abi.encode(chainId, channels, payer, payee, token, salt)). */
export function computeChannelId(
  d: ChannelDomain & { payer: Address; payee: Address; token: Address; salt: Hex },
): Hex {
  return keccak256(
    encodeAbiParameters(
      [
        { type: "uint256" },
        { type: "address" },
        { type: "address" },
        { type: "address" },
        { type: "address" },
        { type: "bytes32" },
      ],
      [BigInt(d.chainId), d.channels, d.payer, d.payee, d.token, d.salt],
    ),
  );
}

/** The EIP-3009 nonce of an open: binds payee, token, session key, close delay and salt. */
export function computeChannelOpenNonce(
  d: ChannelDomain & {
    payee: Address;
    token: Address;
    sessionKeyX: Hex;
    sessionKeyY: Hex;
    closeDelay: bigint;
    salt: Hex;
  },
): Hex {
  return keccak256(
    encodeAbiParameters(
      [
        { type: "bytes32" },
        { type: "uint256" },
        { type: "address" },
        { type: "address" },
        { type: "address" },
        { type: "bytes32" },
        { type: "bytes32" },
        { type: "uint64" },
        { type: "bytes32" },
      ],
      [
        CHANNEL_OPEN_TAG,
        BigInt(d.chainId),
        d.channels,
        d.payee,
        d.token,
        d.sessionKeyX,
        d.sessionKeyY,
        d.closeDelay,
        d.salt,
      ],
    ),
  );
}

/** The EIP-3009 nonce of a top-up of `channelId`; `salt` makes each top-up distinct. */
export function computeChannelTopUpNonce(d: ChannelDomain & { channelId: Hex; salt: Hex }): Hex {
  return keccak256(
    encodeAbiParameters(
      [
        { type: "bytes32" },
        { type: "uint256" },
        { type: "address" },
        { type: "bytes32" },
        { type: "bytes32" },
      ],
      [CHANNEL_TOP_UP_TAG, BigInt(d.chainId), d.channels, d.channelId, d.salt],
    ),
  );
}

/**
 * The 160-byte message a voucher signs: abi.encode(VOUCHER_TAG, chainId, channels, channelId,
 * cumulativeAmount). A P-256 signature with SHA-256 over it (node:crypto `sign("sha256", …)`) is what
 * the contract checks against `sha256(message)` with the P256VERIFY precompile.
 */
export function encodeChannelVoucherMessage(
  d: ChannelDomain & { channelId: Hex; cumulativeAmount: bigint },
): Hex {
  return encodeAbiParameters(
    [{ type: "bytes32" }, { type: "uint256" }, { type: "address" }, { type: "bytes32" }, { type: "uint256" }],
    [CHANNEL_VOUCHER_TAG, BigInt(d.chainId), d.channels, d.channelId, d.cumulativeAmount],
  );
}

/** sha256 of the voucher message: the hash P256VERIFY is given. */
export function computeChannelVoucherDigest(
  d: ChannelDomain & { channelId: Hex; cumulativeAmount: bigint },
): Hex {
  return sha256(encodeChannelVoucherMessage(d));
}
