/**
 * The README's documentation list names every document in docs/, and names nothing that is not there,
 * so a new document cannot go unlisted (docs/security.md once did).
 */
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "..");

/** The text of the README's `## Documentation` section, up to the next `## ` heading. */
function documentationSection(readme: string): string {
  const start = readme.indexOf("\n## Documentation\n");
  expect(start, "README.md has a ## Documentation section").toBeGreaterThanOrEqual(0);
  const rest = readme.slice(start + 1);
  const next = rest.indexOf("\n## ", 3);
  return next < 0 ? rest : rest.slice(0, next);
}

describe("README documentation list", () => {
  const section = documentationSection(readFileSync(join(root, "README.md"), "utf8"));
  const listed = [...section.matchAll(/^- \[docs\/([^\]]+)\]\(docs\/([^)]+)\)/gm)].map((m) => {
    // The link text and the target name the same file.
    expect(m[1]).toBe(m[2]);
    return m[2]!;
  });

  it("names every document in docs/", () => {
    const documents = readdirSync(join(root, "docs"))
      .filter((name) => name.endsWith(".md"))
      .sort();
    expect(documents.length).toBeGreaterThan(0);
    expect([...listed].sort()).toEqual(documents);
  });

  it("links only to documents that exist, each once", () => {
    for (const name of listed) expect(existsSync(join(root, "docs", name)), name).toBe(true);
    expect(new Set(listed).size).toBe(listed.length);
  });
});
