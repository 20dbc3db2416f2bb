/**
 * The market search as a tool of a model run: a free tool that searches the market's catalog and adds
 * what it finds as paid tools for the rest of the run, so a model can find a capability it was not
 * given. The added tools are ordinary paid tools on the same budget (every call still reserves,
 * checks its 402 against the listing and may need approval); the search itself pays nothing.
 *
 * Bounds: each search adds at most `perSearch` tools and a run at most `perRun`, so a market that
 * lists thousands of capabilities cannot flood the model's context; a found name that the run
 * already has is not added again (the model keeps the tool it has).
 */
import { type StructuredToolInterface, tool } from "@langchain/core/tools";
import { z } from "zod";

/** Searches the market and makes paid tools of what it finds (e.g. `discoverTools` with `search`). */
export type MarketToolFinder = (search: {
  q: string;
  maxPrice?: string | undefined;
}) => Promise<readonly { tool: StructuredToolInterface; seller: string }[]>;

export const MARKET_SEARCH_TOOL = "search_market";

export type MarketSearchToolOptions = {
  find: MarketToolFinder;
  /** The run's tools by name: where found tools are added, and what they must not clash with. */
  tools: Map<string, StructuredToolInterface>;
  /** Tools this run has from the start (never replaced). */
  has: (name: string) => boolean;
  perSearch?: number | undefined;
  perRun?: number | undefined;
};

const SearchSchema = z.object({
  query: z
    .string()
    .min(1)
    .max(200)
    .describe("Words describing the capability you need, e.g. 'translate german' or 'weather forecast'."),
  maxPrice: z
    .string()
    .regex(/^\d{1,9}(\.\d{1,6})?$/)
    .optional()
    .describe("Only capabilities costing at most this much USDC per call, e.g. '0.05'."),
});

/**
 * @example
 * const search = marketSearchTool({ find: (s) => discoverTools({ ...paidOptions, market, search: s }), tools, has });
 */
export function marketSearchTool(options: MarketSearchToolOptions): StructuredToolInterface {
  const perSearch = options.perSearch ?? 5;
  const perRun = options.perRun ?? 20;
  return tool(
    async ({ query, maxPrice }) => {
      const found = await options.find({ q: query, ...(maxPrice === undefined ? {} : { maxPrice }) });
      const lines: string[] = [];
      let added = 0;
      for (const { tool: paid, seller } of found) {
        if (added >= perSearch) break;
        const known = options.has(paid.name) || options.tools.has(paid.name);
        if (!known) {
          if (options.tools.size >= perRun) break;
          options.tools.set(paid.name, paid);
          added++;
        }
        lines.push(
          `- ${paid.name} (seller ${seller})${known ? " [already available]" : ""}: ${paid.description}`,
        );
      }
      if (lines.length === 0) return `No capability in the market matches "${query}".`;
      return [
        `Found in the market (${added} new tool${added === 1 ? "" : "s"} you can call from your next step on; each call is paid from the budget):`,
        ...lines,
      ].join("\n");
    },
    {
      name: MARKET_SEARCH_TOOL,
      description:
        "Searches the Tollgate market for paid capabilities you do not have yet. Free. Capabilities it finds become tools you can call from your next step on; their descriptions state their prices.",
      schema: SearchSchema,
    },
  ) as unknown as StructuredToolInterface;
}
