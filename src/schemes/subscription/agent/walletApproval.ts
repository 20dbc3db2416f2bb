/**
 * What the chain lets the manager take from the wallet, kept to what the budget holds: the token
 * approval the wallet's subscriptions share (relayed permits), and each subscription's spend limit
 * (relayed, subscriber-signed SetSpendLimit). Both only ever rise, and never above what is held.
 */
import type { Address } from "viem";
import {
  approveThroughFacilitator,
  getSubscriberInfo,
  getSubscriptionInfo,
} from "../client/facilitatorSubscriptions.ts";
import { type AgentSubscriptionRecord, holdRefOf, otherHoldsOfWallet } from "./agentSubscriptionRecords.ts";
import type { KeeperContext } from "./keeperContext.ts";

export type WalletApproval = {
  /** Relays a permit setting the manager's allowance over `token` to `value` (no-op without a signer). */
  approve(token: Address, value: bigint, why: string): Promise<boolean>;
  /**
   * Raises the subscription's spend limit on chain to what the budget has committed to it: the first
   * period, everything charged under its hold, and what the hold still holds. Never lowers it (a
   * limit below that only refuses pulls sooner), never sets it above it: the manager then refuses any
   * pull the budget did not hold, whatever the shared approval allows. `direct` when the caller holds
   * the wallet's turn already. Without a payer that can sign the limit, the approval alone bounds it.
   */
  boundOnChain(record: AgentSubscriptionRecord, direct?: boolean): Promise<void>;
  /**
   * Tops each token's approval up to what the budget holds for the wallet's subscriptions in that token
   * (the holds of every live subscription of the wallet on this manager in the token, of any agent
   * sharing it) plus what this agent's ledger recorded in it but the chain has not pulled yet (metered
   * use the gate deducts later: already spent in the ledger, still to come out of the allowance).
   * Never lowers an approval, never sets one above that: the allowance is per token, so are the sums.
   */
  topUpApproval(pendingByToken: Map<string, bigint>): Promise<void>;
};

export function createWalletApproval(ctx: KeeperContext): WalletApproval {
  const { agent, payer, budget, store } = ctx;

  const approve = async (token: Address, value: bigint, why: string) => {
    const signer = payer.account;
    if (signer === undefined) return false;
    try {
      await approveThroughFacilitator(payer.facilitator, signer, { token, value });
      ctx.logger?.info({ agent, token, approval: value.toString(), why }, "approval topped up");
      return true;
    } catch (error) {
      ctx.logger?.warn({ agent, err: error, why }, "could not top up the approval");
      return false;
    }
  };

  const boundOnChain = async (record: AgentSubscriptionRecord, direct = false) => {
    const id = record.subscriptionId;
    const setSpendLimit = payer.setSpendLimit;
    if (id === undefined || setSpendLimit === undefined) return;
    const hold = await budget.getHold(agent, holdRefOf(record.id));
    if (hold === undefined) return;
    const target = record.recordedFirst + hold.charged + hold.held;
    const info = await getSubscriptionInfo(payer.facilitator, id);
    if (info.status !== "Active" || info.spendLimit === undefined || BigInt(info.spendLimit) >= target)
      return;
    const raise = () => setSpendLimit.call(payer, id, target);
    try {
      await (direct ? raise() : ctx.inTurn(raise));
    } catch (error) {
      // The limit stays where it was: the next renewal fails rather than overspend; the next look retries.
      ctx.logger?.warn({ agent, err: error }, "could not raise the spend limit to the hold");
      return;
    }
    ctx.logger?.info(
      { agent, subscriptionId: id.toString(), spendLimit: target.toString() },
      "spend limit raised to what the budget holds",
    );
  };

  const topUpApproval = async (pendingByToken: Map<string, bigint>) => {
    if (payer.account === undefined) return;
    for (const [token, pending] of pendingByToken) {
      // Read and set in the wallet's turn: a subscribe between the two would be left unapproved.
      await ctx.inTurn(async () => {
        const target =
          (await otherHoldsOfWallet(store, {
            subscriber: payer.address,
            manager: await ctx.manager(),
            token,
            exceptId: "",
          })) + pending;
        const info = await getSubscriberInfo(payer.facilitator, payer.address, {
          token: token as Address,
        });
        const allowance = BigInt(info.token?.allowance ?? "0");
        if (allowance >= target) return;
        await approve(token as Address, target, "the budget holds the next renewal");
      });
    }
  };

  return { approve, boundOnChain, topUpApproval };
}
