import { z } from "zod";
import { defineCapability } from "./capability.ts";

/** A trivial capability for loader tests. */
export const testEchoCapability = defineCapability({
  name: "echo",
  description: "Echo a text back.",
  input: z.object({ text: z.string() }),
  output: z.object({ echo: z.string() }),
  pricing: [{ type: "one-time", price: "0.001" }],
  handler: async ({ text }) => ({ echo: text }),
});
