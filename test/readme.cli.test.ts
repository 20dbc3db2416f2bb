/**
 * The README's CLI table names every command the `tollgate` CLI registers (a file of src/cli/commands),
 * and no other, so a new command cannot go unlisted (`tollgate channel` once did).
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { commandNamesIn } from "../src/cli/runCli.ts";

const root = join(import.meta.dirname, "..");

/** The text of the README's `## CLI` section, up to the next `## ` heading. */
function cliSection(readme: string): string {
  const start = readme.indexOf("\n## CLI\n");
  expect(start, "README.md has a ## CLI section").toBeGreaterThanOrEqual(0);
  const rest = readme.slice(start + 1);
  const next = rest.indexOf("\n## ", 3);
  return next < 0 ? rest : rest.slice(0, next);
}

describe("README CLI table", () => {
  it("names every registered command, each once", () => {
    const section = cliSection(readFileSync(join(root, "README.md"), "utf8"));
    const listed = [...section.matchAll(/^\| `tollgate ([a-z-]+)/gm)].map((m) => m[1]!);
    const registered = commandNamesIn(new URL("../src/cli/commands/", import.meta.url));
    expect(registered.length).toBeGreaterThan(0);
    expect([...listed].sort()).toEqual(registered);
  });
});
