#!/usr/bin/env node
// Runs the TypeScript CLI in this process through tsx's loader, so the package needs no build step.
// In-process (not a child) so signals reach the command itself: Ctrl-C or `kill <pid>` stops a
// `tollgate facilitator` cleanly instead of leaving a child running behind a dead wrapper.
import { register } from "tsx/esm/api";

register();
await import(new URL("../src/cli/main.ts", import.meta.url).href);
