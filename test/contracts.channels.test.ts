import {
  type Address,
  BaseError,
  ContractFunctionRevertedError,
  type Hex,
  keccak256,
  stringToBytes,
  toHex,
} from "viem";
import { deployContract, readContract, writeContract } from "viem/actions";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  computeChannelId,
  computeChannelOpenNonce,
  computeChannelTopUpNonce,
  computeChannelVoucherDigest,
} from "../src/chain/actions/channels/channelHashes.ts";
import {
  type ChannelClaim,
  claimChannels,
  claimChannelsGasLimit,
} from "../src/chain/actions/channels/claimChannels.ts";
import { closeChannelWithVoucher } from "../src/chain/actions/channels/closeChannelWithVoucher.ts";
import { decodeChannelClaims } from "../src/chain/actions/channels/decodeChannelEvents.ts";
import { getIsChannelOperator } from "../src/chain/actions/channels/getIsChannelOperator.ts";
import { openChannel } from "../src/chain/actions/channels/openChannel.ts";
import { openChannelWithAuthorization } from "../src/chain/actions/channels/openChannelWithAuthorization.ts";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { requestChannelClose } from "../src/chain/actions/channels/requestChannelClose.ts";
import { requestChannelCloseFor } from "../src/chain/actions/channels/requestChannelCloseFor.ts";
import { setChannelOperator } from "../src/chain/actions/channels/setChannelOperator.ts";
import { signChannelCloseRequest } from "../src/chain/actions/channels/signChannelCloseRequest.ts";
import { signChannelOpen } from "../src/chain/actions/channels/signChannelOpen.ts";
import { signChannelTopUp } from "../src/chain/actions/channels/signChannelTopUp.ts";
import { topUpChannel } from "../src/chain/actions/channels/topUpChannel.ts";
import { topUpChannelWithAuthorization } from "../src/chain/actions/channels/topUpChannelWithAuthorization.ts";
import { withdrawChannel } from "../src/chain/actions/channels/withdrawChannel.ts";
import { approveToken } from "../src/chain/actions/usd/approveToken.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { getTokenDomain } from "../src/chain/actions/usd/getTokenDomain.ts";
import { tollgateChannelsAbi } from "../src/chain/contracts/artifacts/TollgateChannels.ts";
import { fiatTokenRevertName } from "../src/chain/events/fiatTokenRevertNames.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { compileFixtureContracts } from "./fixtures/compileFixtureContracts.ts";
import { createTestSessionKey, signTestVoucher, type TestSessionKey } from "./support/channelSessionKey.ts";

const DEPOSIT = 5_000_000n;
const CLOSE_DELAY = 3_600n;
const P256_N = 0xffffffff00000000ffffffffffffffffbce6faada7179e84f3b9cac2fc632551n;

/**
 * The custom error a rejected contract call reverted with; for the token's `Error(string)` (USDC's
 * refusals), the name `fiatTokenRevertName` gives its message, or the message itself.
 */
async function revertOf(call: Promise<unknown>): Promise<string | undefined> {
  try {
    await call;
  } catch (error) {
    if (error instanceof BaseError) {
      const reverted = error.walk((e) => e instanceof ContractFunctionRevertedError);
      if (reverted instanceof ContractFunctionRevertedError) {
        const name = reverted.data?.errorName;
        if (name === "Error" && reverted.reason !== undefined) {
          return fiatTokenRevertName(reverted.reason) ?? reverted.reason;
        }
        return name;
      }
    }
    throw error;
  }
  throw new Error("expected the call to revert");
}

type OpenedChannel = { id: Hex; key: TestSessionKey; payer: DevnetAccount; payee: DevnetAccount };

describe("TollgateChannels", () => {
  let devnet: Devnet;
  let channels: Address;
  let usd: Address;
  let relayer: DevnetAccount;
  let payer: DevnetAccount;
  let payee: DevnetAccount;
  let otherPayee: DevnetAccount;
  let stranger: DevnetAccount;
  let saltCounter = 0;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 8 });
    channels = devnet.contracts.channels;
    usd = devnet.contracts.usd;
    [relayer, payer, payee, otherPayee, stranger] = devnet.accounts as [
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
      DevnetAccount,
    ];
  });
  afterAll(() => devnet.stop());

  const wait = async (hash: Hex) => {
    const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
    expect(receipt.status).toBe("success");
    return receipt;
  };
  const balance = (owner: Address) => getTokenBalance(devnet.publicClient, { token: usd, owner });
  const wallet = (account: DevnetAccount) => devnet.walletClient(account);
  const nextSalt = () => keccak256(stringToBytes(`channel-salt-${++saltCounter}`));
  const domain = () => ({ chainId: devnet.chain.id, channels });
  const voucher = (c: OpenedChannel, cumulativeAmount: bigint, key = c.key) =>
    signTestVoucher(key, { ...domain(), channelId: c.id, cumulativeAmount });
  const claim = (c: OpenedChannel, cumulativeAmount: bigint, key = c.key): ChannelClaim => ({
    channelId: c.id,
    cumulativeAmount,
    signature: voucher(c, cumulativeAmount, key),
  });
  const read = (id: Hex) => readChannel(devnet.publicClient, { channels, channelId: id });
  const now = async () => (await devnet.publicClient.getBlock()).timestamp;

  async function signOpen(from: DevnetAccount, to: DevnetAccount, amount = DEPOSIT, salt = nextSalt()) {
    const key = createTestSessionKey();
    const tokenDomain = {
      ...(await getTokenDomain(devnet.publicClient, { token: usd })),
      chainId: devnet.chain.id,
    };
    const signed = await signChannelOpen(from.account, {
      ...domain(),
      tokenDomain,
      payee: to.address,
      amount,
      sessionKeyX: key.x,
      sessionKeyY: key.y,
      closeDelay: CLOSE_DELAY,
      salt,
      validAfter: 0n,
      validBefore: (await now()) + 600n,
    });
    const args = {
      channels,
      payer: from.address,
      payee: to.address,
      token: usd,
      amount,
      sessionKeyX: key.x,
      sessionKeyY: key.y,
      closeDelay: CLOSE_DELAY,
      salt,
      validAfter: 0n,
      validBefore: signed.authorization.validBefore,
      signature: signed.signature,
    };
    return { key, args, channelId: signed.channelId, nonce: signed.authorization.nonce };
  }

  /** A gasless open relayed by the deployer. */
  async function openGasless(from = payer, to = payee, amount = DEPOSIT): Promise<OpenedChannel> {
    const { key, args, channelId } = await signOpen(from, to, amount);
    await wait(await openChannelWithAuthorization(wallet(relayer), args));
    return { id: channelId, key, payer: from, payee: to };
  }

  async function claimAll(by: DevnetAccount, claims: ChannelClaim[]) {
    const receipt = await wait(await claimChannels(wallet(by), { channels, claims }));
    return { receipt, ...decodeChannelClaims(receipt.logs) };
  }

  describe("opening", () => {
    it("opens gaslessly with the payer's one ReceiveWithAuthorization that binds deposit, payee, session key and terms", async () => {
      const payerBefore = await balance(payer.address);
      const relayerEth = await devnet.publicClient.getBalance({ address: payer.address });
      const opened = await signOpen(payer, payee);
      const receipt = await wait(await openChannelWithAuthorization(wallet(relayer), opened.args));
      const state = await read(opened.channelId);
      expect(state).toMatchObject({
        payer: payer.address,
        payee: payee.address,
        token: usd,
        deposit: DEPOSIT,
        claimed: 0n,
        sessionKeyX: opened.key.x,
        sessionKeyY: opened.key.y,
        closeDelay: CLOSE_DELAY,
        closeRequestedAt: 0n,
        closed: false,
        // The salt's first 8 bytes: which of the payee's gates the channel is for.
        tag: opened.args.salt.slice(0, 18),
      });
      expect(await balance(payer.address)).toBe(payerBefore - DEPOSIT);
      expect(await balance(channels)).toBeGreaterThanOrEqual(DEPOSIT);
      // The payer paid no gas: the relayer sent it.
      expect(await devnet.publicClient.getBalance({ address: payer.address })).toBe(relayerEth);
      expect(receipt.from.toLowerCase()).toBe(relayer.address.toLowerCase());
    });

    it("computes the channel id, open nonce, top-up nonce and voucher digest exactly as the contract does", async () => {
      const salt = nextSalt();
      const key = createTestSessionKey();
      const terms = {
        payee: payee.address,
        token: usd,
        sessionKeyX: key.x,
        sessionKeyY: key.y,
        closeDelay: 60n,
        salt,
      };
      const call = <F extends "channelIdOf" | "openNonce" | "topUpNonce" | "voucherDigest">(
        functionName: F,
        args: readonly unknown[],
      ) =>
        readContract(devnet.publicClient, {
          address: channels,
          abi: tollgateChannelsAbi,
          functionName,
          args,
        } as never) as Promise<Hex>;
      expect(await call("channelIdOf", [payer.address, payee.address, usd, salt])).toBe(
        computeChannelId({ ...domain(), payer: payer.address, payee: payee.address, token: usd, salt }),
      );
      expect(await call("openNonce", [terms.payee, usd, key.x, key.y, 60n, salt])).toBe(
        computeChannelOpenNonce({ ...domain(), ...terms }),
      );
      expect(await call("topUpNonce", [salt, salt])).toBe(
        computeChannelTopUpNonce({ ...domain(), channelId: salt, salt }),
      );
      expect(await call("voucherDigest", [salt, 123n])).toBe(
        computeChannelVoucherDigest({ ...domain(), channelId: salt, cumulativeAmount: 123n }),
      );
    });

    it("refuses a relayed open whose terms differ from what the payer signed (another payee or session key)", async () => {
      const opened = await signOpen(payer, payee);
      const other = createTestSessionKey();
      const stolenPayee = { ...opened.args, payee: stranger.address };
      const stolenKey = { ...opened.args, sessionKeyX: other.x, sessionKeyY: other.y };
      expect(await revertOf(openChannelWithAuthorization(wallet(relayer), stolenPayee))).toBe(
        "InvalidSignature",
      );
      expect(await revertOf(openChannelWithAuthorization(wallet(relayer), stolenKey))).toBe(
        "InvalidSignature",
      );
      expect((await read(opened.channelId)).payer).toBe("0x0000000000000000000000000000000000000000");
    });

    it("opens directly from the payer under its approval", async () => {
      const key = createTestSessionKey();
      const salt = nextSalt();
      await wait(await approveToken(wallet(payer), { token: usd, spender: channels, amount: DEPOSIT }));
      await wait(
        await openChannel(wallet(payer), {
          channels,
          payee: payee.address,
          token: usd,
          amount: DEPOSIT,
          sessionKeyX: key.x,
          sessionKeyY: key.y,
          closeDelay: CLOSE_DELAY,
          salt,
        }),
      );
      const id = computeChannelId({
        ...domain(),
        payer: payer.address,
        payee: payee.address,
        token: usd,
        salt,
      });
      expect(await read(id)).toMatchObject({
        payer: payer.address,
        deposit: DEPOSIT,
        claimed: 0n,
        tag: salt.slice(0, 18),
      });
    });

    it("refuses to open a channel id twice, gasless or direct", async () => {
      const opened = await signOpen(payer, payee);
      await wait(await openChannelWithAuthorization(wallet(relayer), opened.args));
      expect(await revertOf(openChannelWithAuthorization(wallet(relayer), opened.args))).toBe(
        "ChannelExists",
      );
      // The same (payer, payee, token, salt) from the payer directly.
      await wait(await approveToken(wallet(payer), { token: usd, spender: channels, amount: DEPOSIT }));
      const direct = openChannel(wallet(payer), {
        channels,
        payee: payee.address,
        token: usd,
        amount: DEPOSIT,
        sessionKeyX: opened.key.x,
        sessionKeyY: opened.key.y,
        closeDelay: CLOSE_DELAY,
        salt: opened.args.salt,
      });
      expect(await revertOf(direct)).toBe("ChannelExists");
    });

    it("refuses a close delay under an hour, gasless or direct, so a payer can never withdraw before the payee can claim; an hour opens", async () => {
      const key = createTestSessionKey();
      const direct = (closeDelay: bigint) =>
        openChannel(wallet(payer), {
          channels,
          payee: payee.address,
          token: usd,
          amount: DEPOSIT,
          sessionKeyX: key.x,
          sessionKeyY: key.y,
          closeDelay,
          salt: nextSalt(),
        });
      await wait(await approveToken(wallet(payer), { token: usd, spender: channels, amount: DEPOSIT }));
      for (const closeDelay of [0n, 1n, CLOSE_DELAY - 1n]) {
        expect(await revertOf(direct(closeDelay))).toBe("InvalidTerms");
      }
      const { args } = await signOpen(payer, payee);
      expect(await revertOf(openChannelWithAuthorization(wallet(relayer), { ...args, closeDelay: 0n }))).toBe(
        "InvalidTerms",
      );
      expect(
        await readContract(devnet.publicClient, {
          address: channels,
          abi: tollgateChannelsAbi,
          functionName: "MIN_CLOSE_DELAY",
        }),
      ).toBe(CLOSE_DELAY);
      await wait(await direct(CLOSE_DELAY));
    });

    it("refuses an empty deposit, a zero session key and a close delay above 30 days", async () => {
      const key = createTestSessionKey();
      const base = {
        channels,
        payee: payee.address,
        token: usd,
        amount: DEPOSIT,
        sessionKeyX: key.x,
        sessionKeyY: key.y,
        closeDelay: CLOSE_DELAY,
        salt: nextSalt(),
      };
      expect(await revertOf(openChannel(wallet(payer), { ...base, amount: 0n }))).toBe("InvalidTerms");
      expect(
        await revertOf(openChannel(wallet(payer), { ...base, sessionKeyX: toHex(0, { size: 32 }) })),
      ).toBe("InvalidTerms");
      expect(await revertOf(openChannel(wallet(payer), { ...base, closeDelay: 30n * 86_400n + 1n }))).toBe(
        "InvalidTerms",
      );
    });
  });

  describe("top-up", () => {
    it("adds to the deposit gaslessly and directly; a voucher up to the new deposit then pays", async () => {
      const c = await openGasless();
      const tokenDomain = {
        ...(await getTokenDomain(devnet.publicClient, { token: usd })),
        chainId: devnet.chain.id,
      };
      const salt = nextSalt();
      const signed = await signChannelTopUp(payer.account, {
        ...domain(),
        tokenDomain,
        channelId: c.id,
        amount: 1_000_000n,
        salt,
        validAfter: 0n,
        validBefore: (await now()) + 600n,
      });
      await wait(
        await topUpChannelWithAuthorization(wallet(relayer), {
          channels,
          channelId: c.id,
          amount: 1_000_000n,
          salt,
          validAfter: 0n,
          validBefore: signed.authorization.validBefore,
          signature: signed.signature,
        }),
      );
      await wait(await approveToken(wallet(payer), { token: usd, spender: channels, amount: 500_000n }));
      await wait(await topUpChannel(wallet(payer), { channels, channelId: c.id, amount: 500_000n }));
      expect((await read(c.id)).deposit).toBe(DEPOSIT + 1_500_000n);
      const { outcomes } = await claimAll(payee, [claim(c, DEPOSIT + 1_500_000n)]);
      expect(outcomes[0]).toMatchObject({ ok: true, amount: DEPOSIT + 1_500_000n });
    });

    it("refuses a top-up signed for another channel, by a non-payer, or after a close request", async () => {
      const c = await openGasless();
      const d = await openGasless();
      const tokenDomain = {
        ...(await getTokenDomain(devnet.publicClient, { token: usd })),
        chainId: devnet.chain.id,
      };
      const salt = nextSalt();
      const signed = await signChannelTopUp(payer.account, {
        ...domain(),
        tokenDomain,
        channelId: c.id,
        amount: 1_000n,
        salt,
        validAfter: 0n,
        validBefore: (await now()) + 600n,
      });
      const onD = topUpChannelWithAuthorization(wallet(relayer), {
        channels,
        channelId: d.id,
        amount: 1_000n,
        salt,
        validAfter: 0n,
        validBefore: signed.authorization.validBefore,
        signature: signed.signature,
      });
      expect(await revertOf(onD)).toBe("InvalidSignature");
      await wait(await approveToken(wallet(stranger), { token: usd, spender: channels, amount: 1_000n }));
      expect(
        await revertOf(topUpChannel(wallet(stranger), { channels, channelId: c.id, amount: 1_000n })),
      ).toBe("NotPayer");
      await wait(await requestChannelClose(wallet(payer), { channels, channelId: c.id }));
      expect(await revertOf(topUpChannel(wallet(payer), { channels, channelId: c.id, amount: 1_000n }))).toBe(
        "CloseAlreadyRequested",
      );
    });
    it("refuses a replayed top-up authorization and a top-up of a closed channel", async () => {
      const c = await openGasless();
      const tokenDomain = {
        ...(await getTokenDomain(devnet.publicClient, { token: usd })),
        chainId: devnet.chain.id,
      };
      const salt = nextSalt();
      const signed = await signChannelTopUp(payer.account, {
        ...domain(),
        tokenDomain,
        channelId: c.id,
        amount: 1_000n,
        salt,
        validAfter: 0n,
        validBefore: (await now()) + 600n,
      });
      const relay = (channelId: Hex) =>
        topUpChannelWithAuthorization(wallet(relayer), {
          channels,
          channelId,
          amount: 1_000n,
          salt,
          validAfter: 0n,
          validBefore: signed.authorization.validBefore,
          signature: signed.signature,
        });
      await wait(await relay(c.id));
      expect((await read(c.id)).deposit).toBe(DEPOSIT + 1_000n);
      // The token refuses the used nonce (its revert, not the channel contract's): nothing is added twice.
      expect(await revertOf(relay(c.id))).toBe("AuthorizationAlreadyUsed");
      expect((await read(c.id)).deposit).toBe(DEPOSIT + 1_000n);
      // A cooperative close ends the channel: a fresh, valid top-up authorization is refused.
      await wait(
        await closeChannelWithVoucher(wallet(payee), {
          channels,
          channelId: c.id,
          cumulativeAmount: 0n,
          signature: "0x",
        }),
      );
      const late = nextSalt();
      const lateSigned = await signChannelTopUp(payer.account, {
        ...domain(),
        tokenDomain,
        channelId: c.id,
        amount: 1_000n,
        salt: late,
        validAfter: 0n,
        validBefore: (await now()) + 600n,
      });
      const onClosed = topUpChannelWithAuthorization(wallet(relayer), {
        channels,
        channelId: c.id,
        amount: 1_000n,
        salt: late,
        validAfter: 0n,
        validBefore: lateSigned.authorization.validBefore,
        signature: lateSigned.signature,
      });
      expect(await revertOf(onClosed)).toBe("ChannelIsClosed");
      await wait(await approveToken(wallet(payer), { token: usd, spender: channels, amount: 1_000n }));
      expect(await revertOf(topUpChannel(wallet(payer), { channels, channelId: c.id, amount: 1_000n }))).toBe(
        "ChannelIsClosed",
      );
    });
  });

  describe("claims", () => {
    it("claims the latest vouchers of many channels in one transaction, paying each payee the difference", async () => {
      const opened: OpenedChannel[] = [];
      for (let i = 0; i < 6; i++) opened.push(await openGasless(devnet.accounts[5 + (i % 3)]!, payee));
      const before = await balance(payee.address);
      const first = await claimAll(
        payee,
        opened.map((c, i) => claim(c, 100_000n * BigInt(i + 1))),
      );
      expect(first.outcomes.every((o) => o.ok)).toBe(true);
      expect(await balance(payee.address)).toBe(before + 2_100_000n);
      // Later vouchers pay only what is new.
      const second = await claimAll(
        payee,
        opened.map((c, i) => claim(c, 100_000n * BigInt(i + 1) + 1_000n)),
      );
      expect(second.outcomes.map((o) => (o.ok ? o.amount : -1n))).toEqual(opened.map(() => 1_000n));
      expect(await balance(payee.address)).toBe(before + 2_106_000n);
      for (const [i, c] of opened.entries()) {
        expect((await read(c.id)).claimed).toBe(100_000n * BigInt(i + 1) + 1_000n);
      }
    });

    it("pays nothing for a replayed voucher or an older one", async () => {
      const c = await openGasless();
      const v = claim(c, 700_000n);
      expect((await claimAll(payee, [v])).outcomes[0]).toMatchObject({ ok: true, amount: 700_000n });
      const before = await balance(payee.address);
      const replay = await claimAll(payee, [v, claim(c, 500_000n)]);
      expect(replay.outcomes).toEqual([
        { channelId: c.id, cumulativeAmount: 700_000n, ok: false, reason: "NothingNew" },
        { channelId: c.id, cumulativeAmount: 500_000n, ok: false, reason: "NothingNew" },
      ]);
      expect(await balance(payee.address)).toBe(before);
      expect((await read(c.id)).claimed).toBe(700_000n);
    });

    it("fails a voucher of another channel, another chain id or another contract: the signature does not verify", async () => {
      const c = await openGasless();
      // Channel d shares c's session key, so only the channel id in the digest differs.
      const same = await signOpen(payer, payee);
      const sharedKey = { ...same.args, sessionKeyX: c.key.x, sessionKeyY: c.key.y };
      const tokenDomain = {
        ...(await getTokenDomain(devnet.publicClient, { token: usd })),
        chainId: devnet.chain.id,
      };
      const resigned = await signChannelOpen(payer.account, {
        ...domain(),
        tokenDomain,
        payee: payee.address,
        amount: DEPOSIT,
        sessionKeyX: c.key.x,
        sessionKeyY: c.key.y,
        closeDelay: CLOSE_DELAY,
        salt: sharedKey.salt,
        validAfter: 0n,
        validBefore: sharedKey.validBefore,
      });
      await wait(
        await openChannelWithAuthorization(wallet(relayer), { ...sharedKey, signature: resigned.signature }),
      );
      const dId = resigned.channelId;
      const forC = voucher(c, 100_000n);
      const otherChain = signTestVoucher(c.key, {
        chainId: devnet.chain.id + 1,
        channels,
        channelId: c.id,
        cumulativeAmount: 100_000n,
      });
      const otherContract = signTestVoucher(c.key, {
        chainId: devnet.chain.id,
        channels: devnet.contracts.batchSettler,
        channelId: c.id,
        cumulativeAmount: 100_000n,
      });
      const before = await balance(payee.address);
      const result = await claimAll(payee, [
        { channelId: dId, cumulativeAmount: 100_000n, signature: forC },
        { channelId: c.id, cumulativeAmount: 100_000n, signature: otherChain },
        { channelId: c.id, cumulativeAmount: 100_000n, signature: otherContract },
      ]);
      expect(result.outcomes.map((o) => (o.ok ? "ok" : o.reason))).toEqual([
        "BadSignature",
        "BadSignature",
        "BadSignature",
      ]);
      expect(await balance(payee.address)).toBe(before);
      // The genuine voucher of each still pays.
      const genuine = await claimAll(payee, [
        claim(c, 100_000n),
        {
          channelId: dId,
          cumulativeAmount: 100_000n,
          signature: signTestVoucher(c.key, { ...domain(), channelId: dId, cumulativeAmount: 100_000n }),
        },
      ]);
      expect(genuine.outcomes.every((o) => o.ok)).toBe(true);
    });

    it("fails a voucher above the deposit, one signed by another key, and malformed signatures, alone in the batch", async () => {
      const c = await openGasless();
      const good = claim(c, 10_000n);
      const stolen = createTestSessionKey();
      const rs = (r: bigint, s: bigint) =>
        `0x${r.toString(16).padStart(64, "0")}${s.toString(16).padStart(64, "0")}` as Hex;
      const real = voucher(c, 20_000n);
      const realR = BigInt(`0x${real.slice(2, 66)}`);
      const realS = BigInt(`0x${real.slice(66)}`);
      const items: ChannelClaim[] = [
        claim(c, DEPOSIT + 1n),
        claim(c, 20_000n, stolen),
        { channelId: c.id, cumulativeAmount: 20_000n, signature: real.slice(0, 128) as Hex },
        { channelId: c.id, cumulativeAmount: 20_000n, signature: `${real}00` as Hex },
        { channelId: c.id, cumulativeAmount: 20_000n, signature: rs(0n, realS) },
        { channelId: c.id, cumulativeAmount: 20_000n, signature: rs(realR, P256_N) },
        { channelId: c.id, cumulativeAmount: 20_000n, signature: rs(realR + P256_N, realS) },
        { channelId: c.id, cumulativeAmount: 20_000n, signature: rs(realR, realS ^ 1n) },
        good,
      ];
      const before = await balance(payee.address);
      const result = await claimAll(payee, items);
      expect(result.outcomes.map((o) => (o.ok ? "ok" : o.reason))).toEqual([
        "AboveDeposit",
        "BadSignature",
        "BadSignature",
        "BadSignature",
        "BadSignature",
        "BadSignature",
        "BadSignature",
        "BadSignature",
        "ok",
      ]);
      expect(await balance(payee.address)).toBe(before + 10_000n);
    });

    it("accepts the high-s twin of a voucher signature (cumulative amounts, not signatures, stop replays)", async () => {
      const c = await openGasless();
      const real = voucher(c, 30_000n);
      const s = BigInt(`0x${real.slice(66)}`);
      const twin = `${real.slice(0, 66)}${(P256_N - s).toString(16).padStart(64, "0")}` as Hex;
      const result = await claimAll(payee, [{ channelId: c.id, cumulativeAmount: 30_000n, signature: twin }]);
      expect(result.outcomes[0]).toMatchObject({ ok: true, amount: 30_000n });
      expect(
        (await claimAll(payee, [{ channelId: c.id, cumulativeAmount: 30_000n, signature: real }]))
          .outcomes[0],
      ).toMatchObject({
        ok: false,
        reason: "NothingNew",
      });
    });

    it("lets only the payee or its operator claim: a stranger and another payee get NotPayee and move nothing", async () => {
      const c = await openGasless();
      const before = await balance(payee.address);
      const byStranger = await claimAll(stranger, [claim(c, 50_000n)]);
      const byOtherPayee = await claimAll(otherPayee, [claim(c, 50_000n)]);
      expect(byStranger.outcomes[0]).toMatchObject({ ok: false, reason: "NotPayee" });
      expect(byOtherPayee.outcomes[0]).toMatchObject({ ok: false, reason: "NotPayee" });
      expect((await read(c.id)).claimed).toBe(0n);
      await wait(
        await setChannelOperator(wallet(payee), { channels, operator: stranger.address, allowed: true }),
      );
      expect(
        await getIsChannelOperator(devnet.publicClient, {
          channels,
          payee: payee.address,
          operator: stranger.address,
        }),
      ).toBe(true);
      const byOperator = await claimAll(stranger, [claim(c, 50_000n)]);
      // The operator claims, but the money goes to the payee.
      expect(byOperator.outcomes[0]).toMatchObject({ ok: true, amount: 50_000n, payee: payee.address });
      expect(await balance(payee.address)).toBe(before + 50_000n);
      await wait(
        await setChannelOperator(wallet(payee), { channels, operator: stranger.address, allowed: false }),
      );
      expect((await claimAll(stranger, [claim(c, 60_000n)])).outcomes[0]).toMatchObject({
        reason: "NotPayee",
      });
    });

    it("reports an unknown channel as a failed item without reverting the batch", async () => {
      const c = await openGasless();
      const ghost = keccak256(stringToBytes("no such channel"));
      const result = await claimAll(payee, [
        { channelId: ghost, cumulativeAmount: 1n, signature: voucher(c, 1n) },
        claim(c, 1n),
      ]);
      expect(result.outcomes.map((o) => (o.ok ? "ok" : o.reason))).toEqual(["NoChannel", "ok"]);
    });
  });

  describe("bounded items", () => {
    /** A channel in a token that burns every gas it is given once armed. */
    async function openHostile(): Promise<OpenedChannel> {
      const { abi, bytecode } = compileFixtureContracts("HostileChannelToken.sol").GasBurningChannelToken!;
      const deployed = await wait(await deployContract(wallet(relayer), { abi, bytecode }));
      const hostile = deployed.contractAddress!;
      const call = async (functionName: string, args: readonly unknown[], by = payer) =>
        wait(await writeContract(wallet(by), { address: hostile, abi, functionName, args } as never));
      await call("mint", [payer.address, DEPOSIT]);
      await call("approve", [channels, DEPOSIT]);
      const key = createTestSessionKey();
      const salt = nextSalt();
      await wait(
        await openChannel(wallet(payer), {
          channels,
          payee: payee.address,
          token: hostile,
          amount: DEPOSIT,
          sessionKeyX: key.x,
          sessionKeyY: key.y,
          closeDelay: CLOSE_DELAY,
          salt,
        }),
      );
      await call("arm", []);
      const id = computeChannelId({
        ...domain(),
        payer: payer.address,
        payee: payee.address,
        token: hostile,
        salt,
      });
      return { id, key, payer, payee };
    }

    it("fails the claim of a channel whose token burns gas alone, within a bounded gas", async () => {
      const { abi, bytecode } = compileFixtureContracts("HostileChannelToken.sol").GasBurningChannelToken!;
      const deployed = await wait(await deployContract(wallet(relayer), { abi, bytecode }));
      const hostile = deployed.contractAddress!;
      const call = async (functionName: string, args: readonly unknown[], by = payer) =>
        wait(await writeContract(wallet(by), { address: hostile, abi, functionName, args } as never));
      await call("mint", [payer.address, DEPOSIT]);
      await call("approve", [channels, DEPOSIT]);
      const key = createTestSessionKey();
      const salt = nextSalt();
      await wait(
        await openChannel(wallet(payer), {
          channels,
          payee: payee.address,
          token: hostile,
          amount: DEPOSIT,
          sessionKeyX: key.x,
          sessionKeyY: key.y,
          closeDelay: CLOSE_DELAY,
          salt,
        }),
      );
      const id = computeChannelId({
        ...domain(),
        payer: payer.address,
        payee: payee.address,
        token: hostile,
        salt,
      });
      const bad: OpenedChannel = { id, key, payer, payee };
      await call("arm", []);
      const b = await openGasless();
      const c = await openGasless();
      const before = await balance(payee.address);
      const result = await claimAll(payee, [claim(b, 10_000n), claim(bad, 10_000n), claim(c, 10_000n)]);
      expect(result.outcomes.map((o) => (o.ok ? "ok" : o.reason))).toEqual(["ok", "TransferFailed", "ok"]);
      expect(await balance(payee.address)).toBe(before + 20_000n);
      expect((await read(id)).claimed).toBe(0n);
      expect(result.receipt.gasUsed).toBeLessThan(claimChannelsGasLimit(3));
    });

    it("defers the items a gas-burning token left too little gas for instead of failing them; sent again, they pay", async () => {
      const bad = [await openHostile(), await openHostile(), await openHostile()];
      const opened = [await openGasless(), await openGasless(), await openGasless()];
      const claims = [...bad.map((c) => claim(c, 10_000n)), ...opened.map((c) => claim(c, 5_000n))];
      // The least gas the contract starts this batch with (what estimation finds): enough for six honest
      // items, not for three after three tokens that burn their whole TRANSFER_GAS.
      const gas = await devnet.publicClient.estimateContractGas({
        address: channels,
        abi: tollgateChannelsAbi,
        functionName: "claimMany",
        args: [claims],
        account: payee.account,
      });
      const receipt = await wait(await claimChannels(wallet(payee), { channels, claims, gas }));
      const { outcomes, deferred } = decodeChannelClaims(receipt.logs);
      expect(outcomes.slice(0, 3).map((o) => (o.ok ? "ok" : o.reason))).toEqual(
        Array(3).fill("TransferFailed"),
      );
      expect(deferred?.firstIndex).toBeGreaterThanOrEqual(3);
      const rest = await claimAll(payee, claims.slice(deferred!.firstIndex));
      expect(rest.outcomes.every((o) => o.ok)).toBe(true);
    });

    it("refuses a batch given less gas than its items need (never a mined no-op); the limit eth_estimateGas finds pays every item", async () => {
      const opened = [await openGasless(), await openGasless(), await openGasless()];
      const claims = opened.map((c) => claim(c, 5_000n));
      const call = {
        address: channels,
        abi: tollgateChannelsAbi,
        functionName: "claimMany",
        args: [claims],
        account: payee.account,
      } as const;
      // Before, the lowest gas at which the call succeeded deferred every item: estimating mined nothing.
      expect(await revertOf(devnet.publicClient.simulateContract({ ...call, gas: 150_000n } as never))).toBe(
        "ClaimGasTooLow",
      );
      const gas = await devnet.publicClient.estimateContractGas(call);
      const receipt = await wait(await claimChannels(wallet(payee), { channels, claims, gas }));
      const { outcomes, deferred } = decodeChannelClaims(receipt.logs);
      expect(outcomes.map((o) => o.ok)).toEqual([true, true, true]);
      expect(deferred).toBeUndefined();
      for (const c of opened) expect((await read(c.id)).claimed).toBe(5_000n);
    });
  });

  describe("closing", () => {
    it("closes cooperatively: the payee's last voucher pays it and the rest returns to the payer at once", async () => {
      const c = await openGasless();
      await claimAll(payee, [claim(c, 1_000_000n)]);
      const payerBefore = await balance(payer.address);
      const payeeBefore = await balance(payee.address);
      await wait(
        await closeChannelWithVoucher(wallet(payee), {
          channels,
          channelId: c.id,
          cumulativeAmount: 1_500_000n,
          signature: voucher(c, 1_500_000n),
        }),
      );
      expect(await balance(payee.address)).toBe(payeeBefore + 500_000n);
      expect(await balance(payer.address)).toBe(payerBefore + DEPOSIT - 1_500_000n);
      expect(await read(c.id)).toMatchObject({ closed: true, claimed: 1_500_000n });
      // Nothing more can be claimed, withdrawn or closed.
      expect((await claimAll(payee, [claim(c, 2_000_000n)])).outcomes[0]).toMatchObject({ reason: "Closed" });
      expect(await revertOf(withdrawChannel(wallet(payer), { channels, channelId: c.id }))).toBe(
        "ChannelIsClosed",
      );
    });

    it("closes cooperatively without a new voucher, and refuses a stranger or a bad voucher", async () => {
      const c = await openGasless();
      await claimAll(payee, [claim(c, 200_000n)]);
      const close = (by: DevnetAccount, cumulativeAmount: bigint, signature: Hex) =>
        closeChannelWithVoucher(wallet(by), { channels, channelId: c.id, cumulativeAmount, signature });
      expect(await revertOf(close(stranger, 200_000n, "0x"))).toBe("NotPayeeOrOperator");
      expect(await revertOf(close(payee, 300_000n, voucher(c, 299_999n)))).toBe("InvalidVoucher");
      const payerBefore = await balance(payer.address);
      await wait(await close(payee, 200_000n, "0x"));
      expect(await balance(payer.address)).toBe(payerBefore + DEPOSIT - 200_000n);
    });

    it("closes cooperatively after the payer asked to close, by the payee's operator, at once; a replay, a voucher above the deposit or an operator it revoked are refused", async () => {
      const c = await openGasless();
      await wait(await requestChannelClose(wallet(payer), { channels, channelId: c.id }));
      const close = (by: DevnetAccount, cumulativeAmount: bigint, signature: Hex) =>
        closeChannelWithVoucher(wallet(by), { channels, channelId: c.id, cumulativeAmount, signature });
      // The operator named by another payee may not close this payee's channel.
      await wait(
        await setChannelOperator(wallet(otherPayee), { channels, operator: stranger.address, allowed: true }),
      );
      expect(await revertOf(close(stranger, 700_000n, voucher(c, 700_000n)))).toBe("NotPayeeOrOperator");
      await wait(
        await setChannelOperator(wallet(otherPayee), {
          channels,
          operator: stranger.address,
          allowed: false,
        }),
      );
      await wait(
        await setChannelOperator(wallet(payee), { channels, operator: stranger.address, allowed: true }),
      );
      // Above the deposit: refused whole, nothing paid.
      expect(await revertOf(close(stranger, DEPOSIT + 1n, voucher(c, DEPOSIT + 1n)))).toBe("InvalidVoucher");
      const payerBefore = await balance(payer.address);
      const payeeBefore = await balance(payee.address);
      // Well inside the close delay: the final voucher pays the payee, the rest goes back to the payer now.
      await wait(await close(stranger, 700_000n, voucher(c, 700_000n)));
      expect(await balance(payee.address)).toBe(payeeBefore + 700_000n);
      expect(await balance(payer.address)).toBe(payerBefore + DEPOSIT - 700_000n);
      expect(await read(c.id)).toMatchObject({ closed: true, claimed: 700_000n });
      // A replay of the same close, or one with a later voucher, moves nothing.
      expect(await revertOf(close(stranger, 700_000n, voucher(c, 700_000n)))).toBe("ChannelIsClosed");
      expect(await revertOf(close(payee, 900_000n, voucher(c, 900_000n)))).toBe("ChannelIsClosed");
      await wait(
        await setChannelOperator(wallet(payee), { channels, operator: stranger.address, allowed: false }),
      );
      const d = await openGasless();
      expect(
        await revertOf(
          closeChannelWithVoucher(wallet(stranger), {
            channels,
            channelId: d.id,
            cumulativeAmount: 1n,
            signature: voucher(d, 1n),
          }),
        ),
      ).toBe("NotPayeeOrOperator");
    });

    it("returns the unclaimed deposit after the close delay; claims still work until the withdrawal", async () => {
      const c = await openGasless();
      await wait(await requestChannelClose(wallet(payer), { channels, channelId: c.id }));
      const requested = await read(c.id);
      expect(requested.closeRequestedAt).toBeGreaterThan(0n);
      expect(await revertOf(withdrawChannel(wallet(payer), { channels, channelId: c.id }))).toBe(
        "CloseDelayNotOver",
      );
      expect(await revertOf(requestChannelClose(wallet(payer), { channels, channelId: c.id }))).toBe(
        "CloseAlreadyRequested",
      );
      // The seller claims what it served during the delay.
      expect((await claimAll(payee, [claim(c, 400_000n)])).outcomes[0]).toMatchObject({
        ok: true,
        amount: 400_000n,
      });
      await devnet.advanceTime(CLOSE_DELAY - 10n);
      expect(await revertOf(withdrawChannel(wallet(stranger), { channels, channelId: c.id }))).toBe(
        "CloseDelayNotOver",
      );
      await devnet.advanceTime(10n);
      const payerBefore = await balance(payer.address);
      // Anyone may withdraw; the money goes to the payer.
      await wait(await withdrawChannel(wallet(stranger), { channels, channelId: c.id }));
      expect(await balance(payer.address)).toBe(payerBefore + DEPOSIT - 400_000n);
      expect(await revertOf(withdrawChannel(wallet(payer), { channels, channelId: c.id }))).toBe(
        "ChannelIsClosed",
      );
      expect((await claimAll(payee, [claim(c, 500_000n)])).outcomes[0]).toMatchObject({ reason: "Closed" });
    });

    it("refuses a withdrawal without a close request and a close request from anyone but the payer", async () => {
      const c = await openGasless();
      expect(await revertOf(withdrawChannel(wallet(payer), { channels, channelId: c.id }))).toBe(
        "CloseNotRequested",
      );
      expect(await revertOf(requestChannelClose(wallet(payee), { channels, channelId: c.id }))).toBe(
        "NotPayer",
      );
    });

    it("relays a payer-signed close request once, and refuses another signer, a replay and an expired one", async () => {
      const c = await openGasless();
      const deadline = (await now()) + 600n;
      const byStranger = await signChannelCloseRequest(stranger.account, {
        ...domain(),
        channelId: c.id,
        deadline,
      });
      expect(
        await revertOf(
          requestChannelCloseFor(wallet(relayer), {
            channels,
            channelId: c.id,
            deadline,
            signature: byStranger,
          }),
        ),
      ).toBe("InvalidSignature");
      const expired = (await now()) - 1n;
      const late = await signChannelCloseRequest(payer.account, {
        ...domain(),
        channelId: c.id,
        deadline: expired,
      });
      expect(
        await revertOf(
          requestChannelCloseFor(wallet(relayer), {
            channels,
            channelId: c.id,
            deadline: expired,
            signature: late,
          }),
        ),
      ).toBe("SignatureExpired");
      const signature = await signChannelCloseRequest(payer.account, {
        ...domain(),
        channelId: c.id,
        deadline,
      });
      await wait(
        await requestChannelCloseFor(wallet(relayer), { channels, channelId: c.id, deadline, signature }),
      );
      expect((await read(c.id)).closeRequestedAt).toBeGreaterThan(0n);
      expect(
        await revertOf(
          requestChannelCloseFor(wallet(relayer), { channels, channelId: c.id, deadline, signature }),
        ),
      ).toBe("CloseAlreadyRequested");
    });
  });
});
