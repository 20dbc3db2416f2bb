/**
 * A channel the payer can empty before the seller claims (docs/security.md, "The second review").
 * A payer may open a channel on chain itself, past the facilitator's minimum: the contract refuses a
 * close delay under an hour, and the gate serves only channels on its offer's terms (close delay,
 * deposit). A close requested mid-stream — seen by the gate however stale its cache — stops service
 * with the claim margin still left, and the seller is paid for every voucher it served.
 */

import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { type Address, BaseError, ContractFunctionRevertedError, type Hex, hexToBytes, toHex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { computeChannelId } from "../../src/chain/actions/channels/channelHashes.ts";
import { openChannel } from "../../src/chain/actions/channels/openChannel.ts";
import { readChannel } from "../../src/chain/actions/channels/readChannel.ts";
import { requestChannelClose } from "../../src/chain/actions/channels/requestChannelClose.ts";
import { withdrawChannel } from "../../src/chain/actions/channels/withdrawChannel.ts";
import { approveToken } from "../../src/chain/actions/usd/approveToken.ts";
import { getTokenBalance } from "../../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { type Facilitator, type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { paymentGate } from "../../src/gate/paymentGate.ts";
import { CHANNEL_VOUCHER_HEADER, encodeChannelVoucher } from "../../src/protocol/channelVoucher.ts";
import type { Clock } from "../../src/protocol/clock.ts";
import { PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  startChannelFacilitator,
} from "../support/channelFixtures.ts";
import { createTestSessionKey, signTestVoucher, type TestSessionKey } from "../support/channelSessionKey.ts";

const PRICE = 10_000n;
const HOUR = 3_600n;

/** The custom error a rejected contract call reverted with. */
async function revertOf(call: Promise<unknown>): Promise<string | undefined> {
  try {
    await call;
  } catch (error) {
    if (error instanceof BaseError) {
      const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
      if (reverted instanceof ContractFunctionRevertedError) return reverted.data?.errorName;
    }
    throw error;
  }
  throw new Error("expected the call to revert");
}

describe("a channel whose payer could withdraw before the seller claims", { timeout: 120_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let gas: DevnetAccount;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;
  const dir = mkdtempSync(join(tmpdir(), "tollgate-channel-delay-"));
  const closers: (() => Promise<void>)[] = [];
  /** The gate's clock follows the chain's: evm_increaseTime moves both. */
  let offsetMs = 0;
  const clock: Clock = { now: () => Date.now() + offsetMs };
  const advance = async (seconds: number) => {
    offsetMs += seconds * 1000;
    await devnet.advanceTime(seconds);
  };

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, payer, payee] = devnet.accounts as [DevnetAccount, DevnetAccount, DevnetAccount];
    gas = devnet.accounts[5]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    // Default claim thresholds (1 USDC, 10 minutes): a claim here happens because a close was requested.
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: { claims: { intervalMs: 100 } },
      outbox: { reconcileIntervalMs: 100 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
  }, 120_000);
  afterAll(async () => {
    for (const close of closers.reverse()) await close();
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  const balance = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const chainChannel = (channelId: Hex) =>
    readChannel(devnet.publicClient, { channels: devnet.contracts.channels, channelId });
  const wait = async (hash: Hex) => {
    const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
    expect(receipt.status).toBe("success");
    return receipt;
  };

  async function startSeller(name: string, channel: { minCloseDelay?: number; minDeposit?: bigint } = {}) {
    const gate = paymentGate({
      payTo: payee.address,
      network: devnet.network,
      token: {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
      },
      facilitator: server.url,
      providerApiKey: apiKey,
      memoSecret: "a-close-delay-memo-secret-of-at-least-32-bytes",
      clock,
      routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          journal: join(dir, `${name}.journal`),
          forwardIntervalMs: 200,
          ...channel,
        },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ item: 1 }));
    const api = await serveApp(app);
    closers.push(
      () => api.close(),
      () => gate.close(),
    );
    const url = `${api.url}/api/item`;
    // The offer's terms, as a payer reads them from the 402.
    const offered = PaymentRequiredSchema.parse(await (await fetch(url)).json()).accepts.find(
      (o) => o.scheme === "channel",
    );
    const extra = (offered?.extra ?? {}) as { tag?: Hex; minCloseDelay?: number };
    return { url, extra };
  }

  /** The payer opens a channel itself, on chain (no facilitator), on whatever terms it likes. */
  async function openDirect(tag: Hex | undefined, closeDelay: bigint, amount = 100n * PRICE) {
    const key = createTestSessionKey();
    // A gate serves channels of its own voucher store only: the salt starts with the offered tag.
    const salt = toHex(
      Uint8Array.from([
        ...(tag === undefined ? [] : hexToBytes(tag)),
        ...randomBytes(32 - (tag === undefined ? 0 : hexToBytes(tag).length)),
      ]),
    );
    await wait(
      await approveToken(devnet.walletClient(payer), {
        token: devnet.contracts.usd,
        spender: devnet.contracts.channels,
        amount,
      }),
    );
    const open = openChannel(devnet.walletClient(payer), {
      channels: devnet.contracts.channels,
      payee: payee.address,
      token: devnet.contracts.usd,
      amount,
      sessionKeyX: key.x,
      sessionKeyY: key.y,
      closeDelay,
      salt,
    });
    const channelId = computeChannelId({
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      payer: payer.address,
      payee: payee.address,
      token: devnet.contracts.usd,
      salt,
    });
    return { open, channelId, key };
  }

  const pay = (url: string, c: { channelId: Hex; key: TestSessionKey }, cumulativeAmount: bigint) => {
    const signature = signTestVoucher(c.key, {
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      channelId: c.channelId,
      cumulativeAmount,
    });
    const header = encodeChannelVoucher({
      channelId: c.channelId,
      cumulativeAmount,
      signature: hexToBytes(signature),
    });
    return fetch(url, { headers: { [CHANNEL_VOUCHER_HEADER]: header } });
  };
  const errorOf = async (response: Response) => ((await response.json()) as { error?: string }).error;

  it("refuses a direct open with a close delay of 0 or 1 s on chain, and serves no channel under the offer's close delay or deposit", async () => {
    const seller = await startSeller("terms", { minCloseDelay: 7_200, minDeposit: 50n * PRICE });
    expect(seller.extra.minCloseDelay).toBe(7_200);
    for (const delay of [0n, 1n]) {
      const c = await openDirect(seller.extra.tag, delay);
      expect(await revertOf(c.open)).toBe("InvalidTerms");
    }
    // Opened past the facilitator (the contract's floor of an hour), but under this gate's two hours.
    const short = await openDirect(seller.extra.tag, HOUR);
    await wait(await short.open);
    const refused = await pay(seller.url, short, PRICE);
    expect(refused.status).toBe(402);
    expect(await errorOf(refused)).toBe("ChannelVoucherInvalid");
    // Two hours, but a deposit under the offer's minimum.
    const small = await openDirect(seller.extra.tag, 2n * HOUR, 10n * PRICE);
    await wait(await small.open);
    const alsoRefused = await pay(seller.url, small, PRICE);
    expect(alsoRefused.status).toBe(402);
    expect(await errorOf(alsoRefused)).toBe("ChannelVoucherInvalid");
    // On the offer's terms it is served.
    const fair = await openDirect(seller.extra.tag, 2n * HOUR);
    await wait(await fair.open);
    expect((await pay(seller.url, fair, PRICE)).status).toBe(200);
  });

  it("stops serving a channel closed mid-stream once inside the claim margin, however stale its cache, and the seller is paid every voucher it served", async () => {
    const seller = await startSeller("stream");
    const c = await openDirect(seller.extra.tag, HOUR);
    await wait(await c.open);
    const payerBefore = await balance(payer.address);
    for (let i = 1n; i <= 10n; i++) expect((await pay(seller.url, c, i * PRICE)).status).toBe(200);

    // The payer asks to close on chain (the gate is not told), then waits until the seller's claim
    // margin (600 s) has begun: 500 s are left before it may withdraw.
    await wait(
      await requestChannelClose(devnet.walletClient(payer), {
        channels: devnet.contracts.channels,
        channelId: c.channelId,
      }),
    );
    await advance(Number(HOUR) - 500);
    const late = await pay(seller.url, c, 11n * PRICE);
    expect(late.status).toBe(402);
    expect(await errorOf(late)).toBe("ChannelClosing");

    // Every voucher served is claimed before the payer may withdraw.
    const end = Date.now() + 30_000;
    while ((await chainChannel(c.channelId)).claimed < 10n * PRICE && Date.now() < end) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(await chainChannel(c.channelId)).toMatchObject({ claimed: 10n * PRICE, closed: false });
    await advance(500);
    await wait(
      await withdrawChannel(devnet.walletClient(payer), {
        channels: devnet.contracts.channels,
        channelId: c.channelId,
      }),
    );
    // The payee got what it served (claimed), the payer the rest.
    expect(await chainChannel(c.channelId)).toMatchObject({ claimed: 10n * PRICE, closed: true });
    expect(await balance(payer.address)).toBe(payerBefore + 90n * PRICE);
  });

  it("refuses a gate configured to miss a close request: a minimum close delay under the margin plus the staleness bound", () => {
    expect(() =>
      paymentGate({
        payTo: payee.address,
        network: devnet.network,
        token: {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
        },
        facilitator: server.url,
        memoSecret: "a-close-delay-memo-secret-of-at-least-32-bytes",
        routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
        schemeOptions: {
          channel: {
            contract: devnet.contracts.channels,
            journal: join(dir, "bad.journal"),
            closeMarginSeconds: 3_590,
          },
        },
      }),
    ).toThrow(/minCloseDelay/);
  });
});
