/**
 * A prepaid channel's deposit as a budget commitment (docs/budgets.md "Channels"). An agent's channel
 * wallet asks the budget before any deposit leaves: the deposit is a standing hold under the ref
 * `channel:<channelId>`, checked against the per-provider, daily and total limits (and the approval
 * hook) like a subscription's. Each voucher signed is recorded as spend against that hold — the
 * channel's cumulative total, so recording is idempotent and a second process over the same wallet
 * store and ledger continues where the first stopped — and what the vouchers did not use returns to
 * the budget when the channel is closed.
 *
 * Invariants:
 * - Nothing is deposited that the budget did not hold first (`approveDeposit` throws `BudgetExceeded`
 *   or `ApprovalDenied` before the open is stored or sent).
 * - The ledger records exactly the vouchers' cumulative total per channel: what the seller can claim.
 * - A hold is released only once the wallet can no longer sign on its channel (a close was asked, or
 *   the open was refused), after its final total was recorded.
 * - A top-up grows the channel's hold before its authorization leaves (`approveTopUp`); a top-up the
 *   facilitator then refuses leaves the hold larger than the deposit until the close releases it (the
 *   budget errs on the side of holding, never of spending more than it held).
 * - Idle channels are closed (`closeIdle`): one unused for `idleSeconds` is asked to close unless the
 *   caller's `keep` says more calls are forecast soon; its hold is released at once and its deposit
 *   returns to the wallet by `withdrawDue` once the close delay is over (or by the seller's
 *   cooperative close before that).
 */
import type { Address, Hex } from "viem";
import type { BudgetLedger } from "../../../agent/budget/createBudgetLedger.ts";
import type { TypedDataSigner } from "../../../chain/signers/typedDataSigner.ts";
import type { FacilitatorClient, FetchFn } from "../../../http/facilitatorClient.ts";
import { type Clock, systemClock } from "../../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../../protocol/errors.ts";
import type { Network } from "../../../protocol/network.ts";
import {
  type ChannelTermsInput,
  type ChannelWallet,
  createChannelWallet,
  DEFAULT_MAX_CHANNEL_CLOSE_DELAY,
} from "../client/channelWallet.ts";
import type { ChannelRecord, ChannelWalletStore } from "../client/channelWalletStore.ts";

/** The ledger ref a channel's deposit is held under. */
export const channelRef = (channelId: string): string => `channel:${channelId.toLowerCase()}`;

/** What a closed channel spent and gave back. */
export type ChannelSettlement = {
  channelId: Hex;
  provider: Address;
  deposit: bigint;
  /** The vouchers' cumulative total: what the seller claims and the ledger records. */
  spent: bigint;
  /** Deposit not spent: released from the budget, back to the wallet after the close. */
  returned: bigint;
};

export type AgentChannels = {
  /** The agent's channel wallet (give it to a payer with `withChannelWallet`). */
  readonly wallet: ChannelWallet;
  /**
   * The longest close delay (seconds) the agent opens a channel with: a seller's 402 asking more is
   * refused by the offer check (`OfferMismatch`), as by the wallet.
   */
  readonly maxCloseDelay: number;
  /**
   * The policy's deposit for the next channel opened on `terms`, and the seller identity its hold is
   * keyed by (per-provider limits).
   */
  plan(
    terms: Pick<ChannelTermsInput, "contract" | "payee" | "token">,
    deposit: bigint,
    provider: Address,
  ): void;
  /** Records every channel's vouchers as spend against its hold; returns what was newly recorded. */
  record(): Promise<bigint>;
  /**
   * Closes every channel the agent holds (or those on `provider`): records the final totals, asks the
   * close (the facilitator claims the seller's vouchers at once; the rest is withdrawable after the
   * close delay) and releases the holds. Channels whose close was asked before are released too.
   */
  close(options?: {
    provider?: Address | undefined;
    /** Ask each seller's gate to close cooperatively (default true); false waits for the close delay. */
    cooperative?: boolean | undefined;
  }): Promise<ChannelSettlement[]>;
  /**
   * The idle rule: closes (as `close` does) every open channel that signed no voucher for `idleSeconds`
   * (default the option's, 600) and that `keep` does not keep (a forecast of more calls soon).
   */
  closeIdle(options?: {
    idleSeconds?: number | undefined;
    keep?: ((channel: ChannelRecord & { provider: Address }) => boolean) | undefined;
  }): Promise<ChannelSettlement[]>;
  /**
   * Withdraws the unclaimed deposit of every channel asked to close whose close delay is over (relayed,
   * gasless); channels still in their delay are left for a later call. Returns what came back.
   */
  withdrawDue(): Promise<ChannelWithdrawal[]>;
};

/** A channel's deposit back in the wallet after its close delay. */
export type ChannelWithdrawal = { channelId: Hex; claimed: bigint; refunded: bigint };

export type AgentChannelsOptions = {
  agent: string;
  budget: BudgetLedger;
  account: TypedDataSigner;
  network: Network;
  facilitator: FacilitatorClient;
  /** Where the channels' state and session keys live (a second process continues them); default memory. */
  store?: ChannelWalletStore | undefined;
  /** Close delay asked for, seconds (default the wallet's). */
  closeDelay?: number | undefined;
  /**
   * The longest close delay accepted, seconds (default `DEFAULT_MAX_CHANNEL_CLOSE_DELAY`, one day): how
   * long a vanished seller can keep a deposit locked after the agent asked to close.
   */
  maxCloseDelay?: number | undefined;
  /** Reaches sellers' gates for cooperative closes (the rest of a deposit back at once); see the wallet. */
  fetch?: FetchFn | undefined;
  /** `closeIdle`'s default: seconds without a voucher after which a channel is closed (default 600). */
  idleSeconds?: number | undefined;
  clock?: Clock | undefined;
};

const termsKey = (t: { contract: string; payee: string; token: string }) =>
  `${t.contract}|${t.payee}|${t.token}`.toLowerCase();

/** The budget's side of an agent's channels: what the wallet's hooks and the closes share. */
type ChannelHolds = {
  agent: string;
  budget: BudgetLedger;
  /** Channels a close was begun for in this process: no top-up grows their hold any more. */
  closingIds: Set<string>;
  /** Terms key → the policy's deposit for the next channel on them and the provider its hold is keyed by. */
  planned: Map<string, { deposit: bigint; provider: Address }>;
  /** Channel id → the provider its hold is keyed by (also learned from the ledger for stored channels). */
  providers: Map<string, Address>;
};

/** The holds with the wallet they commit for. */
type AgentChannelsContext = ChannelHolds & {
  wallet: ChannelWallet;
  clock: Clock;
  idleSeconds?: number | undefined;
};

/** The wallet's `calls`: the planned deposit for `terms` in requests at its price. */
function plannedCalls(h: ChannelHolds, terms: ChannelTermsInput): number | undefined {
  const plan = h.planned.get(termsKey(terms));
  if (plan === undefined) return undefined;
  return Number((plan.deposit + terms.price - 1n) / terms.price);
}

/** The wallet's `approveTopUp`: grows the channel's hold, unless a close began. */
async function approveTopUp(h: ChannelHolds, amount: bigint, terms: ChannelTermsInput, channelId: Hex) {
  const { agent, budget, closingIds } = h;
  const provider =
    h.providers.get(channelId) ??
    (await budget.getHold(agent, channelRef(channelId)))?.provider ??
    h.planned.get(termsKey(terms))?.provider ??
    terms.payee;
  const closing = () =>
    new TollgateError("ChannelClosing", "the channel is being closed: it takes no more deposit");
  if (closingIds.has(channelId)) throw closing();
  // Grows the channel's standing hold; throws BudgetExceeded / ApprovalDenied before anything is sent.
  await budget.hold(agent, { ref: channelRef(channelId), provider, amount });
  if (closingIds.has(channelId)) {
    // A close began meanwhile and may have released the hold already: release what was just added.
    await budget.releaseHold(agent, channelRef(channelId));
    throw closing();
  }
}

/** The wallet's `approveDeposit`: holds a new channel's deposit. */
async function approveDeposit(h: ChannelHolds, amount: bigint, terms: ChannelTermsInput, channelId: Hex) {
  const provider = h.planned.get(termsKey(terms))?.provider ?? terms.payee;
  // Throws BudgetExceeded / ApprovalDenied: the open is then neither stored nor sent.
  await h.budget.hold(h.agent, { ref: channelRef(channelId), provider, amount });
  h.providers.set(channelId, provider);
}

/** Records one channel's vouchers as spend against its hold (nothing when it holds none). */
async function recordOne(c: ChannelHolds, record: ChannelRecord): Promise<bigint> {
  if ((await c.budget.getHold(c.agent, channelRef(record.channelId))) === undefined) return 0n;
  const outcome = await c.budget.charge(c.agent, {
    ref: channelRef(record.channelId),
    kind: "one-time",
    total: record.signed,
  });
  return outcome.amount;
}

/** Records a closing channel's final total and releases its hold. */
async function settle(c: ChannelHolds, record: ChannelRecord): Promise<ChannelSettlement | undefined> {
  const hold = await c.budget.getHold(c.agent, channelRef(record.channelId));
  if (hold === undefined) return undefined;
  await recordOne(c, record);
  const returned = await c.budget.releaseHold(c.agent, channelRef(record.channelId));
  return {
    channelId: record.channelId,
    provider: hold.provider,
    deposit: record.deposit,
    spent: record.signed,
    returned,
  };
}

/** `AgentChannels.close`. */
async function closeChannels(
  c: AgentChannelsContext,
  closeOptions: Parameters<AgentChannels["close"]>[0] & {},
): Promise<ChannelSettlement[]> {
  const { wallet } = c;
  const out: ChannelSettlement[] = [];
  for (const record of wallet.channels()) {
    const hold = await c.budget.getHold(c.agent, channelRef(record.channelId));
    if (hold === undefined) continue;
    if (
      closeOptions.provider !== undefined &&
      hold.provider.toLowerCase() !== closeOptions.provider.toLowerCase()
    ) {
      continue;
    }
    if (record.status === "open" || record.status === "opening") {
      // What the facilitator says decides: the seller may have closed it cooperatively already, and
      // an open still unknown is left for later. Nothing more is signed once a close is asked.
      const now = await wallet.refresh(record.channelId).catch(() => record);
      if (now?.status === "opening") continue;
      c.closingIds.add(record.channelId);
      if (now?.status === "open") {
        await wallet.requestClose(record.channelId, { cooperative: closeOptions.cooperative ?? true });
      }
    }
    const settled = await settle(c, record);
    if (settled !== undefined && (hold.held > 0n || settled.spent > 0n)) out.push(settled);
  }
  return out;
}

/** `AgentChannels.closeIdle`. */
async function closeIdleChannels(
  c: AgentChannelsContext,
  idleOptions: Parameters<AgentChannels["closeIdle"]>[0] & {},
): Promise<ChannelSettlement[]> {
  const { wallet } = c;
  const idleMs = (idleOptions.idleSeconds ?? c.idleSeconds ?? 600) * 1000;
  const now = c.clock.now();
  const out: ChannelSettlement[] = [];
  for (const record of wallet.channels()) {
    if (record.status !== "open") continue;
    const used = wallet.lastUsed(record.channelId) ?? 0;
    if (now - used < idleMs) continue;
    const hold = await c.budget.getHold(c.agent, channelRef(record.channelId));
    if (hold === undefined) continue;
    if (idleOptions.keep?.({ ...record, provider: hold.provider }) === true) continue;
    c.closingIds.add(record.channelId);
    const now2 = await wallet.refresh(record.channelId).catch(() => record);
    if (now2?.status === "open") await wallet.requestClose(record.channelId);
    const settled = await settle(c, record);
    if (settled !== undefined) out.push(settled);
  }
  return out;
}

/** `AgentChannels.withdrawDue`. */
async function withdrawDue(wallet: ChannelWallet): Promise<ChannelWithdrawal[]> {
  const out: ChannelWithdrawal[] = [];
  for (const record of wallet.channels()) {
    if (record.status !== "closing") continue;
    try {
      const reply = await wallet.withdraw(record.channelId);
      out.push({
        channelId: record.channelId,
        claimed: BigInt(reply.claimed),
        refunded: BigInt(reply.refunded),
      });
    } catch (error) {
      // Still in its close delay, or the seller's vouchers are being claimed first: a later call.
      if (isTollgateError(error) && (error.code === "InvalidRequest" || error.code === "ChainUnavailable")) {
        continue;
      }
      throw error;
    }
  }
  return out;
}

/**
 * @example
 * const channels = createAgentChannels({ agent, budget, account, network, facilitator,
 *   store: await createFileChannelWalletStore({ path: ".tollgate/agent-channels.journal" }) });
 * const tool = paidTool(capability, { agent, payer, budget, channels });
 * // … calls …
 * await channels.close();
 */
export function createAgentChannels(options: AgentChannelsOptions): AgentChannels {
  const holds: ChannelHolds = {
    agent: options.agent,
    budget: options.budget,
    closingIds: new Set<string>(),
    planned: new Map(),
    providers: new Map(),
  };
  const maxCloseDelay = options.maxCloseDelay ?? DEFAULT_MAX_CHANNEL_CLOSE_DELAY;
  const wallet = createChannelWallet({
    account: options.account,
    network: options.network,
    facilitator: options.facilitator,
    store: options.store,
    closeDelay: options.closeDelay,
    maxCloseDelay,
    clock: options.clock,
    fetch: options.fetch,
    calls: (terms) => plannedCalls(holds, terms),
    approveTopUp: (amount, terms, channelId) => approveTopUp(holds, amount, terms, channelId),
    approveDeposit: (amount, terms, channelId) => approveDeposit(holds, amount, terms, channelId),
  });
  const c: AgentChannelsContext = {
    ...holds,
    wallet,
    clock: options.clock ?? systemClock,
    idleSeconds: options.idleSeconds,
  };
  return {
    wallet,
    maxCloseDelay,
    plan(terms, deposit, provider) {
      if (holds.planned.size >= 1_000) holds.planned.clear();
      holds.planned.set(termsKey(terms), { deposit, provider });
    },
    async record() {
      let recorded = 0n;
      for (const record of wallet.channels()) {
        if (record.status === "opening") continue;
        recorded += await recordOne(c, record);
      }
      return recorded;
    },
    close: (closeOptions = {}) => closeChannels(c, closeOptions),
    closeIdle: (idleOptions = {}) => closeIdleChannels(c, idleOptions),
    withdrawDue: () => withdrawDue(wallet),
  };
}
