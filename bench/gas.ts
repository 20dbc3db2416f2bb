/**
 * Gas of settling one-time payments: one EIP-3009 transferWithAuthorization in its own transaction versus
 * one item of a 100-item BatchSettler.settle. Every payer is a distinct account, so the batch gains
 * nothing from storage slots warmed by an earlier item; the payee already holds a balance in both cases.
 *
 * Then TollgateChannels (docs/channels.md): a relayed gasless open, one claim item in `claimMany` batches
 * of 1, 10 and 100 distinct channels (first claim of each channel, and a later claim of the same ones),
 * a cooperative close and a timeout withdrawal (request + withdraw).
 *
 * The token is the devnet's: Circle's FiatToken v2.2 (src/chain/contracts/circle-usdc) behind its proxy,
 * the code USDC runs on Base.
 *
 *   npx tsx bench/gas.ts
 */
import { generateKeyPairSync, sign } from "node:crypto";
import { bytesToHex, type Hex, hexToBytes, keccak256, stringToBytes, toHex } from "viem";
import { encodeChannelVoucherMessage } from "../src/chain/actions/channels/channelHashes.ts";
import { type ChannelClaim, claimChannels } from "../src/chain/actions/channels/claimChannels.ts";
import { closeChannelWithVoucher } from "../src/chain/actions/channels/closeChannelWithVoucher.ts";
import { decodeChannelClaims } from "../src/chain/actions/channels/decodeChannelEvents.ts";
import { openChannelWithAuthorization } from "../src/chain/actions/channels/openChannelWithAuthorization.ts";
import { requestChannelClose } from "../src/chain/actions/channels/requestChannelClose.ts";
import { signChannelOpen } from "../src/chain/actions/channels/signChannelOpen.ts";
import { withdrawChannel } from "../src/chain/actions/channels/withdrawChannel.ts";
import {
  decodeSettlerEvents,
  type SettlementItem,
  settle,
  signTransferAuthorization,
  startDevnet,
  type TransferAuthorization,
  transferWithAuthorization,
} from "../src/chain/index.ts";

const BATCH = 100;

const devnet = await startDevnet({ accounts: BATCH + 3 });
try {
  console.log(
    `token: Circle's FiatToken v2.2 (USDC), EIP-712 "${devnet.token.name}"/"${devnet.token.version}"`,
  );
  const relayer = devnet.walletClient(devnet.deployer);
  const payee = devnet.accounts[1]!.address;
  const domain = {
    name: devnet.token.name,
    version: devnet.token.version,
    chainId: devnet.chain.id,
    verifyingContract: devnet.contracts.usd,
  };
  const validBefore = (await devnet.publicClient.getBlock()).timestamp + 3600n;

  async function signed(payerIndex: number, memo: string): Promise<SettlementItem> {
    const payer = devnet.accounts[payerIndex]!;
    const authorization: TransferAuthorization = {
      from: payer.address,
      to: payee,
      value: 500_000n,
      validAfter: 0n,
      validBefore,
      nonce: keccak256(stringToBytes(memo)),
    };
    return {
      authorization,
      signature: await signTransferAuthorization(payer.account, { domain, authorization }),
    };
  }

  const single = await signed(2, "bench-single");
  const singleReceipt = await devnet.publicClient.waitForTransactionReceipt({
    hash: await transferWithAuthorization(relayer, { token: devnet.contracts.usd, ...single }),
  });

  const items: SettlementItem[] = [];
  for (let i = 0; i < BATCH; i++) items.push(await signed(3 + i, `bench-batch-${i}`));
  const batchReceipt = await devnet.publicClient.waitForTransactionReceipt({
    hash: await settle(relayer, {
      settler: devnet.contracts.batchSettler,
      token: devnet.contracts.usd,
      items,
    }),
  });
  if (singleReceipt.status !== "success" || batchReceipt.status !== "success")
    throw new Error("a settlement failed");
  // A failed item costs less than a settled one, so the per-item figure counts only if all settled.
  const outcomes = decodeSettlerEvents(batchReceipt.logs);
  const settled = outcomes.filter((o) => o.ok).length;
  if (outcomes.length !== BATCH || settled !== BATCH)
    throw new Error(`only ${settled} of ${BATCH} batch items settled`);

  const perItem = batchReceipt.gasUsed / BigInt(BATCH);
  console.log(`transferWithAuthorization, one per transaction: ${singleReceipt.gasUsed} gas`);
  console.log(`BatchSettler.settle of ${BATCH}: ${batchReceipt.gasUsed} gas, ${perItem} gas per item`);
  console.log(
    `ratio single / batched item: ${(Number(singleReceipt.gasUsed) / Number(perItem)).toFixed(2)}x`,
  );

  // ---------------------------------------------------------------- channels
  const channels = devnet.contracts.channels;
  const chainId = devnet.chain.id;
  const wait = async (hash: Hex) => {
    const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
    if (receipt.status !== "success") throw new Error(`transaction ${hash} reverted`);
    return receipt;
  };
  const payeeAccount = devnet.accounts[1]!;
  const payeeClient = devnet.walletClient(payeeAccount);
  const { privateKey: sessionKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" });
  const jwk = publicKey.export({ format: "jwk" });
  const keyX = bytesToHex(Buffer.from(jwk.x ?? "", "base64url"), { size: 32 });
  const keyY = bytesToHex(Buffer.from(jwk.y ?? "", "base64url"), { size: 32 });
  const voucher = (channelId: Hex, cumulativeAmount: bigint): ChannelClaim => ({
    channelId,
    cumulativeAmount,
    signature: bytesToHex(
      sign(
        "sha256",
        hexToBytes(encodeChannelVoucherMessage({ chainId, channels, channelId, cumulativeAmount })),
        {
          key: sessionKey,
          dsaEncoding: "ieee-p1363",
        },
      ),
    ),
  });
  const openGas: bigint[] = [];
  async function openOne(i: number): Promise<Hex> {
    const payer = devnet.accounts[2 + (i % BATCH)]!;
    const signedOpen = await signChannelOpen(payer.account, {
      chainId,
      channels,
      tokenDomain: domain,
      payee,
      amount: 1_000_000n,
      sessionKeyX: keyX,
      sessionKeyY: keyY,
      closeDelay: 3_600n,
      salt: toHex(i, { size: 32 }),
      validAfter: 0n,
      validBefore,
    });
    const receipt = await wait(
      await openChannelWithAuthorization(relayer, {
        channels,
        payer: payer.address,
        payee,
        token: devnet.contracts.usd,
        amount: 1_000_000n,
        sessionKeyX: keyX,
        sessionKeyY: keyY,
        closeDelay: 3_600n,
        salt: toHex(i, { size: 32 }),
        validAfter: 0n,
        validBefore,
        signature: signedOpen.signature,
      }),
    );
    openGas.push(receipt.gasUsed);
    return signedOpen.channelId;
  }
  const ids: Hex[] = [];
  for (let i = 0; i < 113; i++) ids.push(await openOne(i));
  const average = (values: bigint[]) => values.reduce((a, b) => a + b, 0n) / BigInt(values.length);
  console.log(
    `\nTollgateChannels.openWithAuthorization (relayed, gasless for the payer): ${average(openGas)} gas`,
  );

  async function claimBatch(slice: Hex[], amount: bigint): Promise<bigint> {
    const receipt = await wait(
      await claimChannels(payeeClient, { channels, claims: slice.map((id) => voucher(id, amount)) }),
    );
    const { outcomes } = decodeChannelClaims(receipt.logs);
    if (outcomes.length !== slice.length || !outcomes.every((o) => o.ok))
      throw new Error("a claim item failed");
    return receipt.gasUsed;
  }
  const groups = { 1: ids.slice(0, 1), 10: ids.slice(1, 11), 100: ids.slice(11, 111) };
  for (const [size, slice] of Object.entries(groups)) {
    const first = await claimBatch(slice, 10_000n);
    const later = await claimBatch(slice, 20_000n);
    console.log(
      `claimMany of ${size}: first claim ${first} gas (${first / BigInt(slice.length)} per item), later claim ${later} gas (${later / BigInt(slice.length)} per item)`,
    );
  }
  const close = await wait(
    await closeChannelWithVoucher(payeeClient, { channels, ...voucher(ids[0]!, 30_000n) }),
  );
  console.log(`closeWithVoucher (pays the payee, refunds the payer): ${close.gasUsed} gas`);
  const payerOf111 = devnet.walletClient(devnet.accounts[2 + (111 % BATCH)]!);
  const request = await wait(await requestChannelClose(payerOf111, { channels, channelId: ids[111]! }));
  await devnet.advanceTime(3_600);
  const withdrawal = await wait(await withdrawChannel(relayer, { channels, channelId: ids[111]! }));
  console.log(`requestClose: ${request.gasUsed} gas; withdraw after the delay: ${withdrawal.gasUsed} gas`);
} finally {
  await devnet.stop();
}
