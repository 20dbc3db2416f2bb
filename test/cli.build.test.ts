/**
 * The built command line (`npm run build`): the same commands as the sources, and a facilitator that
 * runs from it with plain `node` — migrations applied from `src/store/migrations`, the dashboard's
 * assets served, and a payer's signed payment settled by it on the devnet (read back from the chain).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getAuthorizationState } from "../src/chain/actions/usd/getAuthorizationState.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { describeDevnet, writeDevnetFile } from "../src/chain/devnetFile.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { bundleCli } from "../src/cli/bundle.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { AuthorizeResponseSchema } from "../src/protocol/facilitator.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";
import { runCli } from "./support/runCli.ts";

const repository = join(import.meta.dirname, "..");

describe("the built tollgate command", { timeout: 120_000 }, () => {
  // Inside the repository, so the build's package imports resolve from its node_modules.
  const outDir = join(repository, `.tmp-build-${randomBytes(4).toString("hex")}`);
  const dir = mkdtempSync(join(tmpdir(), "tollgate-built-"));
  let entry: string;
  let devnet: Devnet;
  let child: ChildProcess | undefined;

  beforeAll(async () => {
    [entry, devnet] = await Promise.all([bundleCli(outDir), startDevnet({ accounts: 3 })]);
  });
  afterAll(async () => {
    child?.kill("SIGKILL");
    await devnet?.stop();
    rmSync(outDir, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  });

  const run = (args: string[]) =>
    new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) => {
      const p = spawn(process.execPath, [entry, ...args], {
        cwd: dir,
        env: { ...process.env, LOG_LEVEL: "silent" },
      });
      let stdout = "";
      let stderr = "";
      p.stdout.on("data", (c: Buffer) => {
        stdout += c.toString();
      });
      p.stderr.on("data", (c: Buffer) => {
        stderr += c.toString();
      });
      p.on("exit", (code) => resolve({ code, stdout, stderr }));
    });

  it("lists the same commands as the sources and answers an unknown one as they do", async () => {
    const built = await run(["--help"]);
    const source = await runCli(["--help"], { cwd: dir, timeoutMs: 60_000 });
    expect(built.code).toBe(0);
    expect(built.stdout).toBe(source.stdout);
    const commands = readdirSync(join(repository, "src/cli/commands")).filter(
      (f) => f.endsWith(".ts") && !f.endsWith(".test.ts"),
    );
    expect(built.stdout.split("\n").filter((l) => /^ {2}[a-z]/.test(l))).toHaveLength(commands.length);
    const unknown = await run(["no-such-command"]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toContain('unknown command "no-such-command"');
    const badFlag = await run(["facilitator", "--no-such-flag"]);
    expect(badFlag.code).toBe(2);
  });

  it("runs a facilitator with plain node: a fresh PGlite directory migrated, the dashboard's assets served, a payment settled", async () => {
    writeDevnetFile(join(dir, "devnet.json"), describeDevnet(devnet));
    child = spawn(process.execPath, [entry, "facilitator", "--dir", dir, "--port", "0"], {
      cwd: dir,
      env: {
        ...process.env,
        LOG_LEVEL: "warn",
        DATABASE_URL: "",
        TOLLGATE_PROOF_KEYS: generateProofKey().seed,
      },
    });
    // No tsx: the process runs the build only.
    expect(child.spawnargs.join(" ")).not.toContain("tsx");
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child!.stderr!.on("data", (c: Buffer) => {
        out += c.toString();
        const match = /facilitator listening on (\S+)/.exec(out);
        if (match !== null) resolve(match[1]!);
      });
      child!.once("exit", (code) => reject(new Error(`exited ${code}: ${out}`)));
    });
    const supported = await fetch(`${url}/supported`);
    expect(supported.status).toBe(200);
    expect(JSON.stringify(await supported.json())).toContain(devnet.network);
    const asset = await fetch(`${url}/dashboard/assets/dashboard.js`);
    expect(asset.status).toBe(200);
    expect((await asset.text()).length).toBeGreaterThan(100);
    // Started means its fresh store was migrated from src/store/migrations (a missing directory fails
    // the start); the store answers.
    expect((await fetch(`${url}/healthz`)).status).toBe(200);

    // A payment, settled by the built facilitator: the transfer is on chain, the authorization used.
    const [, payer, payee] = devnet.accounts;
    const balanceOf = (owner: Address) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
    const before = await balanceOf(payee!.address);
    const payment = await signTestPayment(devnet, payer!, { payTo: payee!.address, amount: 25_000n });
    const settled = await fetch(`${url}/authorize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ signedPayment: payment }),
    });
    expect(settled.status).toBe(200);
    const { proof } = AuthorizeResponseSchema.parse(await settled.json());
    const receipt = await devnet.publicClient.getTransactionReceipt({ hash: proof.tx });
    expect(receipt.status).toBe("success");
    expect(await balanceOf(payee!.address)).toBe(before + 25_000n);
    expect(
      await getAuthorizationState(devnet.publicClient, {
        token: devnet.contracts.usd,
        authorizer: payer!.address,
        nonce: payment.authorization.nonce,
      }),
    ).toBe(true);
  });
});
