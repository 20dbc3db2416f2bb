/**
 * `tollgate up` as a newcomer runs it: one process that brings up the devnet, the facilitator, the
 * market and the dashboard, prints a summary a second terminal can use (a paid request goes through with
 * what it prints, the dashboard signs in with its token), stops on Ctrl-C with exit code 0, and comes
 * back from its data directory with the same contracts, provider key and balances.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Hono } from "hono";
import { createPublicClient, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { afterAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type DevnetFile, DevnetFileSchema } from "../src/chain/devnetFile.ts";
import { createPayer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { honoPaymentGate, type PaymentGateEnv, paymentGate } from "../src/gate/index.ts";
import { serveApp } from "../src/http/serveApp.ts";

const bin = new URL("../bin/tollgate.js", import.meta.url).pathname;
const work = mkdtempSync(join(tmpdir(), "tollgate-up-"));
const dataDir = join(work, "data");
// Clear of the default ports, which a developer's own stack may hold.
const portOffset = 20_000 + (process.pid % 500) * 10;
const env = { ...process.env, LOG_LEVEL: "warn" };
let child: ChildProcess | undefined;

afterAll(() => {
  child?.kill("SIGKILL");
  // anvil runs in a process group of its own: a failed run must not leave it behind.
  if (existsSync(join(dataDir, "devnet.json"))) {
    try {
      process.kill(devnetFile().pid, "SIGKILL");
    } catch {
      // Already stopped.
    }
  }
  rmSync(work, { recursive: true, force: true });
});

type Summary = {
  text: string;
  facilitator: string;
  market: string;
  dashboard: string;
  usdc: string;
  apiKey: string;
  token: string;
  readyMs: number;
};

/** Starts `tollgate up` and resolves with what its summary says, once printed. */
function startUp(): Promise<Summary> {
  const started = Date.now();
  child = spawn(process.execPath, [bin, "up", "--data-dir", dataDir, "--port-offset", String(portOffset)], {
    cwd: work,
    env,
  });
  let out = "";
  let err = "";
  child.stderr!.on("data", (chunk: Buffer) => {
    err += chunk.toString();
  });
  return new Promise((resolve, reject) => {
    child!.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      if (!out.includes("Ctrl-C stops everything")) return;
      const find = (pattern: RegExp) => pattern.exec(out)?.[1] ?? "";
      resolve({
        text: out,
        facilitator: find(/export TOLLGATE_FACILITATOR_URL=(\S+)/),
        market: find(/export TOLLGATE_MARKET_URL=(\S+)/),
        dashboard: find(/^ {2}dashboard +(\S+)/m),
        usdc: find(/USDC \(FiatToken\) +(\S+)/),
        apiKey: find(/export TOLLGATE_API_KEY=(\S+)/),
        token: find(/agent operator with the token (\S+)/),
        readyMs: Date.now() - started,
      });
    });
    child!.once("exit", (code) => reject(new Error(`tollgate up exited ${code}: ${out}\n${err}`)));
  });
}

/** Sends Ctrl-C and resolves with the exit code. */
function interrupt(): Promise<number | null> {
  const running = child!;
  running.removeAllListeners("exit");
  return new Promise((resolve) => {
    running.once("exit", (code) => resolve(code));
    running.kill("SIGINT");
  });
}

function devnetFile(): DevnetFile {
  return DevnetFileSchema.parse(JSON.parse(readFileSync(join(dataDir, "devnet.json"), "utf8")));
}

/** Dev account 2's USDC, in smallest units. */
function payerBalance(): Promise<bigint> {
  const devnet = devnetFile();
  return getTokenBalance(createPublicClient({ transport: http(devnet.rpcUrl) }), {
    token: devnet.contracts.usd as `0x${string}`,
    owner: devnet.accounts[2]!.address as `0x${string}`,
  });
}

/** One paid call of 0.01 USDC to a small gated API of dev account 1, paid by dev account 2. */
async function payOnce(up: Summary): Promise<{ status: number; body: unknown }> {
  const devnet = devnetFile();
  const gate = paymentGate({
    payTo: devnet.accounts[1]!.address as `0x${string}`,
    network: devnet.network as `eip155:${number}`,
    token: devnet.contracts.usd as `0x${string}`,
    facilitator: up.facilitator,
    memoSecret: randomBytes(32),
    routes: { "GET /shout": { price: "0.01", description: "shouts" } },
  });
  const app = new Hono<PaymentGateEnv>();
  app.use("/shout", honoPaymentGate(gate));
  app.get("/shout", (c) => c.json({ shouted: "HELLO", paidBy: c.get("payment")?.payer }));
  const seller = await serveApp(app);
  try {
    const payer = createPayer({
      account: privateKeyToAccount(devnet.accounts[2]!.privateKey as `0x${string}`),
      network: devnet.network as `eip155:${number}`,
      facilitator: up.facilitator,
    });
    const response = await fetchWithPayment(fetch, payer, { maxPrice: "0.05" })(`${seller.url}/shout`);
    return { status: response.status, body: await response.json() };
  } finally {
    await seller.close();
  }
}

/** Signs in to the dashboard as the agent operator with the printed token; the session's cookie. */
async function signIn(dashboard: string, token: string): Promise<number> {
  const origin = new URL(dashboard).origin;
  const login = await fetch(`${dashboard}/login`);
  const csrf = /name="_csrf" value="([^"]+)"/.exec(await login.text())?.[1] ?? "";
  const loginCookie = login.headers.getSetCookie()[0]?.split(";")[0] ?? "";
  const signed = await fetch(`${dashboard}/login`, {
    method: "POST",
    redirect: "manual",
    headers: { "content-type": "application/x-www-form-urlencoded", cookie: loginCookie, origin },
    body: new URLSearchParams({ _csrf: csrf, kind: "agent", secret: token }).toString(),
  });
  const cookie =
    signed.headers
      .getSetCookie()
      .find((c) => c.startsWith("tollgate_session="))
      ?.split(";")[0] ?? "";
  const agents = await fetch(`${dashboard}/agents`, { headers: { cookie } });
  return agents.status;
}

describe("tollgate up", { timeout: 240_000 }, () => {
  it("runs the whole stack, stops on Ctrl-C with 0 and comes back from its data directory", async () => {
    const first = await startUp();
    expect(first.text).toContain("new, kept in");
    expect(first.apiKey).toMatch(/^tg_/);
    const supported = await fetch(`${first.facilitator}/supported`);
    expect(supported.status).toBe(200);
    expect((await fetch(`${first.market}/healthz`)).status).toBe(200);
    const paid = await payOnce(first);
    expect(paid).toMatchObject({ status: 200, body: { shouted: "HELLO" } });
    expect(await signIn(first.dashboard, first.token)).toBe(200);
    // The printed key is the provider's, at this facilitator.
    const me = await fetch(`${first.facilitator}/providers/me`, {
      headers: { authorization: `Bearer ${first.apiKey}` },
    });
    expect(me.status).toBe(200);
    const balance = await payerBalance();
    expect(balance).toBe(10_000_000_000n - 10_000n);
    expect(await interrupt()).toBe(0);

    const second = await startUp();
    expect(second.text).toContain("restored from");
    expect(second.usdc).toBe(first.usdc);
    expect(second.apiKey).toBe(first.apiKey);
    expect(second.facilitator).toBe(first.facilitator);
    const again = await fetch(`${second.facilitator}/providers/me`, {
      headers: { authorization: `Bearer ${second.apiKey}` },
    });
    expect(again.status).toBe(200);
    // The chain came back too: the payment made before the restart is still in the payer's balance.
    expect(await payerBalance()).toBe(balance);
    expect(await payOnce(second)).toMatchObject({ status: 200 });
    expect(await interrupt()).toBe(0);
    console.log(`ready after ${first.readyMs} ms on the first start, ${second.readyMs} ms on the restart`);
  });
});
