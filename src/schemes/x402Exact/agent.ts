/**
 * The x402 `exact` scheme's agent part: an x402 server's `exact` requirements pay the listed one-time
 * price, and are held to it as a Tollgate `exact` option is.
 */
import type { AgentSchemePart } from "../../agent/agentScheme.ts";
import { decodeJsonHeader, HeaderName } from "../../protocol/header.ts";
import { McpMetaKey } from "../../protocol/mcpPayment.ts";
import { X402PaymentPayloadSchema } from "../../protocol/x402.ts";
import { oneTimeDeviation } from "../exact/agent.ts";
import { x402Purchase } from "./agent/x402Purchase.ts";

export const x402ExactAgent: AgentSchemePart = {
  x402: {
    schemes: ["exact"],
    check: (requirement, listed) => {
      if (!/^\d{1,78}$/.test(requirement.amount)) {
        return { field: "price", listed: "an amount", asked: requirement.amount };
      }
      return oneTimeDeviation(requirement.amount, listed);
    },
  },
  // Over MCP the payload rides as an object, not as the header's base64 text.
  mcpCredentials: {
    [McpMetaKey.X402Payment]: (headers: Headers) => {
      const header = headers.get(HeaderName.X402PaymentSignature);
      return header === null ? undefined : decodeJsonHeader(header, X402PaymentPayloadSchema);
    },
  },
  purchase: x402Purchase,
};
