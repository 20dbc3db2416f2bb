import { readdir, readFile } from "node:fs/promises";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { type PlannerDocument, PlannerDocumentSchema } from "../src/agent/planner/plannerInputs.ts";

/** The demo documents bundled with Tollgate: short texts in seven languages, one `<id>.txt` each. */
export const documentsDir = fileURLToPath(new URL("./documents/", import.meta.url));

/**
 * Reads every `<id>.txt` of `dir` (default: the bundled documents) as `{ id, title, text }`: the first
 * line is the title, the rest the text. Sorted by id, so runs are reproducible.
 */
export async function loadDocuments(dir: string = documentsDir): Promise<PlannerDocument[]> {
  const names = (await readdir(dir)).filter((name) => name.endsWith(".txt")).sort();
  return Promise.all(
    names.map(async (name) => {
      const content = (await readFile(join(dir, name), "utf8")).trim();
      const newline = content.indexOf("\n");
      return PlannerDocumentSchema.parse({
        id: name.slice(0, -".txt".length),
        title: newline === -1 ? content : content.slice(0, newline).trim(),
        text: newline === -1 ? content : content.slice(newline + 1).trim(),
      });
    }),
  );
}
