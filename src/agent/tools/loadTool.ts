import { readdir, readFile } from "node:fs/promises";
import { join, resolve } from "node:path";
import { pathToFileURL } from "node:url";
import type { StructuredToolInterface } from "@langchain/core/tools";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { isCapability } from "./capability.ts";
import { capabilityTool } from "./capabilityTool.ts";
import {
  type LocalToolManifest,
  type RemoteToolManifest,
  type ToolManifest,
  ToolManifestSchema,
  ToolNameSchema,
} from "./toolManifest.ts";

/**
 * A loaded tool: a local one is ready to call; a remote one is a description for `discoverTools`,
 * which turns it into a paid tool with the buyer's payer, budget and policy.
 */
export type LoadedTool =
  | { kind: "local"; manifest: LocalToolManifest; tool: StructuredToolInterface }
  | { kind: "remote"; manifest: RemoteToolManifest };

export type LoadToolOptions = {
  /** The tools directory holding `<name>.json` files. */
  dir: string;
};

/** Largest manifest file read; a tool manifest is a few hundred bytes. */
const MAX_MANIFEST_BYTES = 64 * 1024;

/**
 * Reads the manifest of tool `name` from `dir` and, for a local tool, imports its module and builds
 * the LangChain tool. Throws `NotFound` when there is no such tool and `InvalidRequest` for a malformed
 * manifest or an export that is neither a capability nor a structured tool.
 *
 * @example
 * const loaded = await loadTool("summarize", { dir: toolsDir });
 * if (loaded.kind === "local") await loaded.tool.invoke({ text });
 */
export async function loadTool(name: string, options: LoadToolOptions): Promise<LoadedTool> {
  const manifest = await readToolManifest(name, options);
  if (manifest.kind === "remote") return { kind: "remote", manifest };
  return { kind: "local", manifest, tool: await localTool(manifest, options.dir) };
}

/** Loads several tools by name, in the order given. */
export async function loadTools(names: readonly string[], options: LoadToolOptions): Promise<LoadedTool[]> {
  return Promise.all(names.map((name) => loadTool(name, options)));
}

/** Every tool manifest in `dir`, sorted by name (local modules are not imported). */
export async function listToolManifests(options: LoadToolOptions): Promise<ToolManifest[]> {
  const files = (await readdir(options.dir)).filter((file) => file.endsWith(".json")).sort();
  const names = files
    .map((file) => file.slice(0, -".json".length))
    .filter((name) => ToolNameSchema.safeParse(name).success);
  // Read side by side, but a listing with several bad manifests names the first in file order, not
  // whichever read happened to fail first.
  const read = await Promise.allSettled(names.map((name) => readToolManifest(name, options)));
  return read.map((result) => {
    if (result.status === "rejected") throw result.reason;
    return result.value;
  });
}

/** The parsed manifest `<dir>/<name>.json`, whose `name` must be `name`. */
export async function readToolManifest(name: string, options: LoadToolOptions): Promise<ToolManifest> {
  // The name becomes a file name: the schema admits no path separators or dots.
  const checked = parseWire(ToolNameSchema, name, { what: "tool name" });
  const path = join(options.dir, `${checked}.json`);
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (cause) {
    if ((cause as NodeJS.ErrnoException).code === "ENOENT") {
      throw new TollgateError(
        "NotFound",
        `there is no tool named ${JSON.stringify(name)} in ${options.dir}`,
        {
          details: { name, dir: options.dir },
        },
      );
    }
    throw cause;
  }
  if (text.length > MAX_MANIFEST_BYTES) {
    throw new TollgateError(
      "InvalidRequest",
      `tool manifest ${path} is larger than ${MAX_MANIFEST_BYTES} bytes`,
    );
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `tool manifest ${path} is not JSON`, { cause });
  }
  const manifest = parseWire(ToolManifestSchema, json, { what: `tool manifest ${path}` });
  if (manifest.name !== checked) {
    throw new TollgateError(
      "InvalidRequest",
      `tool manifest ${path} names the tool ${JSON.stringify(manifest.name)}`,
      {
        details: { file: checked, name: manifest.name },
      },
    );
  }
  return manifest;
}

async function localTool(manifest: LocalToolManifest, dir: string): Promise<StructuredToolInterface> {
  const url = pathToFileURL(resolve(dir, manifest.module)).href;
  let module: Record<string, unknown>;
  try {
    module = (await import(url)) as Record<string, unknown>;
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `tool ${manifest.name}: cannot import ${manifest.module}`, {
      cause,
    });
  }
  const exported = module[manifest.export];
  if (isCapability(exported)) {
    return capabilityTool(exported, { name: manifest.name, description: manifest.description });
  }
  if (isStructuredTool(exported)) {
    if (exported.name !== manifest.name) {
      throw new TollgateError(
        "InvalidRequest",
        `tool ${manifest.name}: export ${manifest.export} is a tool named ${JSON.stringify(exported.name)}`,
      );
    }
    return exported;
  }
  throw new TollgateError(
    "InvalidRequest",
    `tool ${manifest.name}: export ${manifest.export} of ${manifest.module} is not a capability or a structured tool`,
  );
}

function isStructuredTool(value: unknown): value is StructuredToolInterface {
  if (typeof value !== "object" || value === null) return false;
  const candidate = value as Record<string, unknown>;
  return (
    typeof candidate.name === "string" &&
    typeof candidate.description === "string" &&
    typeof candidate.invoke === "function" &&
    candidate.schema !== undefined
  );
}
