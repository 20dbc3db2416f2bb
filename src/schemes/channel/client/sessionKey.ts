/**
 * A channel's P-256 session key, held by the payer: generated per channel with node:crypto, its public
 * point authorised once by the payer's wallet in the open signature, then used to sign each voucher
 * (ECDSA P-256 over SHA-256 of the 160-byte message, IEEE-P1363 `r ‖ s`). A P-256 check costs a gate
 * about 90 µs in node:crypto, where recovering a secp256k1 wallet signature in JavaScript costs ~2 ms.
 */
import { createPrivateKey, generateKeyPairSync, type KeyObject, sign } from "node:crypto";
import type { Hex } from "viem";
import {
  type ChannelVoucherDomain,
  channelVoucherMessageFrom,
  channelVoucherPrefix,
  encodeChannelVoucher,
} from "../../../protocol/channelVoucher.ts";
import { TollgateError } from "../../../protocol/errors.ts";

/** A session key and its public point as the two 32-byte words `TollgateChannels` stores. */
export type SessionKey = { privateKey: KeyObject; x: Hex; y: Hex };

const word = (b64url: string | undefined): Hex => {
  const bytes = Buffer.from(b64url ?? "", "base64url");
  if (bytes.length !== 32) throw new TollgateError("InvalidRequest", "a P-256 coordinate is 32 bytes");
  return `0x${bytes.toString("hex")}`;
};

function fromPrivateKey(privateKey: KeyObject): SessionKey {
  const jwk = privateKey.export({ format: "jwk" });
  if (jwk.crv !== "P-256") throw new TollgateError("InvalidRequest", "a session key is a P-256 key");
  return { privateKey, x: word(jwk.x), y: word(jwk.y) };
}

/** A fresh session key (one per channel). */
export function createSessionKey(): SessionKey {
  return fromPrivateKey(generateKeyPairSync("ec", { namedCurve: "P-256" }).privateKey);
}

/** The key as PKCS#8 DER in base64url, for a payer's channel store (a secret: store it 0600). */
export function exportSessionKey(key: SessionKey): string {
  return key.privateKey.export({ format: "der", type: "pkcs8" }).toString("base64url");
}

/** The key back from `exportSessionKey`. Throws `InvalidRequest` for anything but a P-256 key. */
export function importSessionKeyPrivate(pkcs8: string): SessionKey {
  try {
    return fromPrivateKey(
      createPrivateKey({ key: Buffer.from(pkcs8, "base64url"), format: "der", type: "pkcs8" }),
    );
  } catch (cause) {
    if (cause instanceof TollgateError) throw cause;
    throw new TollgateError("InvalidRequest", "stored session key is not a P-256 PKCS#8 key", { cause });
  }
}

/** Signs vouchers of one channel; the message's constant 128 bytes are built once. */
export type VoucherSigner = {
  /** The `X-Tollgate-Channel` header value for `cumulativeAmount`. */
  header(cumulativeAmount: bigint): string;
  /** The 64-byte P1363 signature of `cumulativeAmount`. */
  sign(cumulativeAmount: bigint): Uint8Array;
};

/**
 * @example
 * const signer = createVoucherSigner(key, { chainId: 31337, channels }, channelId);
 * headers.set("X-Tollgate-Channel", signer.header(30_000n));
 */
export function createVoucherSigner(
  key: SessionKey,
  domain: ChannelVoucherDomain,
  channelId: Hex,
): VoucherSigner {
  const prefix = channelVoucherPrefix(domain, channelId);
  const signer = { key: key.privateKey, dsaEncoding: "ieee-p1363" as const };
  const signAmount = (cumulativeAmount: bigint) =>
    new Uint8Array(sign("sha256", channelVoucherMessageFrom(prefix, cumulativeAmount), signer));
  return {
    sign: signAmount,
    header: (cumulativeAmount) =>
      encodeChannelVoucher({ channelId, cumulativeAmount, signature: signAmount(cumulativeAmount) }),
  };
}
