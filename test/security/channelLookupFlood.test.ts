/**
 * A stranger must not lock a payer out of a new channel. A gate reads every
 * channel id new to it from the facilitator, which limits requests per client address; made-up ids
 * (400 vouchers in 0.6 s) used to spend all of the gate's reads, and the payer's first voucher on its
 * new channel was answered 429. Now the gate limits and remembers ids it does not know before any
 * read (channelLookupGuard.ts), and its reads carry its provider key, which the facilitator counts
 * against that provider's own bucket (abuse/rateLimits.ts).
 *
 * Over a real devnet, facilitator and gates on loopback ports. The facilitator's per-address bucket
 * has its default size (120) but hardly refills during the test, so whether a lookup is refused does
 * not depend on how fast this machine runs the flood.
 */
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { request as httpRequest } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import type { Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import { readPaymentRequired } from "../../src/client/readPaymentRequired.ts";
import { type Facilitator, type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { type PaymentGate, type PaymentGateControls, paymentGate } from "../../src/gate/paymentGate.ts";
import { createFacilitatorClient } from "../../src/http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER, encodeChannelVoucher } from "../../src/protocol/channelVoucher.ts";
import { channelTermsOf } from "../../src/schemes/channel/channelTerms.ts";
import {
  type ChannelTermsInput,
  createChannelWallet,
} from "../../src/schemes/channel/client/channelWallet.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { registerTestProvider, startChannelFacilitator } from "../support/channelFixtures.ts";

const PRICE = 10_000n;

describe("a flood of made-up channel ids", () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  const gates: { gate: PaymentGate & PaymentGateControls; api: RunningServer }[] = [];
  const dir = mkdtempSync(join(tmpdir(), "tollgate-lookup-flood-"));
  let payee: DevnetAccount;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    payee = devnet.accounts[2]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas: devnet.accounts[5]!,
      channels: { claims: false, minDeposit: 100_000n },
      rateLimits: { perClient: { capacity: 120, refillPerSecond: 0.01 } },
    }));
  });
  afterAll(async () => {
    for (const { gate, api } of gates) {
      await gate.close();
      await api.close();
    }
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
    rmSync(dir, { recursive: true, force: true });
  });

  /** A gate selling one route by channel, served on a loopback port, and the terms its 402 offers. */
  async function startGate(name: string, providerApiKey: string | undefined) {
    const gate = paymentGate({
      payTo: payee.address,
      network: devnet.network,
      token: {
        address: devnet.contracts.usd,
        name: devnet.token.name,
        version: devnet.token.version,
      },
      facilitator: server.url,
      ...(providerApiKey === undefined ? {} : { providerApiKey }),
      memoSecret: "a-lookup-flood-memo-secret-at-least-32-bytes",
      routes: { "GET /api/item": { pricing: [{ type: "channel", amount: PRICE }] } },
      schemeOptions: {
        channel: {
          contract: devnet.contracts.channels,
          journal: join(dir, `${name}.journal`),
          forwardIntervalMs: 3_600_000,
          // The default burst and rate; a shorter queue than the default 50 only so that the flood's
          // waiting lookups drain in 1 s instead of 5.
          lookups: { queue: 10 },
        },
      },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/item", (c) => c.json({ item: 1 }));
    const api = await serveApp(app);
    gates.push({ gate, api });
    const offer = await readPaymentRequired(await fetch(`${api.url}/api/item`));
    if (offer?.kind !== "tollgate") throw new Error("the gate did not offer its terms");
    const terms = offer.body.accepts.map(channelTermsOf).find((t) => t !== undefined);
    if (terms === undefined) throw new Error("the gate offered no channel");
    const paid = (header: string) =>
      fetch(`${api.url}/api/item`, { headers: { [CHANNEL_VOUCHER_HEADER]: header } });
    return { terms, paid, url: api.url };
  }

  /** The status of a paid request sent from `localAddress` (loopback aliases all route locally on Linux). */
  const paidFrom = (url: string, localAddress: string, header: string) =>
    new Promise<number>((resolve, reject) => {
      const request = httpRequest(
        `${url}/api/item`,
        { localAddress, agent: false, headers: { [CHANNEL_VOUCHER_HEADER]: header } },
        (response) => {
          response.resume();
          response.on("end", () => resolve(response.statusCode ?? 0));
          response.on("error", reject);
        },
      );
      request.on("error", reject);
      request.end();
    });

  /** A payer opens a channel on `terms` through the facilitator; its first voucher is not sent yet. */
  async function openChannel(payer: DevnetAccount, terms: ChannelTermsInput) {
    const wallet = createChannelWallet({
      account: payer.account,
      network: devnet.network,
      facilitator: createFacilitatorClient({ url: server.url, fetch }),
      calls: 20,
    });
    return wallet.pay(terms, { calls: 20 });
  }

  /** A well-formed voucher for a channel that does not exist. */
  const madeUp = () =>
    encodeChannelVoucher({
      channelId: `0x${randomBytes(32).toString("hex")}` as Hex,
      cumulativeAmount: 10n * PRICE,
      signature: new Uint8Array(randomBytes(64)),
    });

  it("takes at most the gate's lookup share, and the payer's first voucher on its new channel is served", async () => {
    // No provider key: the gate's reads share its address's bucket at the facilitator.
    const { terms, paid, url } = await startGate("anonymous", undefined);
    const first = await openChannel(devnet.accounts[1]!, terms);
    const flood = await Promise.all(
      Array.from({ length: 400 }, async () => {
        const response = await paid(madeUp());
        await response.body?.cancel();
        return response.status;
      }),
    );
    // Refused as no such channel, or told to come back later: never served, never a fault.
    expect(flood.every((status) => status === 402 || status === 429)).toBe(true);
    expect(flood.filter((status) => status === 429).length).toBeGreaterThan(0);

    // From another address than the flood's (127.0.0.1): a payer sharing the flood's address shares its
    // spent share too, and is read once that refills (1 per second).
    expect(await paidFrom(url, "127.0.0.3", first.header)).toBe(200);
  });

  it("a flood still running from one address does not lock out a payer at another address", async () => {
    // Before the stranger at the gate's address below spends that address's facilitator bucket: this
    // gate has no provider key, so its few reads take that bucket too.
    const { terms, url } = await startGate("two-addresses", undefined);
    const first = await openChannel(devnet.accounts[4]!, terms);
    const statuses: number[] = [];
    let stop = false;
    let refused: () => void = () => undefined;
    const refusedOnce = new Promise<void>((resolve) => {
      refused = resolve;
    });
    // Forty senders at 127.0.0.2, each sending the next made-up voucher as soon as the last is answered:
    // the flood keeps the gate's lookup queue as full as it can until the payer has been answered.
    const flood = Array.from({ length: 40 }, async () => {
      while (!stop) {
        const status = await paidFrom(url, "127.0.0.2", madeUp());
        statuses.push(status);
        if (status === 429) refused();
      }
    });
    await refusedOnce;
    const payer = await paidFrom(url, "127.0.0.3", first.header);
    stop = true;
    await Promise.all(flood);
    expect(payer).toBe(200);
    expect(statuses.every((status) => status === 402 || status === 429)).toBe(true);
  });

  it("reads a payer's new channel with the gate's own allowance while strangers at its address spend theirs", async () => {
    const { terms, paid } = await startGate("keyed", await registerTestProvider(server.url, payee));
    const first = await openChannel(devnet.accounts[3]!, terms);
    // The stranger asks the facilitator itself, from the gate's address (loopback here), until refused.
    const statuses = await Promise.all(
      Array.from({ length: 150 }, async () => {
        const response = await fetch(`${server.url}/channels/0x${randomBytes(32).toString("hex")}`);
        await response.body?.cancel();
        return response.status;
      }),
    );
    expect(statuses.filter((status) => status === 429).length).toBeGreaterThan(0);

    const response = await paid(first.header);
    expect(response.status).toBe(200);
  });
});
