import { generateKeyPairSync, sign, verify } from "node:crypto";
import { encodeAbiParameters, keccak256, toHex } from "viem";
import { describe, expect, it } from "vitest";
import { base64UrlEncode } from "./base64.ts";
import {
  CHANNEL_VOUCHER_TAG,
  ChannelVoucherSchema,
  channelVoucherMessage,
  channelVoucherMessageFrom,
  channelVoucherPrefix,
  encodeChannelVoucher,
  MAX_CHANNEL_VOUCHER_HEADER,
  parseChannelVoucher,
  safeParseChannelVoucher,
} from "./channelVoucher.ts";

const channels = "0x5FbDB2315678afecb367f032d93F642f64180aa3" as const;
const channelId = `0x${"ab".repeat(32)}` as const;
const signature = new Uint8Array(64).map((_, i) => i * 3);

describe("channel voucher message", () => {
  it("tags messages with keccak256 of TollgateChannels.Voucher.v1, as TollgateChannels.VOUCHER_TAG", () => {
    expect(CHANNEL_VOUCHER_TAG).toBe(keccak256(toHex("TollgateChannels.Voucher.v1")));
  });

  it("is abi.encode(tag, chainId, contract, channelId, cumulative): 160 bytes", () => {
    const message = channelVoucherMessage({ chainId: 31337, channels }, channelId, 123_456n);
    const expected = encodeAbiParameters(
      [
        { type: "bytes32" },
        { type: "uint256" },
        { type: "address" },
        { type: "bytes32" },
        { type: "uint256" },
      ],
      [CHANNEL_VOUCHER_TAG, 31337n, channels, channelId, 123_456n],
    );
    expect(message.length).toBe(160);
    expect(toHex(message)).toBe(expected);
  });

  it("builds the same message from a channel's cached prefix", () => {
    const prefix = channelVoucherPrefix({ chainId: 8453n, channels }, channelId);
    expect(channelVoucherMessageFrom(prefix, 2n ** 255n)).toEqual(
      channelVoucherMessage({ chainId: 8453, channels }, channelId, 2n ** 255n),
    );
  });

  it("differs when chain, contract, channel or amount differ", () => {
    const base = toHex(channelVoucherMessage({ chainId: 1, channels }, channelId, 5n));
    const others = [
      channelVoucherMessage({ chainId: 2, channels }, channelId, 5n),
      channelVoucherMessage({ chainId: 1, channels: `0x${"11".repeat(20)}` }, channelId, 5n),
      channelVoucherMessage({ chainId: 1, channels }, `0x${"cd".repeat(32)}`, 5n),
      channelVoucherMessage({ chainId: 1, channels }, channelId, 6n),
    ].map((m) => toHex(m));
    for (const other of others) expect(other).not.toBe(base);
  });

  it("refuses a cumulative amount outside uint256", () => {
    expect(() => channelVoucherMessage({ chainId: 1, channels }, channelId, -1n)).toThrow(/uint256/);
    expect(() => channelVoucherMessage({ chainId: 1, channels }, channelId, 2n ** 256n)).toThrow(/uint256/);
  });

  it("verifies a P-256 P1363 signature over SHA-256 of the message with node:crypto", () => {
    const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "P-256" });
    const message = channelVoucherMessage({ chainId: 31337, channels }, channelId, 10n);
    const sig = sign("sha256", message, { key: privateKey, dsaEncoding: "ieee-p1363" });
    expect(sig.length).toBe(64);
    expect(verify("sha256", message, { key: publicKey, dsaEncoding: "ieee-p1363" }, sig)).toBe(true);
    const other = channelVoucherMessage({ chainId: 31337, channels }, channelId, 11n);
    expect(verify("sha256", other, { key: publicKey, dsaEncoding: "ieee-p1363" }, sig)).toBe(false);
  });
});

describe("channel voucher header", () => {
  it("round-trips id, cumulative amount and signature", () => {
    const header = encodeChannelVoucher({ channelId, cumulativeAmount: 70_000n, signature });
    expect(header).toBe(`${channelId}.70000.${base64UrlEncode(signature)}`);
    expect(header.length).toBeLessThanOrEqual(MAX_CHANNEL_VOUCHER_HEADER);
    expect(parseChannelVoucher(`  ${header}\t`)).toEqual({ channelId, cumulativeAmount: 70_000n, signature });
    expect(
      ChannelVoucherSchema.parse({ channelId, cumulativeAmount: "70000", signature: header.split(".")[2] }),
    ).toMatchObject({ channelId, signature: header.split(".")[2] });
  });

  it("fits the largest uint256 under the header cap", () => {
    const header = encodeChannelVoucher({ channelId, cumulativeAmount: 2n ** 256n - 1n, signature });
    expect(header.length).toBe(MAX_CHANNEL_VOUCHER_HEADER);
    expect(parseChannelVoucher(header).cumulativeAmount).toBe(2n ** 256n - 1n);
  });

  const good = encodeChannelVoucher({ channelId, cumulativeAmount: 5n, signature });
  const [id, , sig] = good.split(".") as [string, string, string];
  it.each([
    ["empty", ""],
    ["two parts", `${id}.5`],
    ["four parts", `${good}.x`],
    ["uppercase id", `${id.toUpperCase().replace("0X", "0x")}.5.${sig}`],
    ["short id", `${id.slice(0, -2)}.5.${sig}`],
    ["id without 0x", `${id.slice(2)}00.5.${sig}`],
    ["leading zero", `${id}.05.${sig}`],
    ["negative", `${id}.-5.${sig}`],
    ["exponent", `${id}.5e3.${sig}`],
    ["above uint256", `${id}.${2n ** 256n}.${sig}`],
    ["short signature", `${id}.5.${sig.slice(0, -1)}`],
    ["padded signature", `${id}.5.${sig}==`],
    ["standard base64 signature", `${id}.5.${sig.slice(0, -1)}+`],
    ["non-zero unused bits", `${id}.5.${sig.slice(0, -1)}B`],
    ["huge", "a".repeat(10_000)],
  ])("refuses a malformed header (%s) without throwing", (_, header) => {
    const parsed = safeParseChannelVoucher(header);
    expect(parsed.ok).toBe(false);
    expect(() => parseChannelVoucher(header)).toThrow(/invalid channel voucher/);
  });

  it("refuses to encode a signature that is not 64 bytes", () => {
    expect(() =>
      encodeChannelVoucher({ channelId, cumulativeAmount: 1n, signature: new Uint8Array(65) }),
    ).toThrow(/64 bytes/);
  });
});
