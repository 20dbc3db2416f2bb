import type { StructuredToolInterface } from "@langchain/core/tools";
import { toJsonSchema } from "@langchain/core/utils/json_schema";

/** What planners read of a tool: a LangChain `StructuredTool` satisfies it. */
export type PlannerTool = Pick<StructuredToolInterface, "name" | "description" | "schema">;

/** One input property of a tool, from its JSON Schema. */
export type ToolParameter = {
  name: string;
  type: string | undefined;
  required: boolean;
  description: string | undefined;
};

export type ToolDescription = { name: string; description: string; parameters: ToolParameter[] };

/**
 * A tool's name, description and top-level input parameters, from its zod or JSON Schema (the same
 * conversion LangChain uses when it offers the tool to a model).
 */
export function describeTool(tool: PlannerTool): ToolDescription {
  let schema: Record<string, unknown> = {};
  try {
    schema = toJsonSchema(tool.schema as Parameters<typeof toJsonSchema>[0]) as Record<string, unknown>;
  } catch {
    // A schema LangChain cannot convert leaves the tool without known parameters; it can still be chosen.
  }
  const properties = isRecord(schema.properties) ? schema.properties : {};
  const required = new Set(Array.isArray(schema.required) ? schema.required.map(String) : []);
  return {
    name: tool.name,
    description: tool.description,
    parameters: Object.entries(properties).map(([name, property]) => {
      const record = isRecord(property) ? property : {};
      return {
        name,
        type: typeof record.type === "string" ? record.type : undefined,
        required: required.has(name),
        description: typeof record.description === "string" ? record.description : undefined,
      };
    }),
  };
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}
