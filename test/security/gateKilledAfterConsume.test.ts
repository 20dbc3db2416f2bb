/**
 * A gate SIGKILLed after it took a proof and before it answered does not use the proof up (docs/gate.md,
 * "Replay protection"): the proof's key is claimed in flight with a lease, and the payer's re-send of
 * the same request with the same proof — at another gate sharing the replay guard, or at the gate
 * restarted on its PGlite — is told to wait out the lease (503 PaymentInFlight), then served once. A
 * different request with that proof is still refused, and the proof is used for good once served.
 * Each gate runs in a child process (test/fixtures/replayGateProcess.ts).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it, vi } from "vitest";
import { jwksOf, proofKeyFromSeed } from "../../src/facilitator/proofKeys.ts";
import { systemClock, unixSeconds } from "../../src/protocol/clock.ts";
import { encodeJsonHeader } from "../../src/protocol/header.ts";
import { PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";
import { signProofFor } from "../support/signProofFor.ts";

const fixture = new URL("../fixtures/replayGateProcess.ts", import.meta.url).pathname;
const DATABASE_URL = process.env.DATABASE_URL || undefined;
const REDIS_URL = process.env.REDIS_URL || undefined;
const key = proofKeyFromSeed(new Uint8Array(32).fill(34));

type GateProcess = { url: string; child: ChildProcess; handled: string[]; handler(): Promise<string> };

function startGate(config: Record<string, unknown>): Promise<GateProcess> {
  // `--import tsx` in this very process, not the tsx CLI (whose grandchild a SIGKILL would not reach).
  const child = spawn(process.execPath, ["--import", "tsx", fixture, JSON.stringify(config)], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const handled: string[] = [];
  const handlerWaiters: ((line: string) => void)[] = [];
  let onListening: (url: string) => void = () => undefined;
  let buffer = "";
  child.stdout!.on("data", (chunk: Buffer) => {
    buffer += chunk.toString("utf8");
    for (let nl = buffer.indexOf("\n"); nl >= 0; nl = buffer.indexOf("\n")) {
      const line = buffer.slice(0, nl);
      buffer = buffer.slice(nl + 1);
      if (line.startsWith("listening ")) onListening(line.slice("listening ".length));
      if (line.startsWith("handler ")) {
        handled.push(line.slice("handler ".length));
        for (const resolve of handlerWaiters.splice(0)) resolve(line);
      }
    }
  });
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`gate exited (${code}) before listening`)));
    onListening = (url) =>
      resolve({
        url,
        child,
        handled,
        handler: () => new Promise((done) => handlerWaiters.push(done)),
      });
  });
}

async function kill(gate: GateProcess): Promise<void> {
  if (gate.child.exitCode !== null || gate.child.signalCode !== null) return;
  const exited = new Promise((resolve) => gate.child.once("exit", resolve));
  gate.child.kill("SIGKILL");
  await exited;
}

/** A fresh 402 from `gate` for `target` and a facilitator-signed proof for its offer. */
async function proofFrom(gate: GateProcess, target: string): Promise<string> {
  const response = await fetch(`${gate.url}${target}`);
  expect(response.status).toBe(402);
  const option = PaymentRequiredSchema.parse(await response.json()).accepts[0]!;
  return encodeJsonHeader(signProofFor(key, option, unixSeconds(systemClock)));
}

const send = (gate: GateProcess, target: string, proof: string) =>
  fetch(`${gate.url}${target}`, { headers: { "X-PAYMENT": proof } });

/**
 * The scenario over one backend: the first gate hangs in its handler and is killed there; the payer
 * re-sends to a second gate: another instance already serving (`shared`), or the first restarted.
 */
function killedGateSuite(backend: () => Promise<Record<string, unknown>>, shared: boolean) {
  const started: GateProcess[] = [];
  afterAll(async () => {
    for (const gate of started) await kill(gate);
  });
  const start = async (config: Record<string, unknown>) => {
    const gate = await startGate(config);
    started.push(gate);
    return gate;
  };

  it("serves the payer's re-send of the same request once after the gate died holding its proof, and refuses any other request with it", async () => {
    const config = {
      memoSecret: randomBytes(32).toString("base64url"),
      proofKeys: jwksOf([key]),
      ...(await backend()),
      // A restart (PGlite) takes longer than this lease; a second instance answers well within it.
      proofLeaseSeconds: shared ? 5 : 1,
    };
    const [first, other] = await Promise.all([
      start({ ...config, hang: true }),
      shared ? start({ ...config, hang: false }) : undefined,
    ]);
    const target = "/api/report?id=7";
    const proof = await proofFrom(first, target);

    const handling = first.handler();
    // The claim is taken after this instant, so its lease runs at least until this + the lease.
    const sentAt = Date.now();
    const lost = send(first, target, proof).catch((error: unknown) => error);
    await handling;
    await kill(first);
    expect(await lost).toBeInstanceOf(Error);
    const second = other ?? (await start({ ...config, hang: false }));

    // Another request (another query: the memo binds it) with the proof is refused, and takes nothing.
    const elsewhere = await send(second, "/api/report?id=8", proof);
    expect(elsewhere.status).toBe(402);
    expect(JSON.stringify(await elsewhere.json())).toMatch(/invalid payment proof/);
    let served = await send(second, target, proof);
    // Within the lease the proof may still be in a live gate's hands: the re-send is told to wait. (A
    // restart, or a machine slow enough, outlasts the lease: then only a lease surely over may serve.)
    if (served.status === 200) {
      expect(Date.now() - sentAt).toBeGreaterThanOrEqual(config.proofLeaseSeconds * 1000);
    } else {
      expect(served.status).toBe(503);
      expect(await served.json()).toMatchObject({ error: { code: "PaymentInFlight" } });
      const wait = Number(served.headers.get("retry-after"));
      expect(wait).toBeGreaterThanOrEqual(1);
      expect(wait).toBeLessThanOrEqual(5);
      expect(second.handled).toEqual([]);
      await new Promise((resolve) => setTimeout(resolve, wait * 1000));
      served = await send(second, target, proof);
    }
    expect(served.status).toBe(200);
    expect(await served.json()).toEqual({ report: true });
    // The gate prints that its handler ran on its stdout, which may arrive after the response.
    await vi.waitFor(() => expect(second.handled).toEqual(["?id=7"]), { timeout: 5_000 });

    // Served: used for good, past the lease too.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const again = await send(second, target, proof);
    expect(again.status).toBe(402);
    expect(JSON.stringify(await again.json())).toMatch(/already used/);
    expect(second.handled).toEqual(["?id=7"]);
  }, 60_000);
}

describe("a gate killed after taking a proof, its replay guard in PGlite on disk, restarted", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-killed-gate-"));
  afterAll(() => rmSync(dir, { recursive: true, force: true }));
  killedGateSuite(async () => ({ dataDir: join(dir, "db") }), false);
});

describe.runIf(DATABASE_URL)("a gate killed after taking a proof, another sharing PostgreSQL", () => {
  let store: Store | undefined;
  afterAll(async () => {
    await store?.close();
  });
  killedGateSuite(async () => {
    store = await createTestStore({ databaseUrl: DATABASE_URL });
    return { databaseUrl: DATABASE_URL, schema: store.schema };
  }, true);
});

describe.runIf(REDIS_URL)("a gate killed after taking a proof, another sharing Redis", () => {
  killedGateSuite(
    async () => ({
      redisUrl: REDIS_URL,
      prefix: `tollgate:test:killed:${randomBytes(6).toString("hex")}:`,
    }),
    true,
  );
});
