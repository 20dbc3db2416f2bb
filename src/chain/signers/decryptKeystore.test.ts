import { createCipheriv, pbkdf2Sync, scryptSync } from "node:crypto";
import { bytesToHex, concat, type Hex, hexToBytes, keccak256 } from "viem";
import { privateKeyToAddress } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { isTollgateError } from "../../protocol/errors.ts";
import { decryptKeystore } from "./decryptKeystore.ts";

/**
 * The test vectors of the Web3 Secret Storage definition (ethereum.org), as go-ethereum keeps them in
 * accounts/keystore/testdata/v3_test_vector.json: password "testpassword", key 7a28b5ba….
 */
const specKey = "0x7a28b5ba57c53603b0b07b56bba752f7784bf506fa95edc395f5cf6c7514fe9d";
const specScrypt = {
  crypto: {
    cipher: "aes-128-ctr",
    cipherparams: { iv: "83dbcc02d8ccb40e466191a123791e0e" },
    ciphertext: "d172bf743a674da9cdad04534d56926ef8358534d458fffccd4e6ad2fbde479c",
    kdf: "scrypt",
    kdfparams: {
      dklen: 32,
      n: 262144,
      r: 1,
      p: 8,
      salt: "ab0c7876052600dd703518d6fc3fe8984592145b591fc8fb5c6d43190334ba19",
    },
    mac: "2103ac29920d71da29f15d75b4a16dbe95cfd7ff8faea1056c33131d846e3097",
  },
  id: "3198bc9c-6672-5ab3-d995-4942343ae5b6",
  version: 3,
};
const specPbkdf2 = {
  crypto: {
    cipher: "aes-128-ctr",
    cipherparams: { iv: "6087dab2f9fdbbfaddc31a909735c1e6" },
    ciphertext: "5318b4d5bcd28de64ee5559e671353e16f075ecae9f99c7a79a38af5f869aa46",
    kdf: "pbkdf2",
    kdfparams: {
      c: 262144,
      dklen: 32,
      prf: "hmac-sha256",
      salt: "ae3cd4e7013836a3df6bd7241b12db061dbe2c6785853cce422d148a624ce0bd",
    },
    mac: "517ead924a9d0dc3124507e3393d175ce3ff7c1e96529c6c555ce9e51205e9b2",
  },
  id: "3198bc9c-6672-5ab3-d995-4942343ae5b6",
  version: 3,
};
/** go-ethereum's accounts/keystore/testdata/very-light-scrypt.json: password "", r = 8 as geth writes. */
const gethVeryLightScrypt = {
  address: "45dea0fb0bba44f4fcf290bba71fd57d7117cbb8",
  crypto: {
    cipher: "aes-128-ctr",
    ciphertext: "b87781948a1befd247bff51ef4063f716cf6c2d3481163e9a8f42e1f9bb74145",
    cipherparams: { iv: "dc4926b48a105133d2f16b96833abf1e" },
    kdf: "scrypt",
    kdfparams: {
      dklen: 32,
      n: 2,
      p: 1,
      r: 8,
      salt: "004244bbdc51cadda545b1cfa43cff9ed2ae88e08c61f1479dbb45410722f8f0",
    },
    mac: "39990c1684557447940d4c69e06b1b82b2aceacb43f284df65c956daf3046b85",
  },
  id: "ce541d8d-c79b-40f8-9f8c-20f59616faba",
  version: 3,
};
/** go-ethereum's vector of a key stored without its leading zero byte (31 bytes). */
const short = {
  crypto: {
    cipher: "aes-128-ctr",
    cipherparams: { iv: "e0c41130a323adc1446fc82f724bca2f" },
    ciphertext: "9517cd5bdbe69076f9bf5057248c6c050141e970efa36ce53692d5d59a3984",
    kdf: "scrypt",
    kdfparams: {
      dklen: 32,
      n: 2,
      r: 8,
      p: 1,
      salt: "711f816911c92d649fb4c84b047915679933555030b3552c1212609b38208c63",
    },
    mac: "d5e116151c6aa71470e67a7d42c9620c75c4d23229847dcc127794f0732b0db5",
  },
  id: "fecfc4ce-e956-48fd-953b-30f8b52ed66c",
  version: 3,
};

/** Encrypts `key` as geth's keystore does, with the given KDF and fixed salt and iv. */
function encrypt(key: Hex, password: string, kdf: "scrypt" | "pbkdf2", address?: string) {
  const salt = Buffer.alloc(32, 7);
  const iv = Buffer.alloc(16, 9);
  const derived =
    kdf === "scrypt"
      ? scryptSync(password, salt, 32, { N: 1024, r: 8, p: 1 })
      : pbkdf2Sync(password, salt, 1000, 32, "sha256");
  const cipher = createCipheriv("aes-128-ctr", derived.subarray(0, 16), iv);
  const ciphertext = Buffer.concat([cipher.update(hexToBytes(key)), cipher.final()]);
  const mac = keccak256(concat([derived.subarray(16, 32), ciphertext]));
  return {
    version: 3,
    ...(address === undefined ? {} : { address }),
    crypto: {
      cipher: "aes-128-ctr",
      cipherparams: { iv: iv.toString("hex") },
      ciphertext: ciphertext.toString("hex"),
      kdf,
      kdfparams:
        kdf === "scrypt"
          ? { dklen: 32, n: 1024, r: 8, p: 1, salt: salt.toString("hex") }
          : { dklen: 32, c: 1000, prf: "hmac-sha256", salt: salt.toString("hex") },
      mac: mac.slice(2),
    },
  };
}

const key = bytesToHex(Buffer.alloc(32, 0x42));

async function codeOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  return isTollgateError(error) ? `${error.code}: ${error.message}` : `not a TollgateError: ${String(error)}`;
}

describe("decryptKeystore", () => {
  it("decrypts the specification's PBKDF2 test vector and go-ethereum's scrypt keystore", async () => {
    expect(await decryptKeystore(JSON.stringify(specPbkdf2), "testpassword")).toBe(specKey);
    // Its address field is checked against the key decrypted, so the right key is the only way through.
    const key = await decryptKeystore(gethVeryLightScrypt, "");
    expect(privateKeyToAddress(key).toLowerCase()).toBe("0x45dea0fb0bba44f4fcf290bba71fd57d7117cbb8");
  });

  it("refuses the specification's scrypt vector, whose r = 1 puts N beyond RFC 7914's bound, by saying so", async () => {
    expect(await codeOf(decryptKeystore(specScrypt, "testpassword"))).toMatch(/n must be below 2\^\(16·r\)/);
  });

  it("left-pads a key stored without its leading zero byte, as geth reads it", async () => {
    expect(await decryptKeystore(short, "foo")).toBe(
      "0x00fa7b3db73dc7dfdf8c5fbdb796d741e4488628c41fc4febd9160a866ba0f35",
    );
  });

  it("decrypts a keystore encrypted here, with either KDF, and checks its address field", async () => {
    const address = privateKeyToAddress(key);
    expect(
      await decryptKeystore(encrypt(key, "hunter2", "scrypt", address.slice(2).toLowerCase()), "hunter2"),
    ).toBe(key);
    expect(await decryptKeystore(encrypt(key, "hunter2", "pbkdf2"), "hunter2")).toBe(key);
    expect(
      await codeOf(
        decryptKeystore(
          encrypt(key, "hunter2", "scrypt", "0x1111111111111111111111111111111111111111"),
          "hunter2",
        ),
      ),
    ).toContain("not the key of its address");
  });

  it("refuses a wrong password by the MAC, and says nothing of the key or the password", async () => {
    const message = await codeOf(decryptKeystore(encrypt(key, "hunter2", "scrypt"), "hunter3"));
    expect(message).toMatch(/^InvalidRequest: wrong keystore password/);
    expect(message).not.toContain("hunter");
    expect(message).not.toContain(key.slice(2));
    expect(await codeOf(decryptKeystore(specPbkdf2, "wrong"))).toMatch(/wrong keystore password/);
  });

  it("refuses other ciphers, KDFs beyond its bounds and text that is not JSON", async () => {
    const cbc = encrypt(key, "p", "scrypt");
    expect(
      await codeOf(decryptKeystore({ ...cbc, crypto: { ...cbc.crypto, cipher: "aes-128-cbc" } }, "p")),
    ).toMatch(/^InvalidRequest: not a supported keystore/);
    const huge = { ...cbc, crypto: { ...cbc.crypto, kdfparams: { ...cbc.crypto.kdfparams, n: 2 ** 24 } } };
    expect(await codeOf(decryptKeystore(huge, "p"))).toMatch(/not a supported keystore/);
    expect(await codeOf(decryptKeystore("{", "p"))).toMatch(/not JSON/);
  });
});
