import type { Address, Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { createFacilitatorClient } from "../../../http/facilitatorClient.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import { type ChannelTermsInput, createChannelWallet } from "./channelWallet.ts";
import { createMemoryChannelWalletStore } from "./channelWalletStore.ts";
import { createSessionKey, exportSessionKey } from "./sessionKey.ts";

const account = privateKeyToAccount(`0x${"11".repeat(32)}`);
const contract = `0x${"cc".repeat(20)}` as Address;
const payee = `0x${"ee".repeat(20)}` as Address;
const token = `0x${"dd".repeat(20)}` as Address;
const channelId = `0x${"ab".repeat(32)}` as Hex;

describe("channel wallet top-up", () => {
  it("refuses a top-up below the gate's minimum deposit before signing or asking the budget", async () => {
    const store = createMemoryChannelWalletStore();
    store.put({
      channelId,
      network: "eip155:31337",
      contract,
      facilitator: "http://127.0.0.1:1",
      payer: account.address,
      payee,
      token,
      deposit: 1_000_000n,
      signed: 0n,
      owed: 0n,
      closeDelay: 3_600,
      salt: `0x${"01".repeat(32)}`,
      sessionKey: exportSessionKey(createSessionKey()),
      status: "open",
      openValidBefore: 0,
    });
    const asked: bigint[] = [];
    const wallet = createChannelWallet({
      account,
      network: "eip155:31337",
      // Never reached: the refusal comes before any signature or request.
      facilitator: createFacilitatorClient({
        url: "http://127.0.0.1:1",
        fetch: () => Promise.reject(new Error("no network in this test")),
      }),
      store,
      approveTopUp: async (amount) => {
        asked.push(amount);
      },
    });
    const terms: ChannelTermsInput = {
      network: "eip155:31337",
      contract,
      facilitator: "http://127.0.0.1:1",
      payee,
      token,
      price: 1_000n,
      minDeposit: 50_000n,
      minCloseDelay: 0,
    };
    wallet.learnRoute("GET", "http://seller.test/api/item", terms);
    const refused = await wallet.topUp(channelId, 49_999n).catch((error: unknown) => error);
    expect(isTollgateError(refused, "AmountMismatch")).toBe(true);
    expect((refused as { details?: Record<string, unknown> }).details).toMatchObject({
      reason: "top_up_below_minimum",
      minimum: "50000",
    });
    expect(asked).toEqual([]);
    // The route is remembered on the channel: where its cooperative close is asked.
    expect(wallet.channels()[0]?.closeRoute).toEqual({ method: "GET", url: "http://seller.test/api/item" });
  });
});
