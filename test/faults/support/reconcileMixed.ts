/**
 * The reconciliation of the mixed load (mixedLoad.ts) against the chain, after the faults: metered
 * charges (AllowanceDeducted) against the calls served and the caps; channels (closed cooperatively
 * here first, then ChannelClaimed/ChannelClosed) against the vouchers signed and the calls served; and
 * every agent's budget ledger against its wallet.
 */
import { type Address, type Hex, parseAbiItem } from "viem";
import { getTokenBalance } from "../../../src/chain/actions/usd/getTokenBalance.ts";
import { ChannelCloseResponseSchema } from "../../../src/protocol/channels.ts";
import { UsageSummarySchema } from "../../../src/protocol/subscriptions.ts";
import { CHANNEL_PRICE, type FaultStack, METERED } from "./faultStack.ts";
import type { MixedLoad } from "./mixedLoad.ts";

const deducted = parseAbiItem(
  "event AllowanceDeducted(uint256 indexed subscriptionId, bytes32 indexed ref, uint256 amount, uint256 overageUsed, uint256 maxOverage)",
);
const opened = parseAbiItem(
  "event ChannelOpened(bytes32 indexed channelId, address indexed payer, address indexed payee, address token, uint256 deposit, bytes32 sessionKeyX, bytes32 sessionKeyY, uint64 closeDelay)",
);
const toppedUp = parseAbiItem(
  "event ChannelToppedUp(bytes32 indexed channelId, uint256 amount, uint256 deposit)",
);
const claimed = parseAbiItem(
  "event ChannelClaimed(bytes32 indexed channelId, address indexed payee, uint256 cumulativeAmount, uint256 amount)",
);
const closed = parseAbiItem(
  "event ChannelClosed(bytes32 indexed channelId, address indexed by, uint256 claimed, uint256 refunded)",
);
const authorizationUsed = parseAbiItem(
  "event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)",
);

export type MixedFigures = {
  meteredCalls: number;
  meteredServed: number;
  meteredRefusedAtCap: number;
  meteredDeducted: string;
  /** Units charged on chain beyond those answered 200 (persisted, then the gate or the answer was lost). */
  meteredChargedUnserved: number;
  channelsOpened: number;
  channelCalls: number;
  channelServed: number;
  channelClaimed: string;
  /** Requests charged by voucher and not answered 200 (the gate died or the answer was lost after). */
  channelChargedUnserved: number;
  agentToolCalls: number;
  agentCallsPaid: number;
  agentSpent: string;
  /** Bad figures: each must be 0. */
  capOverruns: number;
  lostMeteredCharges: number;
  lostVouchers: number;
  doubleClaims: number;
  doubleCharges: number;
  ledgerMismatches: number;
  details: string[];
};

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const sum = (values: readonly bigint[]) => values.reduce((a, b) => a + b, 0n);

async function facilitatorJson(
  stack: FaultStack,
  path: string,
  init?: RequestInit,
): Promise<[number, unknown]> {
  for (const url of stack.facilitatorUrls) {
    try {
      const response = await fetch(`${url}${path}`, {
        ...init,
        headers: { authorization: `Bearer ${stack.apiKey}`, ...init?.headers },
        signal: AbortSignal.timeout(30_000),
      });
      if (response.status >= 500) continue;
      return [response.status, await response.json()];
    } catch {
      // The next instance.
    }
  }
  return [0, undefined];
}

/** Waits until every metered subscription's usage is settled at least to what was served. */
export async function settleMetered(stack: FaultStack, load: MixedLoad, maxMs = 60_000): Promise<void> {
  const end = Date.now() + maxMs;
  for (const m of load.metered) {
    const served = m.calls.filter((c) => c.outcome === "served").length;
    const owed = BigInt(Math.max(0, served - METERED.includedUnits)) * METERED.unitPrice;
    while (Date.now() < end) {
      const [status, body] = await facilitatorJson(stack, `/usage?subscriptionId=${m.subscriptionId}`);
      const summary = status === 200 ? UsageSummarySchema.safeParse(body) : undefined;
      if (
        summary?.success &&
        summary.data.unsettled.count === 0 &&
        BigInt(summary.data.settled.amount) >= owed
      )
        break;
      await sleep(500);
    }
  }
}

/** Closes every channel the channel payers opened, cooperatively, through the facilitators. */
export async function closeChannels(stack: FaultStack, maxMs = 90_000): Promise<string[]> {
  const problems: string[] = [];
  const payers = new Set(stack.channelPayers.map((p) => p.address.toLowerCase()));
  const logs = await stack.devnet.publicClient.getLogs({
    address: stack.devnet.contracts.channels,
    event: opened,
    fromBlock: 0n,
    toBlock: "latest",
  });
  const end = Date.now() + maxMs;
  const usd = stack.devnet.contracts.usd.toLowerCase();
  for (const log of logs) {
    // Anyone can open a channel naming any payer in a token of its own: only the token tells ours.
    if (!payers.has(log.args.payer!.toLowerCase()) || log.args.token!.toLowerCase() !== usd) continue;
    let done = false;
    while (!done && Date.now() < end) {
      const [status, body] = await facilitatorJson(stack, `/channels/${log.args.channelId}/close`, {
        method: "POST",
      });
      const parsed = ChannelCloseResponseSchema.safeParse(body);
      if (status === 200 && parsed.success && parsed.data.status === "closed") done = true;
      else await sleep(1_000);
    }
    if (!done) problems.push(`channel ${log.args.channelId} could not be closed`);
  }
  return problems;
}

export async function reconcileMixed(
  stack: FaultStack,
  load: MixedLoad,
  balancesBefore: Map<string, bigint>,
): Promise<MixedFigures> {
  const client = stack.devnet.publicClient;
  const details: string[] = [];
  const balance = (owner: Address) => getTokenBalance(client, { token: stack.devnet.contracts.usd, owner });
  const moved = async (owner: Address) => balancesBefore.get(owner.toLowerCase())! - (await balance(owner));
  let capOverruns = 0;
  let lostMeteredCharges = 0;
  let lostVouchers = 0;
  let doubleClaims = 0;
  let doubleCharges = 0;
  let ledgerMismatches = 0;

  // Metered: the chain's deductions per subscription, against the cap and the calls served.
  const deductions = await client.getLogs({
    address: stack.devnet.contracts.subscriptionManager,
    event: deducted,
    fromBlock: 0n,
    toBlock: "latest",
  });
  let meteredDeducted = 0n;
  let meteredChargedUnserved = 0;
  for (const m of load.metered) {
    const mine = deductions.filter((d) => d.args.subscriptionId === m.subscriptionId);
    // The contract does not refuse a repeated ref: a usage record deducted twice shows as two logs.
    const refs = new Set(mine.map((d) => d.args.ref));
    if (refs.size !== mine.length) {
      doubleCharges += mine.length - refs.size;
      details.push(`metered ${m.subscriptionId}: ${mine.length} deductions, ${refs.size} distinct refs`);
    }
    const total = sum(mine.map((d) => d.args.amount!));
    meteredDeducted += total;
    const served = m.calls.filter((c) => c.outcome === "served").length;
    const capUnits = METERED.includedUnits + Number(m.maxOverage / METERED.unitPrice);
    if (total > m.maxOverage || served > capUnits) {
      capOverruns += 1;
      details.push(
        `metered ${m.subscriptionId}: ${served} served (cap ${capUnits} units), ${total} deducted (cap ${m.maxOverage})`,
      );
    }
    const owed = BigInt(Math.max(0, served - METERED.includedUnits)) * METERED.unitPrice;
    if (total < owed) {
      lostMeteredCharges += Number((owed - total) / METERED.unitPrice);
      details.push(`metered ${m.subscriptionId}: ${served} served owe ${owed}, ${total} deducted`);
    } else meteredChargedUnserved += Number((total - owed) / METERED.unitPrice);
    // The subscriber paid its first period and the deductions, nothing else.
    const walletMoved = await moved(m.account.address);
    if (walletMoved !== METERED.price + total) {
      ledgerMismatches += 1;
      details.push(
        `metered subscriber ${m.account.address}: wallet moved ${walletMoved}, period + deductions ${METERED.price + total}`,
      );
    }
    // The facilitators' usage records against the chain.
    const [status, body] = await facilitatorJson(stack, `/usage?subscriptionId=${m.subscriptionId}`);
    const summary = status === 200 ? UsageSummarySchema.safeParse(body) : undefined;
    if (
      !summary?.success ||
      BigInt(summary.data.settled.amount) !== total ||
      summary.data.unsettled.count !== 0
    ) {
      ledgerMismatches += 1;
      details.push(
        `metered ${m.subscriptionId}: usage records ${JSON.stringify(summary?.success ? summary.data : body)}, on chain ${total}`,
      );
    }
  }

  // Channels: each closed once; what was claimed is what the payer signed at most and what was served
  // at least; the payer's wallet moved by what was claimed.
  const channelPayers = new Set(stack.channelPayers.map((p) => p.address.toLowerCase()));
  const opens = (
    await client.getLogs({
      address: stack.devnet.contracts.channels,
      event: opened,
      fromBlock: 0n,
      toBlock: "latest",
    })
  ).filter(
    // A channel naming our payer in another token (anyone can open one) is not one of theirs.
    (l) =>
      channelPayers.has(l.args.payer!.toLowerCase()) &&
      l.args.token!.toLowerCase() === stack.devnet.contracts.usd.toLowerCase(),
  );
  const claims = await client.getLogs({
    address: stack.devnet.contracts.channels,
    event: claimed,
    fromBlock: 0n,
    toBlock: "latest",
  });
  // A wallet tops a channel up (relayed) before opening another: the deposit is the last one logged.
  const topUps = await client.getLogs({
    address: stack.devnet.contracts.channels,
    event: toppedUp,
    fromBlock: 0n,
    toBlock: "latest",
  });
  const closes = await client.getLogs({
    address: stack.devnet.contracts.channels,
    event: closed,
    fromBlock: 0n,
    toBlock: "latest",
  });
  let channelClaimed = 0n;
  let channelChargedUnserved = 0;
  for (const c of load.channels) {
    const ids = opens.filter((l) => l.args.payer!.toLowerCase() === c.account.address.toLowerCase());
    const signed = new Map<string, bigint>(
      c.wallet.channels().map((r) => [r.channelId.toLowerCase(), r.signed]),
    );
    let claimedByPayer = 0n;
    for (const open of ids) {
      const id = open.args.channelId!.toLowerCase() as Hex;
      const closings = closes.filter((l) => l.args.channelId!.toLowerCase() === id);
      if (closings.length !== 1) {
        doubleClaims += closings.length > 1 ? 1 : 0;
        details.push(`channel ${id}: closed ${closings.length} times`);
      }
      const total = closings[0]?.args.claimed ?? 0n;
      const claimedItems = sum(
        claims.filter((l) => l.args.channelId!.toLowerCase() === id).map((l) => l.args.amount!),
      );
      const mostSigned = signed.get(id) ?? 0n;
      const deposit = topUps
        .filter((l) => l.args.channelId!.toLowerCase() === id)
        // biome-ignore lint/complexity/useMathMinMax: bigints (Math.max takes numbers)
        .reduce((d, l) => (l.args.deposit! > d ? l.args.deposit! : d), open.args.deposit!);
      if (claimedItems > total || total > mostSigned || total > deposit) {
        doubleClaims += 1;
        details.push(
          `channel ${id}: claimed ${total} (claims ${claimedItems}), signed ${mostSigned}, deposit ${deposit}`,
        );
      }
      claimedByPayer += total;
    }
    channelClaimed += claimedByPayer;
    const servedValue = BigInt(c.calls.filter((x) => x.outcome === "served").length) * CHANNEL_PRICE;
    if (claimedByPayer < servedValue) {
      lostVouchers += Number((servedValue - claimedByPayer) / CHANNEL_PRICE);
      details.push(`channel payer ${c.account.address}: served ${servedValue}, claimed ${claimedByPayer}`);
    } else channelChargedUnserved += Number((claimedByPayer - servedValue) / CHANNEL_PRICE);
    const walletMoved = await moved(c.account.address);
    if (walletMoved !== claimedByPayer) {
      ledgerMismatches += 1;
      details.push(
        `channel payer ${c.account.address}: wallet moved ${walletMoved}, claimed ${claimedByPayer}`,
      );
    }
  }

  // Agents: every budget ledger equals its wallet's movements; no hold left; no authorization twice.
  const used = await client.getLogs({
    address: stack.devnet.contracts.usd,
    event: authorizationUsed,
    fromBlock: 0n,
    toBlock: "latest",
  });
  let agentSpent = 0n;
  for (const a of load.agents) {
    const nonces = used.filter((l) => l.args.authorizer!.toLowerCase() === a.account.address.toLowerCase());
    const distinct = new Set(nonces.map((l) => l.args.nonce));
    doubleCharges += nonces.length - distinct.size;
    const report = await load.budgetReport(a.name);
    agentSpent += report.spent;
    const walletMoved = await moved(a.account.address);
    if (walletMoved !== report.spent || report.reserved !== 0n) {
      ledgerMismatches += 1;
      details.push(
        `agent ${a.name}: wallet moved ${walletMoved}, ledger spent ${report.spent}, held ${report.reserved}`,
      );
    }
  }

  const meteredCalls = load.metered.flatMap((m) => m.calls);
  const channelCalls = load.channels.flatMap((c) => c.calls);
  const agentCalls = load.agents.flatMap((a) => a.calls);
  return {
    meteredCalls: meteredCalls.length,
    meteredServed: meteredCalls.filter((c) => c.outcome === "served").length,
    meteredRefusedAtCap: meteredCalls.filter((c) => c.outcome === "refused").length,
    meteredDeducted: meteredDeducted.toString(),
    meteredChargedUnserved,
    channelsOpened: opens.length,
    channelCalls: channelCalls.length,
    channelServed: channelCalls.filter((c) => c.outcome === "served").length,
    channelClaimed: channelClaimed.toString(),
    channelChargedUnserved,
    agentToolCalls: agentCalls.length,
    agentCallsPaid: load.agents.flatMap((a) => a.receipts).filter((r) => r.error === undefined).length,
    agentSpent: agentSpent.toString(),
    capOverruns,
    lostMeteredCharges,
    lostVouchers,
    doubleClaims,
    doubleCharges,
    ledgerMismatches,
    details,
  };
}
