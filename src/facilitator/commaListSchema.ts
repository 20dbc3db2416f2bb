import { z } from "zod";

/** An environment variable holding a comma-separated list: entries trimmed, empty ones dropped. */
export const CommaListSchema = z.string().transform((text) =>
  text
    .split(",")
    .map((entry) => entry.trim())
    .filter((entry) => entry !== ""),
);
