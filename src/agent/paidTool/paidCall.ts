/**
 * One call of a paid tool, from the first request to its receipt (the invariants are
 * src/agent/paidTool.ts's): it sends through `fetchWithPayment`, answers a 402 with `chooseOption`,
 * asks the schemes' parts at each step, settles its reservations and the sale's allowance once the
 * seller answered (or did not), and reports the spend. Its state is its own: one object per call.
 */
import type { ToolRunnableConfig } from "@langchain/core/tools";
import type { Payer } from "../../client/createPayer.ts";
import type { FetchWithPaymentOptions } from "../../client/fetchOptions.ts";
import { fetchWithPayment } from "../../client/fetchWithPayment.ts";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { HeaderName } from "../../protocol/header.ts";
import type { PaymentOption } from "../../protocol/paymentRequired.ts";
import type { Scheme } from "../../schemes/types.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { callAllowanceOf } from "../callAllowance.ts";
import type { PayeePins } from "../offerCheck.ts";
import type { PolicyDecision } from "../policy/decide.ts";
import type { PolicyOffer } from "../policy/policyOffer.ts";
import { recordDemand } from "../policy/recordDemandOf.ts";
import type { RedeemableProof } from "../redeemableProofs.ts";
import { reachSeller } from "../sellerUnreachable.ts";
import type { SpendMode } from "../spendReport.ts";
import { answeredReceipt, failedReceipt } from "./callReceipt.ts";
import { CallSpend } from "./callSpend.ts";
import { type CallPart, type ChoosingCall, chooseOption } from "./chooseOption.ts";
import type { PaidToolCoreOptions, PaidToolReceipt, RemoteCapability } from "./paidToolTypes.ts";
import type { CallPurchase, PurchaseTool, SchemePurchase } from "./purchasePart.ts";
import { recoveringPayer } from "./recoveringPayer.ts";
import { requestFor } from "./requestFor.ts";
import { type SellerError, sellerFailure } from "./sellerError.ts";
import type { ToolMemory } from "./toolMemory.ts";

const DEFAULT_MAX_PRICE = 1_000_000n;

/** What every call of one tool shares. */
export type PaidToolRuntime = {
  capability: RemoteCapability;
  options: PaidToolCoreOptions & { schemes?: readonly Scheme[] | undefined };
  /** The schemes the tool knows (built-in and extra), asked to check and weigh 402s. */
  schemes: AgentSchemes;
  payees: PayeePins;
  tool: PurchaseTool;
  memory: ToolMemory;
  fetch: FetchFn;
  /** The schemes' parts, each built for this tool. */
  parts: readonly { scheme: SchemePurchase; call: (call: PaidCall) => CallPurchase }[];
};

export class PaidCall implements ChoosingCall {
  offer: PolicyOffer | undefined;
  decision: PolicyDecision | undefined;
  chosen: PaymentOption | undefined;
  chosenScheme: SchemePurchase | undefined;
  provider: string | undefined;
  transaction: string | undefined;
  subscriptionId: string | undefined;
  /** Paid one time beside the chosen option (an x402 payment). */
  private paidOnceAside = false;
  failureMode: SpendMode | undefined;
  /** A kept proof this call presents instead of paying (see redeemableProofs.ts). */
  redeemed: RedeemableProof | undefined;
  /** How what a part paid aside was paid (a channel's vouchers), once it paid something. */
  asideMode: SpendMode | undefined;
  readonly target: string;
  readonly spend: CallSpend;
  readonly parts: readonly CallPart[];
  readonly tool: PurchaseTool;
  readonly options: PaidToolCoreOptions;
  readonly capability: RemoteCapability;
  readonly payees: PayeePins;
  readonly schemes: AgentSchemes;
  private readonly paidFetch: (request: Request) => Promise<Response>;

  /** Starts a call: reads back lost payments first, and the agent's per-call limit. */
  static async start(
    runtime: PaidToolRuntime,
    args: unknown,
    config?: ToolRunnableConfig,
  ): Promise<PaidCall> {
    await runtime.memory.readBack();
    // A reseller's purchase spends within what the sale it serves earned (src/agent/callAllowance.ts):
    // each payment is held against the allowance before the budget, and settled with what moved.
    const allowance = callAllowanceOf(config);
    const request = requestFor(runtime.capability, args);
    const limits = await runtime.tool.budget.getLimits(runtime.tool.agent);
    const maxPrice = runtime.options.maxPrice ?? limits?.perCall ?? DEFAULT_MAX_PRICE;
    return new PaidCall(
      runtime,
      args,
      request,
      new CallSpend(runtime.tool.budget, runtime.tool.agent, runtime.capability.name, allowance),
      maxPrice,
    );
  }

  private constructor(
    private readonly runtime: PaidToolRuntime,
    private readonly args: unknown,
    readonly request: Request,
    spend: CallSpend,
    maxPrice: bigint | string,
  ) {
    this.tool = runtime.tool;
    this.options = runtime.options;
    this.capability = runtime.capability;
    this.payees = runtime.payees;
    this.schemes = runtime.schemes;
    this.spend = spend;
    this.target = `${request.method} ${request.url}`;
    this.parts = runtime.parts.map(({ scheme, call }) => ({ scheme, hooks: call(this) }));
    let payer: Payer = recoveringPayer(this.tool.payer, this.tool, runtime.memory, this);
    let fetch: FetchFn = reachSeller(runtime.fetch);
    const fetchOptions: FetchWithPaymentOptions = {
      maxPrice,
      choose: (_options, context) => chooseOption(this, context),
      sleep: (ms) => this.tool.wait(ms),
      // An extra scheme's client part pays its options (its agent part is among `parts`).
      ...(runtime.options.schemes === undefined ? {} : { schemes: runtime.options.schemes }),
      onPayment: (receipt) => {
        this.spend.paid += BigInt(receipt.option.amount);
        this.transaction = receipt.settled?.transaction ?? receipt.proof.tx;
      },
      onSchemePayment: (payment) => {
        this.parts.find((p) => p.scheme.id === payment.scheme)?.hooks.schemePaid?.(payment);
      },
    };
    for (const { hooks } of this.parts) {
      payer = hooks.payer?.(payer) ?? payer;
      fetch = hooks.fetch?.(fetch) ?? fetch;
      Object.assign(fetchOptions, hooks.fetchOptions?.());
    }
    this.paidFetch = fetchWithPayment(fetch, payer, fetchOptions);
  }

  get paidOnce(): boolean {
    return this.paidOnceAside || this.chosenScheme?.purchase.paysOnce === true;
  }

  set paidOnce(paid: boolean) {
    this.paidOnceAside = paid;
  }

  /** Proofs given back by failing sellers, for the tool's next calls. */
  get redeemable() {
    return this.runtime.memory.redeemable;
  }

  /** Buys the call: its result and receipt, or an error text and receipt (never a throw for a refusal). */
  async run(): Promise<[string, PaidToolReceipt]> {
    try {
      for (const { hooks } of this.parts) hooks.beforeSend?.();
      const response = await this.send();
      return await this.answered(response);
    } catch (thrown) {
      return await this.failed(thrown);
    }
  }

  /** Sends until an answer, presenting a given-back proof first and retrying where a part can make it pass. */
  private async send(): Promise<Response> {
    const { memory } = this.runtime;
    for (let attempt = 0; ; attempt++) {
      try {
        const request = attempt === 0 ? this.request : requestFor(this.capability, this.args);
        // A proof paid for earlier and given back by this seller goes first: no new payment if it serves.
        this.redeemed =
          attempt === 0 && !this.parts.some(({ hooks }) => hooks.holdsAccess?.() === true)
            ? await memory.proofFor(this.target)
            : undefined;
        if (this.redeemed !== undefined) request.headers.set(HeaderName.Payment, this.redeemed.header);
        const response = await this.paidFetch(request);
        // Answered 5xx again (and no new payment was made): the seller gave the proof back once more.
        if (this.redeemed !== undefined && response.status >= 500 && this.spend.paid === 0n) {
          memory.redeemable.keep(this.target, this.redeemed);
        }
        return response;
      } catch (error) {
        if (!(await this.retried(error, attempt))) throw error;
      }
    }
  }

  private async retried(error: unknown, attempt: number): Promise<boolean> {
    for (const { hooks } of this.parts) {
      if (await hooks.retry?.(error, attempt)) return true;
    }
    return false;
  }

  /** The seller answered: settle what the call holds, count it, and report (an error answer throws). */
  private async answered(response: Response): Promise<[string, PaidToolReceipt]> {
    for (const { hooks } of this.parts) await hooks.answered?.(response);
    await this.spend.settleReservations();
    const aside = await this.paidAside();
    if (aside?.provider !== undefined) this.provider ??= aside.provider;
    await recordDemand(this.options, this.tool.agent, this.offer, this.tool.meter.planAt(this.tool.origin));
    for (const { hooks } of this.parts) hooks.counted?.();
    const text = await response.text();
    if (!response.ok) {
      for (const { hooks } of this.parts) await hooks.failed?.(response);
      throw this.sellerFailure(response.status, text);
    }
    return answeredReceipt(this, response, text);
  }

  /** What the parts paid aside, added to what the call paid. */
  async paidAside(): Promise<{ provider?: string | undefined } | undefined> {
    let provider: string | undefined;
    let any = false;
    for (const { scheme, hooks } of this.parts) {
      const aside = await hooks.paidAside?.();
      if (aside === undefined || aside.amount <= 0n) continue;
      any = true;
      this.asideMode = scheme.spendMode;
      this.spend.paid += aside.amount;
      provider ??= aside.provider;
    }
    return any ? { provider } : undefined;
  }

  private async failed(thrown: unknown): Promise<[string, PaidToolReceipt]> {
    return failedReceipt(this, thrown);
  }

  /** The seller answered an error: its code and message, and what it was paid for the call. */
  sellerFailure(status: number, text: string): SellerError {
    return sellerFailure(this.capability.name, status, text, {
      paid: this.spend.paid,
      pending: this.spend.pending,
      transaction: this.transaction,
    });
  }
}
