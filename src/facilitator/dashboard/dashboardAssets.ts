/**
 * The dashboard's static files, served from our own origin (no CDN): uPlot's script and stylesheet
 * from its npm package, and the dashboard's own script and stylesheet beside this file. Read once when
 * the dashboard is created; served by name only (no path from the request reaches the file system).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

export type DashboardAsset = { body: string; contentType: string };

/** Loads the assets; throws at start-up when a file is missing rather than on a page load. */
export function loadDashboardAssets(): ReadonlyMap<string, DashboardAsset> {
  const require = createRequire(import.meta.url);
  const uplotDir = require.resolve("uplot/dist/uPlot.iife.min.js").replace(/uPlot\.iife\.min\.js$/, "");
  const own = (name: string) => fileURLToPath(new URL(`./assets/${name}`, import.meta.url));
  const js = "text/javascript; charset=utf-8";
  const css = "text/css; charset=utf-8";
  return new Map([
    ["uPlot.min.js", { body: readFileSync(`${uplotDir}uPlot.iife.min.js`, "utf8"), contentType: js }],
    ["uPlot.min.css", { body: readFileSync(`${uplotDir}uPlot.min.css`, "utf8"), contentType: css }],
    ["dashboard.js", { body: readFileSync(own("dashboard.js"), "utf8"), contentType: js }],
    ["dashboard.css", { body: readFileSync(own("dashboard.css"), "utf8"), contentType: css }],
  ]);
}
