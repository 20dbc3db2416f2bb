/**
 * The prepaid channels of one `tollgate run` (docs/channels.md, "Agents"): their journal, the idle rule
 * while the run lasts, and the close at its end.
 *
 * Invariants:
 * - The channels are closed at most once; with `keep` (`--keep-channels`) they are left open for the
 *   next run, unless the journal was in use and the channels lived in memory (then they are closed).
 * - Closing stops the idle sweep first, so no idle close races the final one.
 */
import type { Logger } from "pino";
import { formatUnitsExact } from "../../protocol/amount.ts";
import type { AgentChannels, ChannelSettlement } from "../../schemes/channel/agent/channelCommitments.ts";
import {
  type ChannelWalletStore,
  createFileChannelWalletStore,
  createMemoryChannelWalletStore,
} from "../../schemes/channel/client/channelWalletStore.ts";

const usdc = (amount: bigint) => `${formatUnitsExact(amount)} USDC`;

export type RunChannels = {
  /** Opens the agent's channel journal (in memory when another run holds it). */
  openStore(path: string): Promise<ChannelWalletStore>;
  /** Takes back the deposits of closed channels and starts the idle rule over `channels`. */
  start(channels: AgentChannels): Promise<void>;
  /** Closes the run's channels (once): their holds are released, their deposits withdrawable later. */
  close(): Promise<ChannelSettlement[]>;
  /** Closes the journal, if it was opened. */
  closeStore(): Promise<void>;
};

/** The run's channel state: what was opened, the idle sweep, and whether the close is done. */
type RunChannelsState = {
  store: ChannelWalletStore | undefined;
  channels: AgentChannels | undefined;
  idleSweep: ReturnType<typeof setInterval> | undefined;
  done: boolean;
};

export function createRunChannels(options: {
  keep: boolean;
  logger: Logger;
  print: (line: string) => void;
  /** How often idle channels are looked for. */
  idleEveryMs: number;
}): RunChannels {
  const { logger, print } = options;
  const state: RunChannelsState = {
    store: undefined,
    channels: undefined,
    idleSweep: undefined,
    done: options.keep,
  };
  return {
    async openStore(path) {
      state.store = await createFileChannelWalletStore({ path }).catch((error: unknown) => {
        // Another run of this agent holds the journal: this run's channels live in memory and are
        // closed at its end.
        logger.warn(
          { err: error },
          "the agent's channel journal is in use; this run keeps its channels in memory",
        );
        state.done = false;
        return createMemoryChannelWalletStore();
      });
      return state.store;
    },
    async start(channels) {
      state.channels = channels;
      for (const w of await channels.withdrawDue().catch((error: unknown) => {
        logger.warn({ err: error }, "could not withdraw the deposits of closed channels");
        return [];
      })) {
        print(`  channel ${w.channelId}: ${usdc(w.refunded)} of its deposit back in the wallet`);
      }
      // The idle rule while the run lasts: a channel unused for 10 minutes is closed.
      state.idleSweep = setInterval(() => {
        channels
          .closeIdle()
          .then((closed) => {
            for (const c of closed)
              print(`  channel ${c.channelId} idle: closed, ${usdc(c.returned)} back to the budget`);
          })
          .catch((error: unknown) => logger.warn({ err: error }, "could not close an idle channel"));
      }, options.idleEveryMs);
      state.idleSweep.unref?.();
    },
    async close() {
      if (state.idleSweep !== undefined) clearInterval(state.idleSweep);
      state.idleSweep = undefined;
      if (state.done || state.channels === undefined) return [];
      state.done = true;
      const settled = await state.channels.close();
      await state.channels.withdrawDue().catch((error: unknown) => {
        logger.warn({ err: error }, "could not withdraw a closed channel's deposit");
      });
      return settled;
    },
    async closeStore() {
      await state.store?.close();
    },
  };
}
