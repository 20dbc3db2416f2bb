/**
 * `tollgate provider` as its own process against a real facilitator on a devnet: the README's first
 * hour of a provider — register (devnet account or TOLLGATE_PROVIDER_KEY), save the key, and
 * `tollgate analytics` / `tollgate webhooks` working with no key in the environment.
 */
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startTestFacilitator, type TestFacilitator } from "../../../test/support/facilitatorHarness.ts";
import { type CliResult, runCli } from "../../../test/support/runCli.ts";
import { type DevnetFile, describeDevnet } from "../../chain/devnetFile.ts";
import { type Devnet, startDevnet } from "../../chain/startDevnet.ts";
import { PROVIDER_KEYS_FILE } from "../providerKeys.ts";

let devnet: Devnet;
let tf: TestFacilitator;
let dir: string;
/** Another facilitator: records every request, to show a saved key is never sent to it. */
let stranger: Server;
let strangerUrl: string;
const strangerRequests: { url: string | undefined; authorization: string | undefined }[] = [];

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  tf = await startTestFacilitator(devnet);
  dir = mkdtempSync(join(tmpdir(), "tollgate-provider-"));
  const file: DevnetFile = describeDevnet(devnet);
  writeFileSync(join(dir, "devnet.json"), JSON.stringify(file), { mode: 0o600 });
  stranger = createServer((req, res) => {
    strangerRequests.push({ url: req.url, authorization: req.headers.authorization });
    res.statusCode = 404;
    res.end();
  });
  await new Promise<void>((done) => stranger.listen(0, "127.0.0.1", done));
  const address = stranger.address();
  strangerUrl = `http://127.0.0.1:${typeof address === "object" && address !== null ? address.port : 0}`;
}, 120_000);

afterAll(async () => {
  stranger?.close();
  await tf?.stop();
  await devnet?.stop();
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true });
});

/** The CLI with only the Tollgate directory and the facilitator set: no API key anywhere. */
function tollgate(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return runCli(args, { env: { TOLLGATE_DIR: dir, TOLLGATE_FACILITATOR_URL: tf.url, ...env } });
}

/** No private key of the devnet, nor the one given, appears in what the command printed. */
function expectNoPrivateKey(result: CliResult, ...extra: string[]) {
  const printed = `${result.stdout}\n${result.stderr}`.toLowerCase();
  for (const key of [...devnet.accounts.map((a) => a.privateKey), ...extra]) {
    expect(printed).not.toContain(key.slice(2).toLowerCase());
  }
}

describe("tollgate provider as a process", { timeout: 180_000 }, () => {
  it("registers devnet account 1 with --save; analytics, webhooks and show then work with no key set", async () => {
    const provider = devnet.accounts[1]!.address;
    const registered = await tollgate(["provider", "register", "--account", "1", "--save"]);
    expect(registered.stderr).toBe("");
    expect(registered.code).toBe(0);
    expect(registered.stdout).toContain(`provider ${provider} (devnet account 1) registered at ${tf.url}`);
    // Saved, not printed: only the key's prefix is shown.
    expect(registered.stdout).not.toMatch(/tg_[A-Za-z0-9_-]{32}/);
    expectNoPrivateKey(registered);

    const file = join(dir, PROVIDER_KEYS_FILE);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const saved = JSON.parse(readFileSync(file, "utf8")) as {
      keys: Record<string, { provider: string; apiKey: string; key: { id: number } }>;
    };
    expect(Object.keys(saved.keys)).toEqual([tf.url]);
    expect(saved.keys[tf.url]!.provider).toBe(provider);
    expect(readFileSync(file, "utf8")).not.toContain(devnet.accounts[1]!.privateKey.slice(2));

    const analytics = await tollgate(["analytics"]);
    expect(analytics.stderr).toBe("");
    expect(analytics.code).toBe(0);
    expect(analytics.stdout).toContain(`${provider}: revenue by day`);

    const webhooks = await tollgate(["webhooks", "list"]);
    expect(webhooks.stderr).toBe("");
    expect(webhooks.code).toBe(0);

    const show = await tollgate(["provider", "show", "--json"]);
    expect(show.code).toBe(0);
    const account = JSON.parse(show.stdout) as { provider: string; keys: { id: number }[] };
    expect(account.provider).toBe(provider);
    expect(account.keys.map((k) => k.id)).toContain(saved.keys[tf.url]!.key.id);

    // The saved key belongs to that facilitator: pointed at another one, the command has no key to send.
    const elsewhere = await tollgate(["analytics", "--facilitator", strangerUrl]);
    expect(elsewhere.code).toBe(1);
    expect(elsewhere.stderr).toContain(`a provider API key for ${strangerUrl} is needed`);
    expect(elsewhere.stderr).toContain("tollgate provider register --save");
    expect(strangerRequests).toEqual([]);

    // Revoked: forgotten locally, and the facilitator refuses it.
    const revoke = await tollgate(["provider", "revoke", String(saved.keys[tf.url]!.key.id)]);
    expect(revoke.code).toBe(0);
    expect(revoke.stdout).toContain("forgot the saved copy");
    const after = await tollgate(["analytics"]);
    expect(after.code).toBe(1);
    expect(after.stderr).toContain("tollgate provider register --save");
  });

  it("prints the key once without --save, from TOLLGATE_PROVIDER_KEY, and the key works as TOLLGATE_API_KEY", async () => {
    const key = generatePrivateKey();
    const provider = privateKeyToAccount(key).address;
    const registered = await tollgate(["provider", "register"], { TOLLGATE_PROVIDER_KEY: key });
    expect(registered.stderr).toBe("");
    expect(registered.code).toBe(0);
    expect(registered.stdout).toContain(`provider ${provider} (key from TOLLGATE_PROVIDER_KEY)`);
    expectNoPrivateKey(registered, key);
    const apiKey = /(tg_[A-Za-z0-9_-]{32})/.exec(registered.stdout)?.[1];
    expect(apiKey).toBeDefined();

    const analytics = await tollgate(["analytics", "--json"], { TOLLGATE_API_KEY: apiKey! });
    expect(analytics.code).toBe(0);
    expect((JSON.parse(analytics.stdout) as { volume: { provider: string } }).volume.provider).toBe(provider);
  });

  it("refuses without a payout key, naming both ways to give one", async () => {
    const empty = mkdtempSync(join(tmpdir(), "tollgate-provider-empty-"));
    try {
      const result = await runCli(["provider", "register"], {
        env: { TOLLGATE_DIR: empty, TOLLGATE_FACILITATOR_URL: tf.url },
      });
      expect(result.code).toBe(1);
      expect(result.stderr).toContain("no payout key: set TOLLGATE_PROVIDER_KEY");
      expect(result.stderr).toContain("--account <n>");
      const badIndex = await tollgate(["provider", "register", "--account", "9"]);
      expect(badIndex.code).toBe(1);
      expect(badIndex.stderr).toContain("--account must be a devnet account index from 0 to 2");
    } finally {
      rmSync(empty, { recursive: true, force: true });
    }
  });
});
