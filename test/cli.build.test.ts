/**
 * The built command line (`npm run build`): the same commands as the sources, run by `bin/tollgate.js`
 * while no source is newer than it and the sources through tsx otherwise, and a facilitator that
 * runs from it with plain `node` — migrations applied from `src/store/migrations`, the dashboard's
 * assets served, and a payer's signed payment settled by it on the devnet (read back from the chain).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import {
  copyFileSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  rmSync,
  utimesSync,
  writeFileSync,
} from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getAuthorizationState } from "../src/chain/actions/usd/getAuthorizationState.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { describeDevnet, writeDevnetFile } from "../src/chain/devnetFile.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { bundleCli, isBuildFresh } from "../src/cli/bundle.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { AuthorizeResponseSchema } from "../src/protocol/facilitator.ts";
import { signTestPayment } from "./support/facilitatorHarness.ts";
import { runCli } from "./support/runCli.ts";

const repository = join(import.meta.dirname, "..");

/** `node <script> …args` in `cwd`, with the test's environment and a silent log. */
function runScript(
  script: string,
  args: string[],
  cwd: string,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve) => {
    const p = spawn(process.execPath, [script, ...args], {
      cwd,
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
}

describe("the built tollgate command", { timeout: 120_000 }, () => {
  // Inside the repository, so the build's package imports resolve from its node_modules. A copy of the
  // bin beside the build and no `src` there: the bin can only answer by running the build.
  const tree = join(repository, `.tmp-build-${randomBytes(4).toString("hex")}`);
  const outDir = join(tree, "dist");
  const bin = join(tree, "bin/tollgate.js");
  const dir = mkdtempSync(join(tmpdir(), "tollgate-built-"));
  let entry: string;
  let devnet: Devnet;
  let child: ChildProcess | undefined;

  beforeAll(async () => {
    [entry, devnet] = await Promise.all([bundleCli(outDir), startDevnet({ accounts: 3 })]);
    mkdirSync(join(tree, "bin"));
    copyFileSync(join(repository, "bin/tollgate.js"), bin);
  });
  afterAll(async () => {
    child?.kill("SIGKILL");
    await devnet?.stop();
    rmSync(tree, { recursive: true, force: true });
    rmSync(dir, { recursive: true, force: true });
  });

  const run = (args: string[], script = entry) => runScript(script, args, dir);

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

  it("is what bin/tollgate.js runs while no source it was built from changed since", async () => {
    // Another editor of this checkout may have changed a source since the build.
    if (!isBuildFresh(outDir)) await bundleCli(outDir);
    const viaBin = await run(["--help"], bin);
    expect(viaBin.stderr).toBe("");
    expect(viaBin.code).toBe(0);
    expect(viaBin.stdout).toBe((await run(["--help"])).stdout);
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

describe("bin/tollgate.js choosing between the build and the sources", { timeout: 60_000 }, () => {
  // A tree of its own: the bin, sources that say they ran through tsx (type annotations plain node
  // refuses) and a build that says it is one, stamped as bundle.ts stamps its builds.
  const tree = join(repository, `.tmp-bin-${randomBytes(4).toString("hex")}`);
  const bin = join(tree, "bin/tollgate.js");
  const main = join(tree, "src/cli/main.ts");
  const dist = join(tree, "dist");
  const builtAt = Date.now();
  const stamp = (sources: string[]) =>
    writeFileSync(join(dist, "sources.json"), JSON.stringify({ builtAt, sources }));

  beforeAll(() => {
    for (const dir of ["bin", "src/cli", "dist"]) mkdirSync(join(tree, dir), { recursive: true });
    copyFileSync(join(repository, "bin/tollgate.js"), bin);
    // argv[1] is the bin's path: whichever runs, runs in the bin's process.
    writeFileSync(
      main,
      'const from: string = "sources";\nconsole.log(from, process.argv.slice(1).join(" "));\n',
    );
    writeFileSync(join(dist, "tollgate.js"), 'console.log("build", process.argv.slice(1).join(" "));\n');
  });
  afterAll(() => rmSync(tree, { recursive: true, force: true }));

  const ranFrom = async (): Promise<string> => {
    const { stdout, stderr, code } = await runScript(bin, ["--help"], tree);
    expect(stderr).toBe("");
    expect(code).toBe(0);
    return stdout.trim().replace(bin, "<bin>");
  };
  const setModified = (path: string, ms: number) => utimesSync(path, ms / 1000, ms / 1000);

  it("runs the build, in the bin's process, when every source it names is older than it", async () => {
    setModified(main, builtAt - 60_000);
    setModified(join(tree, "src/cli"), builtAt - 60_000);
    stamp(["../src/cli/main.ts", "../src/cli/"]);
    expect(await ranFrom()).toBe("build <bin> --help");
  });

  it("runs the sources through tsx when a source is newer than the build, gone, or the stamp is missing", async () => {
    stamp(["../src/cli/main.ts"]);
    setModified(main, builtAt + 1_000);
    expect(await ranFrom()).toBe("sources <bin> --help");
    setModified(main, builtAt - 60_000);
    stamp(["../src/cli/main.ts", "../src/cli/gone.ts"]);
    expect(await ranFrom()).toBe("sources <bin> --help");
    rmSync(join(dist, "sources.json"));
    expect(await ranFrom()).toBe("sources <bin> --help");
    rmSync(dist, { recursive: true });
    expect(await ranFrom()).toBe("sources <bin> --help");
  });
});
