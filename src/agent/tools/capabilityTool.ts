import { type DynamicStructuredTool, tool } from "@langchain/core/tools";
import { TollgateError } from "../../protocol/errors.ts";
import type { Capability } from "./capability.ts";

export type CapabilityToolOptions = {
  /** The tool's name (default: the capability's). */
  name?: string | undefined;
  /** The tool's description (default: the capability's). */
  description?: string | undefined;
};

/**
 * A LangChain tool that runs a capability in-process: the input is parsed by the capability's schema
 * (LangChain rejects a mismatch before the handler runs), the handler's result is checked against the
 * output schema, and the content is the output's JSON text.
 *
 * @example
 * const summarize = capabilityTool(summarizer);
 * const json = await summarize.invoke({ text, sentences: 2 });
 */
export function capabilityTool(
  capability: Capability,
  options: CapabilityToolOptions = {},
): DynamicStructuredTool {
  return tool(
    async (input, config) => {
      const output = await capability.handler(input, { signal: config?.signal });
      const checked = capability.output.safeParse(output);
      if (!checked.success) {
        // The handler broke its own contract: a fault, not bad input.
        throw new TollgateError(
          "Internal",
          `capability ${capability.name} returned an output its schema rejects`,
          {
            cause: checked.error,
          },
        );
      }
      return JSON.stringify(checked.data);
    },
    {
      name: options.name ?? capability.name,
      description: options.description ?? capability.description,
      schema: capability.input,
    },
  ) as DynamicStructuredTool;
}
