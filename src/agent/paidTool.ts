/**
 * `paidTool` (docs/agents.md): a gated HTTP capability as a LangChain tool. On a 402 it asks the policy
 * whether to pay once or subscribe, reserves the spend in the agent's budget, pays through the payer,
 * retries, and returns the result as content with the receipt as artifact. Failures come back as text
 * carrying the error code (`BudgetExceeded`, `InsufficientFunds`, `AllowanceExhausted`, …) so a model
 * can act on them instead of the run crashing.
 *
 * Budget invariant: a spend is reserved before anything is signed; it is committed once money moved
 * (even if the request then failed) and released when nothing was paid. A receipt's `amount` is what
 * the call paid, on success and on failure alike: a seller that fails after being paid yields an error
 * receipt with the amount paid (`paid: true`), never one that hides the money.
 *
 * Offer invariant: before the policy weighs a 402, it is held to what the seller listed (offerCheck.ts):
 * a higher price, other plan terms, another payTo, network or token is `OfferMismatch`, with nothing
 * reserved or signed; spends are keyed by the seller's listed identity. A call made for a sale (a
 * reseller's purchase) is held against that sale's call allowance before the budget (callAllowance.ts),
 * and a proof a failing seller gave back is redeemed by the next call to the same target
 * (redeemableProofs.ts).
 *
 * Overage cap: a metered subscription is taken out with a cap on overage per period. When the gate
 * answers `AllowanceExhausted`, the cap is the agent's own limit, not the budget's: the tool raises it
 * (relayed, through the payer) by as much as the budget still has room for, and retries the call.
 *
 * The parts: one call is a `PaidCall` (paidTool/paidCall.ts) that answers a 402 with `chooseOption`,
 * holds its money in a `CallSpend` and ends with a receipt (callReceipt.ts); what differs per scheme
 * is asked of the schemes' purchase parts (paidTool/purchasePart.ts).
 */
import { type StructuredToolInterface, type ToolRunnableConfig, tool } from "@langchain/core/tools";
import type { Scheme } from "../schemes/types.ts";
import { agentSchemesWith } from "./agentSchemes.ts";
import { PaidCall } from "./paidTool/paidCall.ts";
import { createPaidToolRuntime } from "./paidTool/paidToolRuntime.ts";
import type { PaidToolCoreOptions, PaidToolReceipt, RemoteCapability } from "./paidTool/paidToolTypes.ts";
import type { PaidToolSchemeOptions } from "./paidTool/purchasePart.ts";
import { paidToolMetadata, withPricing } from "./tools/describePricing.ts";

export type { PaidToolReceipt, RemoteCapability } from "./paidTool/paidToolTypes.ts";
export { createUsageMeter, type UsageMeter } from "./paidTool/usageMeter.ts";

/**
 * A paid tool's options: those of its core, and those the schemes' parts read (`subscriptions`, the
 * subscription keeper; `channels`, the agent's prepaid channels), declared in their folders.
 */
export type PaidToolOptions = PaidToolCoreOptions &
  PaidToolSchemeOptions & {
    /**
     * Schemes to buy through besides the built-ins (docs/architecture.md, "The scheme seam"): an
     * extra scheme's client part pays its options, and its agent part (`Scheme.agent`) checks, weighs
     * and buys them. An id or pricing type that clashes with another's throws `InvalidRequest`.
     */
    schemes?: readonly Scheme[] | undefined;
  };

/**
 * @example
 * const summarize = paidTool(
 *   { name: "summarize", description: "…", method: "POST", url: "http://127.0.0.1:4101/summarize", input: schema },
 *   { agent: "researcher", payer, budget },
 * );
 * const result = await summarize.invoke({ text });
 */
export function paidTool(capability: RemoteCapability, options: PaidToolOptions): StructuredToolInterface {
  const runtime = createPaidToolRuntime(capability, options, agentSchemesWith(options.schemes));
  const run = async (args: unknown, config?: ToolRunnableConfig): Promise<[string, PaidToolReceipt]> => {
    const call = await PaidCall.start(runtime, args, config);
    return call.run();
  };
  const { listing } = options;
  return tool(run, {
    name: capability.name,
    // The model reads the listed price with the description; tracing and the orchestrator read metadata.
    description: withPricing(capability.description, listing?.pricing),
    schema: capability.input as Record<string, unknown>,
    responseFormat: "content_and_artifact",
    ...(listing === undefined ? {} : { metadata: paidToolMetadata(listing) }),
  }) as unknown as StructuredToolInterface;
}
