/**
 * The `channel` scheme's part in a paid tool's purchase (src/agent/paidTool/purchasePart.ts): the
 * policy's channel choice, taken only by an agent with prepaid channels (`paidTool({ channels })`,
 * channelCommitments.ts) and never for a sale's purchase (its deposit would outlive the sale's
 * allowance). The deposit is held in the budget when the wallet opens the channel; later calls pay by
 * voucher up front, and each voucher the gate served is recorded against that hold once the call is
 * answered (a refused or failed one is credit for the next call).
 */
import type { PurchasePart } from "../../../agent/paidTool/purchasePart.ts";
import { CHANNEL_HORIZON_SECONDS } from "../../../agent/policy/decide.ts";
import type { FetchFn } from "../../../http/facilitatorClient.ts";
import { CHANNEL_VOUCHER_HEADER } from "../../../protocol/channelVoucher.ts";
import { channelTermsOf } from "../channelTerms.ts";
import { closeDelayRefusal } from "../client/channelWallet.ts";
import { withChannelWallet } from "../client.ts";
import type { AgentChannels } from "./channelCommitments.ts";

declare module "../../../agent/paidTool/purchasePart.ts" {
  interface PaidToolSchemeOptions {
    /**
     * The agent's prepaid channels (`createAgentChannels`, share one per agent): with them the policy
     * may open a channel when many calls will follow, its deposit held in the budget; later calls pay
     * by voucher up front (one HTTP exchange). Without them channel offers are not taken.
     */
    channels?: AgentChannels | undefined;
  }
}

export const channelPurchase: PurchasePart = {
  // A served voucher reports the call as paid by channel (`paidAside`); without one it paid once.
  servedMode: "one-time",
  callsKey: (offer) =>
    offer.channel === undefined ? undefined : { planId: "channel", seconds: CHANNEL_HORIZON_SECONDS },
  tool: (tool) => {
    const { channels } = tool.options;
    return (call) => {
      /** Vouchers this call sent and how each was answered (a channel pays up front, without a 402). */
      const vouchers: { status: number }[] = [];
      const observe =
        (fetch: FetchFn): FetchFn =>
        async (input, init) => {
          const headers = input instanceof Request ? input.headers : new Headers(init?.headers);
          const carried = headers.has(CHANNEL_VOUCHER_HEADER);
          const answer = await fetch(input, init);
          if (carried) vouchers.push({ status: answer.status });
          return answer;
        };
      return {
        admit(view, context) {
          if (channels === undefined || call.spend.allowance !== undefined) delete view.offer.channel;
          const terms = view.channelOption === undefined ? undefined : channelTermsOf(view.channelOption);
          const tooLong =
            view.offer.channel === undefined || terms === undefined || channels === undefined
              ? undefined
              : closeDelayRefusal(terms, channels.maxCloseDelay, tool.name);
          if (tooLong !== undefined) {
            // The seller's close delay is above the agent's bound: pay it another way, or not at all.
            if (view.offer.oneTime === undefined && view.offer.subscription === undefined) throw tooLong;
            delete view.offer.channel;
          }
          if (context.refusal !== undefined) delete view.offer.channel;
        },
        async hold({ option, decision, seller }) {
          call.spend.takeAllowance(BigInt(option.amount));
          // The deposit is held in the budget when the wallet opens the channel (channelCommitments.ts);
          // each voucher is recorded against that hold once the call is answered.
          const terms = channelTermsOf(option);
          if (terms !== undefined && decision.deposit !== undefined)
            channels?.plan(terms, decision.deposit, seller);
        },
        payer: (payer) => (channels === undefined ? payer : withChannelWallet(payer, channels.wallet)),
        fetch: (fetch) => (channels === undefined ? fetch : observe(fetch)),
        /**
         * What the vouchers of this call paid: the route's price for a voucher the gate served. The
         * ledger records the channels' totals from the hold.
         */
        async paidAside() {
          if (channels === undefined || vouchers.length === 0) return undefined;
          const served = vouchers.filter((v) => v.status < 500 && v.status !== 402).length;
          vouchers.length = 0;
          await channels.record();
          if (served === 0) return undefined;
          const terms = channels.wallet.routeTerms(call.request.method, call.request.url);
          return {
            amount: (terms?.price ?? BigInt(call.chosen?.amount ?? "0")) * BigInt(served),
            provider: tool.listing?.seller ?? terms?.payee,
          };
        },
        counted() {
          const { offer } = call;
          if (
            offer?.channel !== undefined &&
            offer.subscription === undefined &&
            call.decision?.mode !== "refuse"
          ) {
            tool.calls?.record(
              { agent: tool.agent, provider: offer.provider, planId: "channel" },
              CHANNEL_HORIZON_SECONDS,
            );
          }
        },
      };
    };
  },
};
