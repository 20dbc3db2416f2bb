/**
 * A fake token makes TollgateChannels open a channel — and emit `ChannelOpened` — naming a payer who
 * signed nothing and a payee who sold nothing (docs/security.md, "The second review"). The
 * facilitator serves its own tokens only: such a channel never becomes a row (no claims, no closes, no
 * relayed transactions on its behalf, no webhook events to its "payee").
 */
import { randomBytes } from "node:crypto";
import { type Address, getAddress, type Hex, parseEventLogs, toHex } from "viem";
import { deployContract, writeContract } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { computeChannelId } from "../../src/chain/actions/channels/channelHashes.ts";
import { requestChannelClose } from "../../src/chain/actions/channels/requestChannelClose.ts";
import { signChannelCloseRequest } from "../../src/chain/actions/channels/signChannelCloseRequest.ts";
import { tollgateChannelsAbi } from "../../src/chain/contracts/artifacts/TollgateChannels.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../../src/chain/startDevnet.ts";
import type { Facilitator, RunningServer } from "../../src/facilitator/createFacilitator.ts";
import { ChannelVouchersResponseSchema } from "../../src/protocol/channels.ts";
import { readChainChannel } from "../../src/schemes/channel/facilitator/channelChain.ts";
import {
  findChannel,
  markCloseWanted,
  storeVoucher,
  upsertChannel,
} from "../../src/schemes/channel/facilitator/channelRecords.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { compileFixtureContracts } from "../fixtures/compileFixtureContracts.ts";
import {
  nameChannelOperator,
  registerTestProvider,
  startChannelFacilitator,
  wireVoucher,
} from "../support/channelFixtures.ts";
import { createTestSessionKey, signTestVoucher } from "../support/channelSessionKey.ts";

describe("a channel in a token the facilitator does not serve", { timeout: 120_000 }, () => {
  let devnet: Devnet;
  let store: Store;
  let facilitator: Facilitator;
  let server: RunningServer;
  let gas: DevnetAccount;
  let attacker: DevnetAccount;
  let victim: DevnetAccount;
  let payee: DevnetAccount;
  let apiKey: string;
  let fake: Address;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 6 });
    [, attacker, victim, payee] = devnet.accounts as [
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
    ];
    gas = devnet.accounts[5]!;
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    ({ facilitator, server } = await startChannelFacilitator(devnet, {
      store,
      gas,
      channels: { claims: { thresholdValue: 1n, intervalMs: 100 } },
      outbox: { reconcileIntervalMs: 100 },
    }));
    apiKey = await registerTestProvider(server.url, payee);
    await nameChannelOperator(devnet, payee, gas.address);
    const { abi, bytecode } = compileFixtureContracts("FakeChannelToken.sol").FakeChannelToken!;
    const deployed = await devnet.publicClient.waitForTransactionReceipt({
      hash: await deployContract(devnet.walletClient(attacker), { abi, bytecode }),
    });
    fake = deployed.contractAddress!;
  }, 120_000);
  afterAll(async () => {
    await server?.close();
    await facilitator?.stop();
    await store?.close();
    await devnet?.stop();
  });

  const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
    fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", ...headers },
      body: JSON.stringify(body),
    });
  const bearer = () => ({ authorization: `Bearer ${apiKey}` });
  const errorCode = async (response: Response) =>
    ((await response.json()) as { error: { code: string } }).error.code;
  const rowsOf = async (channelId: Hex) =>
    (await store.query("SELECT channel_id FROM channels WHERE channel_id = $1", [channelId.toLowerCase()]))
      .length;
  const eventsOf = async (channelId: Hex) =>
    (await store.query<{ data: Record<string, unknown> }>("SELECT data FROM events")).filter(
      (e) => e.data.channelId === channelId.toLowerCase() || e.data.channelId === channelId,
    );

  /** The attacker opens, in its fake token, a channel naming `payer` (who signs nothing) and the payee. */
  async function openFake(payer: DevnetAccount) {
    const key = createTestSessionKey();
    const salt = toHex(randomBytes(32));
    const hash = await writeContract(devnet.walletClient(attacker), {
      address: devnet.contracts.channels,
      abi: tollgateChannelsAbi,
      functionName: "openWithAuthorization",
      args: [payer.address, payee.address, fake, 5_000_000n, key.x, key.y, 3_600n, salt, 0n, 2n ** 64n, "0x"],
    });
    const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
    const [opened] = parseEventLogs({
      abi: tollgateChannelsAbi,
      logs: receipt.logs,
      eventName: "ChannelOpened",
    });
    const channelId = computeChannelId({
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      payer: payer.address,
      payee: payee.address,
      token: fake,
      salt,
    });
    return { channelId, key, opened };
  }

  it("is opened on chain for a payer who signed nothing — and the facilitator stores, claims and closes nothing of it", async () => {
    const c = await openFake(victim);
    // The contract's event names the victim as payer: only its token tells it apart.
    expect(c.opened?.args).toMatchObject({
      channelId: c.channelId,
      payer: victim.address,
      token: getAddress(fake),
    });

    // The payee's gate hands over a voucher of it (validly signed by the attacker's session key).
    const handed = await post(
      "/channels/vouchers",
      { vouchers: [wireVoucher(devnet, c.key, c.channelId, 1_000_000n)] },
      bearer(),
    );
    expect(handed.status).toBe(200);
    const { results } = ChannelVouchersResponseSchema.parse(await handed.json());
    expect(results).toEqual([
      {
        channelId: c.channelId,
        status: "rejected",
        reason: "the channel's token is not one this facilitator serves",
      },
    ]);
    // The payee asks for a cooperative close of it.
    const closed = await post(`/channels/${c.channelId}/close`, {}, bearer());
    expect([closed.status, await errorCode(closed)]).toEqual([422, "UnsupportedToken"]);
    expect(await rowsOf(c.channelId)).toBe(0);
    expect(await eventsOf(c.channelId)).toEqual([]);
  });

  it("relays no close request or withdrawal of it and tells its payee nothing", async () => {
    // Here the attacker names itself payer, so it can sign the close request the facilitator would relay.
    const c = await openFake(attacker);
    const deadline = (await devnet.publicClient.getBlock()).timestamp + 600n;
    const signature = await signChannelCloseRequest(attacker.account, {
      chainId: devnet.chain.id,
      channels: devnet.contracts.channels,
      channelId: c.channelId,
      deadline,
    });
    const gasNonce = await devnet.publicClient.getTransactionCount({ address: gas.address });
    const relayed = await post(`/channels/${c.channelId}/close-request`, {
      deadline: deadline.toString(),
      signature,
    });
    expect([relayed.status, await errorCode(relayed)]).toEqual([422, "UnsupportedToken"]);
    // Asked on chain by the attacker itself, the withdrawal is not relayed either.
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await requestChannelClose(devnet.walletClient(attacker), {
        channels: devnet.contracts.channels,
        channelId: c.channelId,
      }),
    });
    await devnet.advanceTime(3_600);
    const withdrawn = await post(`/channels/${c.channelId}/withdraw`, {});
    expect([withdrawn.status, await errorCode(withdrawn)]).toEqual([422, "UnsupportedToken"]);
    expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(gasNonce);
    expect(await rowsOf(c.channelId)).toBe(0);
    expect(await eventsOf(c.channelId)).toEqual([]);
  });

  it("never claims or closes a row of one kept before rows were limited to served tokens", async () => {
    const claimedOne = await openFake(victim);
    const closedOne = await openFake(victim);
    const gasNonce = await devnet.publicClient.getTransactionCount({ address: gas.address });
    const where = { chainId: devnet.chain.id, contract: devnet.contracts.channels };
    for (const c of [claimedOne, closedOne]) {
      // What an older facilitator stored: the row and a verified voucher of the payee's gate.
      await upsertChannel(store, (await readChainChannel(devnet.publicClient, where, c.channelId))!);
      const signature = signTestVoucher(c.key, {
        ...where,
        channels: where.contract,
        channelId: c.channelId,
        cumulativeAmount: 1_000_000n,
      });
      expect(await storeVoucher(store, c.channelId, 1_000_000n, signature, new Date())).toBe(true);
    }
    await markCloseWanted(store, closedOne.channelId);
    const end = Date.now() + 30_000;
    const settled = async () => {
      const rows = await Promise.all([claimedOne, closedOne].map((c) => findChannel(store, c.channelId)));
      return rows.every((r) => r?.claim_error === "UnsupportedToken" && !r.close_wanted);
    };
    while (!(await settled()) && Date.now() < end) await new Promise((resolve) => setTimeout(resolve, 50));
    expect(await settled()).toBe(true);
    expect(await devnet.publicClient.getTransactionCount({ address: gas.address })).toBe(gasNonce);
  });
});
