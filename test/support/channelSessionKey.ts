/**
 * P-256 session keys and vouchers for channel tests, with node:crypto as a gate would use it: the key's
 * public point as the two words TollgateChannels stores, and a voucher signature r ‖ s (IEEE P1363) over
 * the 160-byte voucher message, hashed with SHA-256.
 */
import { generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import { type Address, bytesToHex, type Hex, hexToBytes } from "viem";
import { encodeChannelVoucherMessage } from "../../src/chain/actions/channels/channelHashes.ts";

export type TestSessionKey = { privateKey: KeyObject; x: Hex; y: Hex };

export function createTestSessionKey(): TestSessionKey {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const jwk = publicKey.export({ format: "jwk" });
  const word = (b64: string | undefined) => bytesToHex(Buffer.from(b64 ?? "", "base64url"), { size: 32 });
  return { privateKey, x: word(jwk.x), y: word(jwk.y) };
}

export function signTestVoucher(
  key: TestSessionKey,
  v: { chainId: number; channels: Address; channelId: Hex; cumulativeAmount: bigint },
): Hex {
  const message = hexToBytes(encodeChannelVoucherMessage(v));
  return bytesToHex(sign("sha256", message, { key: key.privateKey, dsaEncoding: "ieee-p1363" }));
}
