import { createPublicClient, custom, type Hex, keccak256, stringToBytes } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { receiveWithAuthorizationTypes } from "../../../chain/signers/eip712Types.ts";
import type { FacilitatorToken } from "../../../facilitator/facilitatorToken.ts";
import { createFixedClock } from "../../../protocol/clock.ts";
import { TollgateError } from "../../../protocol/errors.ts";
import { checkAuthorizationWindow, checkReceiveAuthorization } from "./checkReceiveAuthorization.ts";

const payer = privateKeyToAccount(`0x${"11".repeat(32)}`);
const stranger = privateKeyToAccount(`0x${"22".repeat(32)}`);
const channels = "0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9" as const;
const token: FacilitatorToken = {
  address: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
  name: "USD Coin",
  version: "2",
  symbol: "USDC",
  decimals: 6,
};
const nonce = keccak256(stringToBytes("a channel deposit"));
const terms = { amount: "1000000", validAfter: "0", validBefore: "2000000000" };

/** A JSON-RPC node that answers `eth_getCode` with `code` for every address and counts the calls. */
function nodeWithCode(code: Hex) {
  const calls = { getCode: 0 };
  const client = createPublicClient({
    transport: custom({
      async request({ method }) {
        if (method !== "eth_getCode") throw new Error(`unexpected ${method}`);
        calls.getCode += 1;
        return code;
      },
    }),
  });
  return { client, calls };
}

function signBy(account: typeof payer) {
  return account.signTypedData({
    domain: { name: token.name, version: token.version, chainId: 31337, verifyingContract: token.address },
    types: receiveWithAuthorizationTypes,
    primaryType: "ReceiveWithAuthorization",
    message: {
      from: payer.address,
      to: channels,
      value: BigInt(terms.amount),
      validAfter: BigInt(terms.validAfter),
      validBefore: BigInt(terms.validBefore),
      nonce,
    },
  });
}

const check = (client: ReturnType<typeof nodeWithCode>["client"], signature: Hex) =>
  checkReceiveAuthorization(client, {
    chainId: 31337,
    token,
    payer: payer.address,
    to: channels,
    nonce,
    auth: { ...terms, signature },
    refusal: "not the payer's",
  });

async function codeOf(p: Promise<unknown>): Promise<string> {
  const e = await p.then(
    () => undefined,
    (error: unknown) => error,
  );
  return e instanceof TollgateError ? `${e.code}: ${e.message}` : "passed";
}

describe("checkReceiveAuthorization", () => {
  it("accepts the payer's own signature without asking the chain", async () => {
    const node = nodeWithCode("0x");
    await check(node.client, await signBy(payer));
    expect(node.calls.getCode).toBe(0);
  });

  it("refuses another key's signature or a malformed one for a payer without code, with the caller's words", async () => {
    const node = nodeWithCode("0x");
    expect(await codeOf(check(node.client, await signBy(stranger)))).toBe(
      "InvalidSignature: not the payer's",
    );
    expect(await codeOf(check(node.client, "0x1234"))).toBe("InvalidSignature: not the payer's");
  });

  it("leaves a payer with code (an ERC-1271 wallet) to the token's check in the simulation", async () => {
    const node = nodeWithCode("0x6080604052");
    expect(await codeOf(check(node.client, await signBy(stranger)))).toBe("passed");
    expect(node.calls.getCode).toBe(1);
  });
});

describe("checkAuthorizationWindow", () => {
  const clock = createFixedClock(1_000_000_000_000); // 1,000,000,000 s
  const at = (validAfter: number, validBefore: number) => {
    try {
      checkAuthorizationWindow(clock, 10, {
        validAfter: String(validAfter),
        validBefore: String(validBefore),
      });
      return "passed";
    } catch (e) {
      return e instanceof TollgateError ? `${e.code}: ${e.message}` : String(e);
    }
  };

  it("wants more than the minimum remaining seconds and a start in the past", () => {
    expect(at(999_999_999, 1_000_000_011)).toBe("passed");
    expect(at(999_999_999, 1_000_000_010)).toBe(
      "AuthorizationExpired: authorization has expired or expires too soon to relay",
    );
    expect(at(1_000_000_000, 1_000_000_100)).toBe("AuthorizationExpired: authorization is not valid yet");
  });
});
