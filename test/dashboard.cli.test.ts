/**
 * `tollgate dashboard` as its own process: loopback only, prints its URL and a sign-in token, serves the
 * agent views of the agent store in `<dir>/agents` without holding the PGlite directory between page
 * views (so `tollgate budget` still runs beside it), and stops on SIGINT.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { privateKeyToAccount } from "viem/accounts";
import { afterAll, describe, expect, it } from "vitest";
import { writeDevnetFile } from "../src/chain/devnetFile.ts";
import { dashboardOptions } from "../src/cli/commands/facilitator.ts";
import type { FacilitatorConfig } from "../src/facilitator/facilitatorConfig.ts";
import { runCli } from "./support/runCli.ts";

const tsxLoader = import.meta.resolve("tsx");
const mainScript = new URL("../src/cli/main.ts", import.meta.url).pathname;
const dir = mkdtempSync(join(tmpdir(), "tollgate-dashboard-"));
const env = { ...process.env, TOLLGATE_DIR: join(dir, ".tollgate"), DATABASE_URL: "", LOG_LEVEL: "silent" };
let child: ChildProcess | undefined;

afterAll(() => {
  child?.kill("SIGKILL");
  rmSync(dir, { recursive: true, force: true });
});

/** Starts the command and resolves with what it printed once it listens. */
function startDashboard(args: string[]): Promise<{ url: string; token: string }> {
  child = spawn(process.execPath, ["--import", tsxLoader, mainScript, "dashboard", ...args], {
    cwd: dir,
    env,
  });
  let out = "";
  return new Promise((resolve, reject) => {
    child!.stdout!.on("data", (chunk: Buffer) => {
      out += chunk.toString();
      const url = /Agent dashboard: (\S+)/.exec(out)?.[1];
      const token = /dashboard token: (\S+)/.exec(out)?.[1];
      if (url !== undefined && token !== undefined) resolve({ url, token });
    });
    child!.on("exit", (code) => reject(new Error(`exited ${code}: ${out}`)));
  });
}

describe("tollgate dashboard", { timeout: 120_000 }, () => {
  it("refuses a host that is not loopback", async () => {
    const result = await runCli(["dashboard", "--host", "0.0.0.0"], { cwd: dir, env, timeoutMs: 60_000 });
    expect(result.code).toBe(2);
    expect(result.stderr).toContain("not a loopback address");
  });

  it("serves the agent views behind its printed token, beside `tollgate budget`, until SIGINT", async () => {
    const set = await runCli(["budget", "set", "researcher", "--total", "5"], {
      cwd: dir,
      env,
      timeoutMs: 60_000,
    });
    expect(set.code).toBe(0);
    const { url, token } = await startDashboard(["--port", "0"]);
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/dashboard$/);
    const origin = new URL(url).origin;
    const login = await fetch(`${url}/login`);
    const csrf = /name="_csrf" value="([^"]+)"/.exec(await login.text())?.[1] ?? "";
    const loginCookie = login.headers.getSetCookie()[0]?.split(";")[0] ?? "";
    const signIn = await fetch(`${url}/login`, {
      method: "POST",
      redirect: "manual",
      headers: { "content-type": "application/x-www-form-urlencoded", cookie: loginCookie, origin },
      body: new URLSearchParams({ _csrf: csrf, kind: "agent", secret: token }).toString(),
    });
    expect(signIn.status).toBe(303);
    const cookie =
      signIn.headers
        .getSetCookie()
        .find((c) => c.startsWith("tollgate_session="))
        ?.split(";")[0] ?? "";
    const agents = await fetch(`${url}/agents`, { headers: { cookie } });
    expect(agents.status).toBe(200);
    const listed = await agents.text();
    expect(listed, listed.slice(listed.indexOf("<main>"), listed.indexOf("<main>") + 1500)).toContain(
      "5 USDC",
    );
    // The PGlite directory is free between page views: the budget command runs while the dashboard is up.
    const again = await runCli(["budget", "set", "researcher", "--total", "7"], {
      cwd: dir,
      env,
      timeoutMs: 60_000,
    });
    expect(again.code).toBe(0);
    expect(await (await fetch(`${url}/agents`, { headers: { cookie } })).text()).toContain("7 USDC");
    const exited = new Promise<number | null>((resolve) => child!.once("exit", resolve));
    child!.kill("SIGINT");
    expect(await exited).toBe(0);
    child = undefined;
  });
});

describe("tollgate facilitator's dashboard setting", () => {
  const devKey = `0x${"11".repeat(32)}` as const;
  const devAddress = privateKeyToAccount(devKey).address;
  const devnetDir = join(dir, "devnet-dir");
  writeDevnetFile(join(devnetDir, "devnet.json"), {
    rpcUrl: "http://127.0.0.1:9",
    chainId: 31_337,
    network: "eip155:31337",
    pid: 1,
    contracts: {
      usd: "0x00000000000000000000000000000000000000d0",
      subscriptionManager: "0x00000000000000000000000000000000000000c0",
      batchSettler: "0x00000000000000000000000000000000000000b0",
    },
    accounts: [{ address: devAddress, privateKey: devKey }],
  });
  const config = (host: string, network: `eip155:${number}`, configDir = devnetDir) =>
    ({ host, network, dir: configDir, rpcUrl: "http://127.0.0.1:9" }) as FacilitatorConfig;

  it("is on by default only for a devnet on a loopback address", () => {
    expect(dashboardOptions(undefined, config("127.0.0.1", "eip155:31337"))).toBeDefined();
    expect(dashboardOptions("auto", config("0.0.0.0", "eip155:31337"))).toBeUndefined();
    expect(dashboardOptions(undefined, config("127.0.0.1", "eip155:8453"))).toBeUndefined();
    expect(
      dashboardOptions(undefined, config("127.0.0.1", "eip155:31337", join(dir, "no-devnet"))),
    ).toBeUndefined();
  });

  it("follows on and off, and refuses anything else", () => {
    expect(dashboardOptions("on", config("0.0.0.0", "eip155:8453"))).toBeDefined();
    expect(dashboardOptions("off", config("127.0.0.1", "eip155:31337"))).toBeUndefined();
    expect(() => dashboardOptions("yes", config("127.0.0.1", "eip155:31337"))).toThrow(/on, off or auto/);
  });

  it("signs plan transactions only for providers holding a devnet dev key, and never off the devnet", () => {
    const onDevnet = dashboardOptions(undefined, config("127.0.0.1", "eip155:31337"));
    expect(onDevnet?.planSigner?.(devAddress)?.account?.address).toBe(devAddress);
    expect(onDevnet?.planSigner?.("0x00000000000000000000000000000000000000aa")).toBeUndefined();
    const onBase = dashboardOptions("on", config("127.0.0.1", "eip155:8453"));
    expect(onBase?.planSigner?.(devAddress)).toBeUndefined();
  });
});
