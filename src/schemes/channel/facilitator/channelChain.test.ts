import { generateKeyPairSync, sign } from "node:crypto";
import { bytesToHex, hexToBytes, keccak256, stringToBytes, toHex } from "viem";
import { describe, expect, it } from "vitest";
import { encodeChannelVoucherMessage } from "../../../chain/actions/channels/channelHashes.ts";
import { channelVoucherMessage } from "../../../protocol/channelVoucher.ts";
import { createSessionKeyCache, verifyChannelVoucher } from "./channelChain.ts";

const where = { chainId: 31337, contract: "0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9" as const };
const channelId = keccak256(stringToBytes("a channel"));

function sessionKey() {
  const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const jwk = publicKey.export({ format: "jwk" });
  const word = (b64: string | undefined) => bytesToHex(Buffer.from(b64 ?? "", "base64url"), { size: 32 });
  return { privateKey, x: word(jwk.x), y: word(jwk.y) };
}

function signVoucher(key: ReturnType<typeof sessionKey>, amount: bigint, at = where, id = channelId) {
  const message = hexToBytes(
    encodeChannelVoucherMessage({
      chainId: at.chainId,
      channels: at.contract,
      channelId: id,
      cumulativeAmount: amount,
    }),
  );
  return new Uint8Array(sign("sha256", message, { key: key.privateKey, dsaEncoding: "ieee-p1363" }));
}

describe("channel vouchers at the facilitator", () => {
  it("encodes the voucher message exactly as the gate's protocol module does", () => {
    for (const amount of [0n, 1n, 30_000n, 2n ** 256n - 1n]) {
      const ours = encodeChannelVoucherMessage({
        chainId: where.chainId,
        channels: where.contract,
        channelId,
        cumulativeAmount: amount,
      });
      const gates = channelVoucherMessage(
        { chainId: where.chainId, channels: where.contract },
        channelId,
        amount,
      );
      expect(ours).toBe(bytesToHex(gates));
      expect(hexToBytes(ours)).toHaveLength(160);
    }
  });

  it("accepts the session key's voucher and refuses it for another amount, channel, chain or contract", () => {
    const key = sessionKey();
    const verifier = createSessionKeyCache()(key.x, key.y)!;
    const signature = signVoucher(key, 500n);
    expect(verifyChannelVoucher(verifier, where, channelId, 500n, signature)).toBe(true);
    expect(verifyChannelVoucher(verifier, where, channelId, 501n, signature)).toBe(false);
    expect(verifyChannelVoucher(verifier, where, keccak256(stringToBytes("other")), 500n, signature)).toBe(
      false,
    );
    expect(verifyChannelVoucher(verifier, { ...where, chainId: 8453 }, channelId, 500n, signature)).toBe(
      false,
    );
    expect(
      verifyChannelVoucher(
        verifier,
        { ...where, contract: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0" },
        channelId,
        500n,
        signature,
      ),
    ).toBe(false);
    expect(verifyChannelVoucher(verifier, where, channelId, 500n, signature.subarray(0, 63))).toBe(false);
    const other = sessionKey();
    expect(verifyChannelVoucher(verifier, where, channelId, 500n, signVoucher(other, 500n))).toBe(false);
  });

  it("refuses a session key that is not a P-256 point, and caches what it imported", () => {
    const cache = createSessionKeyCache();
    expect(cache(toHex(1, { size: 32 }), toHex(2, { size: 32 }))).toBeUndefined();
    const key = sessionKey();
    expect(cache(key.x, key.y)).toBe(cache(key.x, key.y));
  });
});
