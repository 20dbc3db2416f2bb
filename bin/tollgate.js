#!/usr/bin/env node
// Runs the built CLI (dist/, built by `npm install` through the `prepare` script, or `npm run build`)
// when no source it was built from changed since, else the TypeScript sources through tsx's loader:
// the build answers `tollgate --help` in a fraction of a second, tsx takes seconds to start.
// In-process either way (not a child) so signals reach the command itself: Ctrl-C or `kill <pid>`
// stops a `tollgate facilitator` cleanly instead of leaving a child running behind a dead wrapper.
import { readFileSync, statSync } from "node:fs";

const built = new URL("../dist/", import.meta.url);

/**
 * Whether dist/ holds a whole build no older than its sources: dist/sources.json (written last by
 * src/cli/bundle.ts) names every file the build read; one stat each, about a millisecond in all.
 * A missing, unreadable or deleted file means no.
 */
function isBuildFresh() {
  try {
    const { builtAt, sources } = JSON.parse(readFileSync(new URL("sources.json", built), "utf8"));
    if (typeof builtAt !== "number" || !Array.isArray(sources)) return false;
    return sources.every((source) => statSync(new URL(source, built)).mtimeMs < builtAt);
  } catch {
    return false;
  }
}

if (isBuildFresh()) {
  await import(new URL("tollgate.js", built).href);
} else {
  // Loaded only here: the build runs without tsx.
  const { register } = await import("tsx/esm/api");
  register();
  await import(new URL("../src/cli/main.ts", import.meta.url).href);
}
