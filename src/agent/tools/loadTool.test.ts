import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isTollgateError } from "../../protocol/errors.ts";
import { listToolManifests, loadTool } from "./loadTool.ts";
import { RemoteToolManifestSchema } from "./toolManifest.ts";

// A capability module of this repository, reached from the temporary tools directory.
const echoModule = fileURLToPath(new URL("./testEchoCapability.ts", import.meta.url));

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tollgate-tools-"));
  const write = (name: string, value: unknown) =>
    writeFile(join(dir, name), typeof value === "string" ? value : JSON.stringify(value));
  let modulePath = relative(dir, echoModule);
  if (!modulePath.startsWith(".")) modulePath = `./${modulePath}`;
  await write("echo.json", { kind: "local", name: "echo", module: modulePath, export: "testEchoCapability" });
  await write("shout.json", {
    kind: "local",
    name: "shout",
    description: "Repeat a text loudly.",
    module: modulePath,
    export: "testEchoCapability",
  });
  await write("plain.json", { kind: "local", name: "plain", module: "./plain.mjs", export: "plain" });
  await write(
    "plain.mjs",
    `export const plain = { name: "plain", description: "A plain tool.", schema: { type: "object", properties: {} },
       invoke: async () => "plain result" };
     export const notATool = 42;`,
  );
  await write("number.json", { kind: "local", name: "number", module: "./plain.mjs", export: "notATool" });
  await write("remote.json", {
    kind: "remote",
    name: "remote",
    capability: "brief",
    manifestUrl: "http://127.0.0.1:4031/.well-known/tollgate.json",
    maxPrice: "0.05",
  });
  await write("renamed.json", {
    kind: "remote",
    name: "other",
    capability: "x",
    market: "http://127.0.0.1:4030",
  });
  await write("broken.json", "{ not json");
  await write("README.txt", "not a manifest");
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function failure(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(
    () => undefined,
    (error: unknown) => error,
  );
}

describe("loadTool", () => {
  it("turns a local capability into a LangChain tool named after the manifest", async () => {
    const loaded = await loadTool("echo", { dir });
    expect(loaded.kind).toBe("local");
    if (loaded.kind !== "local") return;
    expect(loaded.tool.name).toBe("echo");
    expect(loaded.tool.description).toBe("Echo a text back.");
    expect(await loaded.tool.invoke({ text: "hi" })).toBe('{"echo":"hi"}');
  });

  it("lets the manifest rename and redescribe a capability", async () => {
    const loaded = await loadTool("shout", { dir });
    if (loaded.kind !== "local") throw new Error("expected a local tool");
    expect([loaded.tool.name, loaded.tool.description]).toEqual(["shout", "Repeat a text loudly."]);
  });

  it("accepts an exported structured tool as it is", async () => {
    const loaded = await loadTool("plain", { dir });
    if (loaded.kind !== "local") throw new Error("expected a local tool");
    expect(await loaded.tool.invoke({})).toBe("plain result");
  });

  it("returns a remote tool's description for discovery without touching the network", async () => {
    const loaded = await loadTool("remote", { dir });
    expect(loaded).toEqual({
      kind: "remote",
      manifest: {
        kind: "remote",
        name: "remote",
        capability: "brief",
        manifestUrl: "http://127.0.0.1:4031/.well-known/tollgate.json",
        maxPrice: "0.05",
      },
    });
  });

  it("says NotFound for a tool without a manifest and refuses names that are paths", async () => {
    expect(isTollgateError(await failure(loadTool("missing", { dir })), "NotFound")).toBe(true);
    expect(isTollgateError(await failure(loadTool("../etc/passwd", { dir })), "InvalidRequest")).toBe(true);
  });

  it("refuses a manifest that is not JSON, names another tool, or exports neither kind of tool", async () => {
    for (const name of ["broken", "renamed", "number"]) {
      const error = await failure(loadTool(name, { dir }));
      expect({ name, invalid: isTollgateError(error, "InvalidRequest") }).toEqual({ name, invalid: true });
    }
    expect(String(await failure(loadTool("number", { dir })))).toMatch(
      /not a capability or a structured tool/,
    );
  });

  it("lists every manifest by name without importing modules", async () => {
    const clean = join(dir, "clean");
    await mkdir(clean);
    await writeFile(
      join(clean, "b-tool.json"),
      JSON.stringify({ kind: "local", name: "b-tool", module: "./missing.ts", export: "x" }),
    );
    await writeFile(
      join(clean, "a-tool.json"),
      JSON.stringify({ kind: "remote", name: "a-tool", capability: "a", market: "http://m.example" }),
    );
    await writeFile(join(clean, "notes.md"), "ignored");
    const manifests = await listToolManifests({ dir: clean });
    expect(manifests.map((manifest) => `${manifest.kind}:${manifest.name}`)).toEqual([
      "remote:a-tool",
      "local:b-tool",
    ]);
  });

  it("fails a listing that holds a malformed manifest, naming the file", async () => {
    expect(String(await failure(listToolManifests({ dir })))).toMatch(/broken\.json is not JSON/);
  });
});

describe("remote tool manifests", () => {
  it("need exactly one of manifestUrl and market, and seller only with market", () => {
    const base = { kind: "remote", name: "brief", capability: "brief" };
    expect(RemoteToolManifestSchema.safeParse(base).success).toBe(false);
    expect(
      RemoteToolManifestSchema.safeParse({
        ...base,
        manifestUrl: "http://a.example/.well-known/tollgate.json",
        market: "http://m.example",
      }).success,
    ).toBe(false);
    expect(
      RemoteToolManifestSchema.safeParse({
        ...base,
        manifestUrl: "http://a.example/.well-known/tollgate.json",
        seller: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
      }).success,
    ).toBe(false);
    expect(
      RemoteToolManifestSchema.safeParse({
        ...base,
        market: "http://m.example",
        seller: "0x70997970c51812dc3a010c7d01b50e0d17dc79c8",
        maxPrice: "0.05",
      }).success,
    ).toBe(true);
    expect(
      RemoteToolManifestSchema.safeParse({ ...base, market: "http://m.example", maxPrice: "1e-3" }).success,
    ).toBe(false);
  });
});
