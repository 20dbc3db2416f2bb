/**
 * Reading channels from TollgateChannels and checking vouchers the way the contract does, off chain:
 * node:crypto P-256 over the 160-byte voucher message with SHA-256 (one verify, no secp256k1 recovery).
 */
import { createPublicKey, type KeyObject, verify } from "node:crypto";
import { type Address, getAddress, type Hex, hexToBytes, zeroAddress } from "viem";
import { readChannel } from "../../../chain/actions/channels/readChannel.ts";
import type { ReadClient } from "../../../chain/clientTypes.ts";
import type { ChannelState } from "../../../protocol/channels.ts";
import { channelVoucherMessage } from "../../../protocol/channelVoucher.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { toChannelError } from "./channelErrors.ts";
import type { ChainChannel, ChannelRow } from "./channelRecords.ts";

/** The channel as the chain holds it now, or `undefined` when it was never opened. */
export async function readChainChannel(
  client: ReadClient,
  where: { chainId: number; contract: Address },
  channelId: Hex,
): Promise<ChainChannel | undefined> {
  const c = await readChannel(client, { channels: where.contract, channelId });
  if (c.payer === zeroAddress) return undefined;
  return {
    channelId: channelId.toLowerCase() as Hex,
    chainId: where.chainId,
    contract: where.contract,
    payer: c.payer,
    payee: c.payee,
    token: c.token,
    deposit: c.deposit,
    claimed: c.claimed,
    sessionKeyX: c.sessionKeyX,
    sessionKeyY: c.sessionKeyY,
    closeDelay: Number(c.closeDelay),
    closeRequestedAt: Number(c.closeRequestedAt),
    closed: c.closed,
    tag: c.tag.toLowerCase() as Hex,
  };
}

/** The channel as the chain holds it now: `NotFound` when it was never opened, chain faults as channel errors. */
export async function readKnownChannel(
  client: ReadClient,
  where: { chainId: number; contract: Address },
  channelId: Hex,
): Promise<ChainChannel> {
  const c = await readChainChannel(client, where, channelId).catch((e: unknown) => {
    throw toChannelError(e);
  });
  if (c === undefined) throw new TollgateError("NotFound", "no such channel");
  return c;
}

/** The wire form of a channel (`GET /channels/:id`). */
export function channelToWire(c: ChainChannel, network: `eip155:${number}`): ChannelState {
  return {
    channelId: c.channelId,
    network,
    contract: getAddress(c.contract),
    payer: getAddress(c.payer),
    payee: getAddress(c.payee),
    token: getAddress(c.token),
    deposit: c.deposit.toString(),
    claimed: c.claimed.toString(),
    sessionKeyX: c.sessionKeyX.toLowerCase() as Hex,
    sessionKeyY: c.sessionKeyY.toLowerCase() as Hex,
    closeDelay: c.closeDelay,
    closeRequestedAt: c.closeRequestedAt,
    closableAt: c.closeRequestedAt === 0 ? 0 : c.closeRequestedAt + c.closeDelay,
    closed: c.closed,
    ...(c.tag === undefined ? {} : { tag: c.tag }),
  };
}

/** A row's chain columns as a `ChainChannel`. */
export function rowToChain(row: ChannelRow): ChainChannel {
  return {
    channelId: row.channel_id as Hex,
    chainId: row.chain_id,
    contract: row.contract as Address,
    payer: row.payer as Address,
    payee: row.payee as Address,
    token: row.token as Address,
    deposit: row.deposit,
    claimed: row.claimed,
    sessionKeyX: row.session_key_x as Hex,
    sessionKeyY: row.session_key_y as Hex,
    closeDelay: row.close_delay,
    closeRequestedAt: row.close_requested_at,
    closed: row.closed,
  };
}

/**
 * A cache of imported session keys: a key's point never changes for its channel, so it is parsed once.
 * `undefined` for a point that is not on P-256 (the contract accepts any non-zero words).
 */
export function createSessionKeyCache(maxKeys = 50_000) {
  const keys = new Map<string, KeyObject | null>();
  return (x: Hex, y: Hex): KeyObject | undefined => {
    const id = `${x}${y}`.toLowerCase();
    let key = keys.get(id);
    if (key === undefined) {
      try {
        key = createPublicKey({
          key: {
            kty: "EC",
            crv: "P-256",
            x: Buffer.from(x.slice(2), "hex").toString("base64url"),
            y: Buffer.from(y.slice(2), "hex").toString("base64url"),
          },
          format: "jwk",
        });
      } catch {
        key = null;
      }
      if (keys.size >= maxKeys) keys.delete(keys.keys().next().value as string);
      keys.set(id, key);
    }
    return key ?? undefined;
  };
}

/** True when `signature` (r ‖ s, 64 bytes) is `key` signing the channel's voucher for `cumulativeAmount`. */
export function verifyChannelVoucher(
  key: KeyObject,
  where: { chainId: number; contract: Address },
  channelId: Hex,
  cumulativeAmount: bigint,
  signature: Uint8Array,
): boolean {
  if (signature.length !== 64) return false;
  const message = channelVoucherMessage(
    { chainId: where.chainId, channels: where.contract },
    channelId,
    cumulativeAmount,
  );
  return verify("sha256", message, { key, dsaEncoding: "ieee-p1363" }, signature);
}

/** Hex of a signature's bytes, as the store keeps it. */
export function signatureHex(signature: Uint8Array): Hex {
  return `0x${Buffer.from(signature).toString("hex")}`;
}

/** Bytes of a stored signature. */
export function signatureBytes(hex: string): Uint8Array {
  return hexToBytes(hex as Hex);
}
