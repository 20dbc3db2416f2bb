import { describe, expect, it } from "vitest";
import { memoNonce } from "../protocol/memo.ts";
import { paymentReplayKey, proofReplayKey } from "./paymentReplayKey.ts";

const TOKEN = "0x5FbDB2315678afecb367f032d93F642f64180aa3";
const PAYER = "0x3C44CdDdB6a900fa2b585dd299e03d12FA4293BC";
const MEMO = "eyJtIjoiR0VUIn0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

describe("paymentReplayKey", () => {
  it("gives a proof the key of the authorization its memo fixes, as an x402 payload of it gets", () => {
    const proofKey = proofReplayKey({ network: "eip155:31337", token: TOKEN, payer: PAYER, memo: MEMO });
    const payloadKey = paymentReplayKey({
      network: "eip155:31337",
      token: TOKEN.toLowerCase() as `0x${string}`,
      payer: PAYER.toLowerCase() as `0x${string}`,
      nonce: memoNonce(MEMO).toUpperCase().replace("0X", "0x") as `0x${string}`,
    });
    expect(proofKey).toBe(payloadKey);
    expect(proofKey).toBe(
      `eip3009:eip155:31337:${TOKEN.toLowerCase()}:${PAYER.toLowerCase()}:${memoNonce(MEMO)}`,
    );
  });

  it("keeps apart what the token keeps apart: another payer, token or network with the same nonce", () => {
    const base = { network: "eip155:31337", token: TOKEN, payer: PAYER, nonce: memoNonce(MEMO) } as const;
    const keys = new Set([
      paymentReplayKey(base),
      paymentReplayKey({ ...base, payer: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8" }),
      paymentReplayKey({ ...base, token: "0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512" }),
      paymentReplayKey({ ...base, network: "eip155:8453" }),
    ]);
    expect(keys.size).toBe(4);
  });
});
