/**
 * The dashboard's static files, served from our own origin (no CDN): uPlot's script and stylesheet
 * from its npm package, and the dashboard's own script and stylesheet beside this file. Read and
 * compressed once when the dashboard is created; served by name only (no path from the request reaches
 * the file system).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";

export type DashboardAsset = {
  body: string;
  contentType: string;
  /** The body gzip- and brotli-compressed, for browsers that accept them (about a quarter the size). */
  gzip: Uint8Array<ArrayBuffer>;
  br: Uint8Array<ArrayBuffer>;
};

/** Loads the assets; throws at start-up when a file is missing rather than on a page load. */
export function loadDashboardAssets(): ReadonlyMap<string, DashboardAsset> {
  const require = createRequire(import.meta.url);
  const uplotDir = require.resolve("uplot/dist/uPlot.iife.min.js").replace(/uPlot\.iife\.min\.js$/, "");
  const own = (name: string) => fileURLToPath(new URL(`./assets/${name}`, import.meta.url));
  const js = "text/javascript; charset=utf-8";
  const css = "text/css; charset=utf-8";
  return new Map([
    ["uPlot.min.js", asset(readFileSync(`${uplotDir}uPlot.iife.min.js`, "utf8"), js)],
    ["uPlot.min.css", asset(readFileSync(`${uplotDir}uPlot.min.css`, "utf8"), css)],
    ["dashboard.js", asset(readFileSync(own("dashboard.js"), "utf8"), js)],
    ["dashboard.css", asset(readFileSync(own("dashboard.css"), "utf8"), css)],
  ]);
}

function asset(body: string, contentType: string): DashboardAsset {
  return {
    body,
    contentType,
    gzip: new Uint8Array(gzipSync(body, { level: 9 })),
    br: new Uint8Array(
      brotliCompressSync(body, {
        params: {
          [constants.BROTLI_PARAM_QUALITY]: constants.BROTLI_MAX_QUALITY,
          [constants.BROTLI_PARAM_MODE]: constants.BROTLI_MODE_TEXT,
        },
      }),
    ),
  };
}

/** The codings an `Accept-Encoding` header allows (`q=0` refuses one), lower-cased. */
function acceptedCodings(header: string | undefined): Set<string> {
  const accepted = new Set<string>();
  for (const part of (header ?? "").split(",")) {
    const [name = "", ...params] = part.split(";").map((s) => s.trim().toLowerCase());
    const q = params.find((p) => p.startsWith("q="));
    if (name !== "" && (q === undefined || Number(q.slice(2)) > 0)) accepted.add(name);
  }
  return accepted;
}

/**
 * The response for an asset: brotli when the browser accepts it, else gzip, else the plain text.
 * Cached for five minutes by browsers and shared caches, which key it by `Accept-Encoding`.
 */
export function dashboardAssetResponse(asset: DashboardAsset, acceptEncoding: string | undefined): Response {
  const accepted = acceptedCodings(acceptEncoding);
  const headers: Record<string, string> = {
    "content-type": asset.contentType,
    "cache-control": "public, max-age=300",
    vary: "accept-encoding",
  };
  const coding = accepted.has("br") ? "br" : accepted.has("gzip") || accepted.has("*") ? "gzip" : undefined;
  if (coding === undefined) return new Response(asset.body, { headers });
  headers["content-encoding"] = coding;
  return new Response(coding === "br" ? asset.br : asset.gzip, { headers });
}
