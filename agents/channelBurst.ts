/**
 * The demo's burst over a prepaid channel: the research agent checks the language of many sentences
 * in a row. Its policy, told the burst is coming, opens one channel with the linguist (a deposit held
 * in its budget), pays every call by voucher up front, and once the burst is over the seller closes the
 * channel cooperatively: the facilitator claims the vouchers and refunds the rest, and the agent's
 * budget gets the unspent hold back.
 */
import type { Hex } from "viem";
import type { BudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createCallCounter } from "../src/agent/policy/createCallCounter.ts";
import type { SpendEvent } from "../src/agent/spendReport.ts";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import type { TypedDataSigner } from "../src/chain/signers/typedDataSigner.ts";
import type { Devnet } from "../src/chain/startDevnet.ts";
import type { Payer } from "../src/client/createPayer.ts";
import { createFacilitatorClient } from "../src/http/facilitatorClient.ts";
import { ChannelCloseResponseSchema } from "../src/protocol/channels.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { TollgateError } from "../src/protocol/errors.ts";
import { createAgentChannels } from "../src/schemes/channel/agent/channelCommitments.ts";

/** What the burst bought through its channel. */
export type ChannelBurstResult = {
  tool: string;
  calls: number;
  channels: number;
  channelId: Hex | undefined;
  deposit: bigint;
  /** The vouchers' total: what the ledger recorded. */
  spent: bigint;
  /** What the seller was paid on chain for the channel. */
  claimed: bigint;
  /** Deposit returned to the wallet by the close, and to the budget. */
  returned: bigint;
};

/** The gate hands its vouchers to the facilitator every 5 s (docs/channels.md, "The gate"). */
const FORWARD_WAIT_MS = 6_000;

export async function runChannelBurst(input: {
  devnet: Devnet;
  facilitatorUrl: string;
  marketUrl: string;
  seller: { apiKey: string };
  agent: string;
  account: TypedDataSigner;
  payer: Payer;
  budget: BudgetLedger;
  tool: string;
  texts: readonly string[];
  onSpend: (event: SpendEvent) => void;
}): Promise<ChannelBurstResult> {
  const { devnet } = input;
  const facilitator = createFacilitatorClient({ url: input.facilitatorUrl, fetch });
  const channels = createAgentChannels({
    agent: input.agent,
    budget: input.budget,
    account: input.account,
    network: devnet.network,
    facilitator,
  });
  const found = (
    await discoverTools({
      market: input.marketUrl,
      search: { q: input.tool },
      agent: input.agent,
      payer: input.payer,
      budget: input.budget,
      channels,
      calls: createCallCounter({ clock: systemClock }),
      // The burst: every text within the next hour.
      forecast: () => ({ calls: input.texts.length, horizonSeconds: 3_600 }),
      onSpend: input.onSpend,
    })
  ).find((d) => d.tool.name === input.tool);
  if (found === undefined) throw new TollgateError("NotFound", `no ${input.tool} in the market`);
  for (const text of input.texts) await found.tool.invoke({ text });

  const opened = channels.wallet.channels().filter((c) => c.status !== "closed");
  const channel = opened[0];
  let claimed = 0n;
  for (const c of opened) {
    // The seller closes once its gate has handed over the vouchers: claimed, the rest refunded.
    await new Promise((resolve) => setTimeout(resolve, FORWARD_WAIT_MS));
    const close = await fetch(`${input.facilitatorUrl}/channels/${c.channelId}/close`, {
      method: "POST",
      headers: { authorization: `Bearer ${input.seller.apiKey}` },
    });
    const body: unknown = await close.json();
    if (!close.ok) {
      throw new TollgateError("Internal", `the seller's close of channel ${c.channelId} failed`, {
        details: { status: close.status, body },
      });
    }
    ChannelCloseResponseSchema.parse(body);
    for (let i = 0; i < 200; i++) {
      const state = await readChannel(devnet.publicClient, {
        channels: devnet.contracts.channels,
        channelId: c.channelId,
      });
      if (state.closed) claimed += state.claimed;
      if (state.closed) break;
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  const settled = await channels.close();
  return {
    tool: input.tool,
    calls: input.texts.length,
    channels: opened.length,
    channelId: channel?.channelId,
    deposit: settled.reduce((s, c) => s + c.deposit, 0n),
    spent: settled.reduce((s, c) => s + c.spent, 0n),
    claimed,
    returned: settled.reduce((s, c) => s + c.returned, 0n),
  };
}
