/** What every call of one paid tool shares, built once when the tool is (src/agent/paidTool.ts). */
import type { Address } from "viem";
import { systemClock } from "../../protocol/clock.ts";
import type { AgentSchemes } from "../agentScheme.ts";
import { checkPinnedPayee, checkX402PaymentRequired, createStoredPayeePins } from "../offerCheck.ts";
import type { PaidToolRuntime } from "./paidCall.ts";
import type { PaidToolCoreOptions, RemoteCapability } from "./paidToolTypes.ts";
import type { PaidToolSchemeOptions, PurchaseTool, SchemePurchase } from "./purchasePart.ts";
import { createToolMemory } from "./toolMemory.ts";
import { createUsageMeter } from "./usageMeter.ts";

/**
 * The shared state of a tool buying `capability` through `schemes` (the agent's built-ins and any
 * extra ones): each scheme's purchase part is built here, once per tool.
 */
export function createPaidToolRuntime(
  capability: RemoteCapability,
  options: PaidToolCoreOptions & PaidToolSchemeOptions,
  schemes: AgentSchemes,
): PaidToolRuntime {
  const fetch = options.fetch ?? globalThis.fetch;
  const clock = options.clock ?? systemClock;
  const { agent, payer, budget, listing } = options;
  const origin = new URL(capability.url).origin;
  // Without a listing, payees are pinned in the agent's store: a later run is held to the same one.
  const payees = options.payees ?? createStoredPayeePins({ store: budget.store, agent });
  const wait = options.wait ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const memory = createToolMemory({
    agent,
    payer,
    budget,
    clock,
    chain: options.chain,
    logger: options.logger,
  });
  const tool: PurchaseTool = {
    name: capability.name,
    origin,
    agent,
    payer,
    budget,
    clock,
    meter: options.meter ?? createUsageMeter(),
    listing,
    calls: options.calls,
    forecast: options.forecast,
    chain: options.chain,
    logger: options.logger,
    wait,
    async checkX402(paymentRequired) {
      const checked =
        listing === undefined
          ? paymentRequired
          : checkX402PaymentRequired(paymentRequired, listing, capability.name, schemes);
      const pinned: Address | undefined =
        listing === undefined
          ? await checkPinnedPayee(
              checked.accepts.filter((o) => o.network === payer.network).map((o) => o.payTo),
              payees,
              origin,
              capability.name,
            )
          : undefined;
      return { checked, pinned };
    },
    options,
  };
  const parts = purchasesOf(schemes).map((scheme) => ({ scheme, call: scheme.purchase.tool(tool) }));
  return { capability, options, schemes, payees, tool, memory, fetch, parts };
}

/** The schemes a tool buys through: those whose agent part has a purchase part, in order. */
function purchasesOf(schemes: AgentSchemes): SchemePurchase[] {
  return schemes.schemes.flatMap(({ id, agent }) =>
    agent.purchase === undefined ? [] : [{ id, spendMode: agent.offer?.spendMode, purchase: agent.purchase }],
  );
}
