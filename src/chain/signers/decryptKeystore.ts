/**
 * Web3 Secret Storage v3 (the JSON keystore geth, foundry's `cast wallet` and most wallets write):
 * a private key encrypted with AES-128-CTR under a key derived from a password by scrypt or
 * PBKDF2-HMAC-SHA256, with a MAC to tell a wrong password from a right one.
 *
 * Spec (ethereum.org, "Web3 Secret Storage Definition"): derivedKey = KDF(password, salt, params);
 * MAC = keccak256(derivedKey[16..32] ++ ciphertext); key = AES-128-CTR(derivedKey[0..16], iv)⁻¹(ciphertext).
 */
import { createDecipheriv, pbkdf2, scrypt, timingSafeEqual } from "node:crypto";
import { promisify } from "node:util";
import { bytesToHex, concat, getAddress, type Hex, hexToBytes, keccak256, pad } from "viem";
import { privateKeyToAddress } from "viem/accounts";
import { z } from "zod";
import { TollgateError } from "../../protocol/errors.ts";

const HexText = z
  .string()
  .regex(/^(0x)?(?:[0-9a-fA-F]{2})+$/, { error: "expected hex" })
  .transform((text) => hexToBytes((text.startsWith("0x") ? text : `0x${text}`) as Hex));

/** scrypt cost bounds: geth's "standard" N is 2^18 (256 MiB at r = 8), foundry's 2^13. */
const ScryptParamsSchema = z
  .object({
    n: z
      .number()
      .int()
      .min(2)
      .max(2 ** 20)
      .refine((n) => (n & (n - 1)) === 0, { error: "n must be a power of two" }),
    r: z.number().int().min(1).max(32),
    p: z.number().int().min(1).max(16),
    dklen: z.literal(32),
    salt: HexText,
  })
  // RFC 7914 §2: N < 2^(128·r/8). OpenSSL (node:crypto) holds to it; keystores of geth and foundry use r = 8.
  .refine((k) => Math.log2(k.n) < 16 * k.r, { error: "scrypt's n must be below 2^(16·r) (RFC 7914)" });

const Pbkdf2ParamsSchema = z.object({
  c: z.number().int().min(1).max(10_000_000),
  dklen: z.literal(32),
  prf: z.literal("hmac-sha256"),
  salt: HexText,
});

const CryptoSchema = z.discriminatedUnion("kdf", [
  z.object({
    cipher: z.literal("aes-128-ctr"),
    cipherparams: z.object({
      iv: HexText.refine((iv) => iv.length === 16, { error: "iv must be 16 bytes" }),
    }),
    ciphertext: HexText,
    kdf: z.literal("scrypt"),
    kdfparams: ScryptParamsSchema,
    mac: HexText,
  }),
  z.object({
    cipher: z.literal("aes-128-ctr"),
    cipherparams: z.object({
      iv: HexText.refine((iv) => iv.length === 16, { error: "iv must be 16 bytes" }),
    }),
    ciphertext: HexText,
    kdf: z.literal("pbkdf2"),
    kdfparams: Pbkdf2ParamsSchema,
    mac: HexText,
  }),
]);

/** A v3 keystore; `Crypto` is the spelling of older geth versions. */
export const KeystoreSchema = z
  .object({
    version: z.literal(3),
    address: z
      .string()
      .regex(/^(0x)?[0-9a-fA-F]{40}$/)
      .optional(),
    crypto: CryptoSchema.optional(),
    Crypto: CryptoSchema.optional(),
  })
  .refine((k) => (k.crypto ?? k.Crypto) !== undefined, { error: "no crypto section" });
export type Keystore = z.infer<typeof KeystoreSchema>;

const scryptAsync = promisify(scrypt) as (
  password: Buffer,
  salt: Uint8Array,
  keylen: number,
  options: { N: number; r: number; p: number; maxmem: number },
) => Promise<Buffer>;
const pbkdf2Async = promisify(pbkdf2);

/**
 * Decrypts a v3 keystore (its JSON text or parsed value) with `password` and returns the private key.
 * Throws `InvalidRequest` for a wrong password (the MAC does not match), a keystore that is not v3 with
 * scrypt or PBKDF2 and AES-128-CTR, or one whose `address` is not its key's. Neither the key nor the
 * password appears in any error.
 *
 * @example
 * const key = await decryptKeystore(readFileSync("deployer.json", "utf8"), password);
 */
export async function decryptKeystore(keystore: string | unknown, password: string): Promise<Hex> {
  let json: unknown = keystore;
  if (typeof keystore === "string") {
    try {
      json = JSON.parse(keystore);
    } catch {
      throw new TollgateError("InvalidRequest", "the keystore is not JSON");
    }
  }
  const parsed = KeystoreSchema.safeParse(json);
  if (!parsed.success) {
    throw new TollgateError(
      "InvalidRequest",
      `not a supported keystore (Web3 Secret Storage v3 with scrypt or pbkdf2 and aes-128-ctr): ${parsed.error.issues
        .map((i) => `${i.path.join(".")}: ${i.message}`)
        .join("; ")}`,
    );
  }
  const crypto = (parsed.data.crypto ?? parsed.data.Crypto)!;
  const secret = Buffer.from(password.normalize("NFKC"), "utf8");
  const derived =
    crypto.kdf === "scrypt"
      ? await scryptAsync(secret, crypto.kdfparams.salt, crypto.kdfparams.dklen, {
          N: crypto.kdfparams.n,
          r: crypto.kdfparams.r,
          p: crypto.kdfparams.p,
          // scrypt needs 128·N·r bytes; node refuses more than 32 MiB unless told.
          maxmem: 128 * crypto.kdfparams.n * crypto.kdfparams.r + 16 * 1024 * 1024,
        })
      : await pbkdf2Async(
          secret,
          crypto.kdfparams.salt,
          crypto.kdfparams.c,
          crypto.kdfparams.dklen,
          "sha256",
        );
  const mac = hexToBytes(keccak256(concat([derived.subarray(16, 32), crypto.ciphertext])));
  if (mac.length !== crypto.mac.length || !timingSafeEqual(mac, crypto.mac)) {
    throw new TollgateError("InvalidRequest", "wrong keystore password (the keystore's MAC does not match)");
  }
  const decipher = createDecipheriv("aes-128-ctr", derived.subarray(0, 16), crypto.cipherparams.iv);
  const key = Buffer.concat([decipher.update(crypto.ciphertext), decipher.final()]);
  // Some older wallets stored keys with their leading zero bytes dropped; geth reads them left-padded.
  if (key.length === 0 || key.length > 32) {
    throw new TollgateError(
      "InvalidRequest",
      `the keystore holds ${key.length} bytes, not a 32-byte private key`,
    );
  }
  const privateKey = pad(bytesToHex(key), { size: 32 });
  if (parsed.data.address !== undefined) {
    const address = parsed.data.address.startsWith("0x") ? parsed.data.address : `0x${parsed.data.address}`;
    if (getAddress(address.toLowerCase()) !== privateKeyToAddress(privateKey)) {
      throw new TollgateError("InvalidRequest", "the keystore's key is not the key of its address field");
    }
  }
  return privateKey;
}
