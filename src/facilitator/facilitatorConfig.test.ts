/**
 * Where the facilitator's token gets its EIP-712 domain, which every payer's signature commits to: the
 * environment, then devnet.json, then the network's table for that network's own USDC, and for any other
 * token the token itself on chain, never an assumed "USD Coin"/"2". On a real devnet (FiatToken v2.2).
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createPublicClient, http } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { deployFiatToken } from "../chain/actions/usdc/deployFiatToken.ts";
import { describeDevnet, writeDevnetFile } from "../chain/devnetFile.ts";
import { type Devnet, startDevnet } from "../chain/startDevnet.ts";
import { type ConfiguredToken, loadFacilitatorConfig, resolveTokenDomain } from "./facilitatorConfig.ts";

const dir = mkdtempSync(join(tmpdir(), "tollgate-facilitator-domain-"));
let devnet: Devnet;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 2 });
});
afterAll(async () => {
  await devnet?.stop();
  rmSync(dir, { recursive: true, force: true });
});

/** A configuration for Base with every required setting and `extra` on top. */
const onBase = (extra: Record<string, string>) =>
  loadFacilitatorConfig({
    TOLLGATE_DIR: dir,
    TOLLGATE_NETWORK: "eip155:8453",
    TOLLGATE_RPC_URL: "http://127.0.0.1:1",
    TOLLGATE_GAS_KEY: `0x${"ab".repeat(32)}`,
    TOLLGATE_PROOF_KEYS: `0x${"11".repeat(32)}`,
    TOLLGATE_BATCH_SETTLER: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
    ...extra,
  });

describe("the facilitator token's EIP-712 domain", () => {
  it("is not assumed for a token the network's table does not describe, and is taken from the environment as given", () => {
    const other = "0x1111111111111111111111111111111111111111";
    expect(onBase({ TOLLGATE_TOKEN: other }).token).toMatchObject({
      address: other,
      name: undefined,
      version: undefined,
    });
    expect(
      onBase({ TOLLGATE_TOKEN: other, TOLLGATE_TOKEN_NAME: "Bridged USDC", TOLLGATE_TOKEN_VERSION: "1" })
        .token,
    ).toMatchObject({ name: "Bridged USDC", version: "1" });
  });

  it("comes from devnet.json on the devnet it describes", () => {
    const devnetDir = join(dir, "devnet");
    // A domain other than the devnet's real one: only the file can be its source.
    const file = describeDevnet({ ...devnet, token: { kind: "usdc", name: "USDC", version: "2" } });
    writeDevnetFile(join(devnetDir, "devnet.json"), file);
    const config = loadFacilitatorConfig({ TOLLGATE_DIR: devnetDir });
    expect(config.token).toMatchObject({ address: devnet.contracts.usd, name: "USDC", version: "2" });
    // A file written before devnets recorded their token leaves the domain to the chain.
    const { token: _, ...older } = file;
    writeDevnetFile(join(devnetDir, "devnet.json"), older);
    expect(loadFacilitatorConfig({ TOLLGATE_DIR: devnetDir }).token).toMatchObject({
      name: undefined,
      version: undefined,
    });
  });

  it("is read from the token on chain where the configuration does not say it, keeping what it does say", async () => {
    // A USDC under Base Sepolia's domain name, so the read cannot be mistaken for a default.
    const { token } = await deployFiatToken(devnet.walletClient(devnet.deployer), {
      admin: "0x000000000000000000000000000000000000ad03",
      name: "USDC",
    });
    const configured: ConfiguredToken = {
      address: token,
      name: undefined,
      version: undefined,
      symbol: "USDC",
      decimals: 6,
    };
    expect(await resolveTokenDomain(configured, devnet.publicClient)).toEqual({
      ...configured,
      name: "USDC",
      version: "2",
    });
    expect(await resolveTokenDomain({ ...configured, name: "Given" }, devnet.publicClient)).toMatchObject({
      name: "Given",
      version: "2",
    });
  });

  it("refuses at start-up an address that does not answer name() and version(), and says what to set", async () => {
    const configured: ConfiguredToken = {
      address: devnet.contracts.batchSettler,
      name: undefined,
      version: undefined,
      symbol: "USDC",
      decimals: 6,
    };
    await expect(resolveTokenDomain(configured, devnet.publicClient)).rejects.toMatchObject({
      code: "InvalidRequest",
      message: expect.stringMatching(/TOLLGATE_TOKEN_NAME and TOLLGATE_TOKEN_VERSION/),
    });
    const unreachable = createPublicClient({ transport: http("http://127.0.0.1:1", { retryCount: 0 }) });
    await expect(
      resolveTokenDomain({ ...configured, address: devnet.contracts.usd }, unreachable),
    ).rejects.toMatchObject({ code: "ChainUnavailable" });
  });
});

describe("the facilitator's eth_getLogs range", () => {
  it("is 2000 blocks unless TOLLGATE_RPC_LOGS_RANGE says otherwise", () => {
    expect(onBase({}).logsRange).toBe(2000);
    expect(onBase({ TOLLGATE_RPC_LOGS_RANGE: "500" }).logsRange).toBe(500);
  });

  it("refuses a range that is not a positive whole number of blocks", () => {
    expect(() => onBase({ TOLLGATE_RPC_LOGS_RANGE: "0" })).toThrow(/TOLLGATE_RPC_LOGS_RANGE/);
    expect(() => onBase({ TOLLGATE_RPC_LOGS_RANGE: "many" })).toThrow(/TOLLGATE_RPC_LOGS_RANGE/);
  });
});

describe("the facilitator's RPC URLs", () => {
  it("reads TOLLGATE_RPC_URL as one URL or several, comma-separated, in order of preference", () => {
    expect(onBase({}).rpcUrls).toEqual(["http://127.0.0.1:1"]);
    const several = onBase({
      TOLLGATE_RPC_URL:
        "https://base-mainnet.g.alchemy.com/v2/k1k1k1k1k1k1k1k1k1k1, https://mainnet.base.org",
    });
    expect(several.rpcUrls).toEqual([
      "https://base-mainnet.g.alchemy.com/v2/k1k1k1k1k1k1k1k1k1k1",
      "https://mainnet.base.org",
    ]);
    expect(several.rpcUrl).toBe("https://base-mainnet.g.alchemy.com/v2/k1k1k1k1k1k1k1k1k1k1");
  });

  it("refuses an entry that is not an http(s) URL, naming it with its key masked", () => {
    const refuse = () =>
      onBase({
        TOLLGATE_RPC_URL:
          "https://mainnet.base.org,base-mainnet.infura.io/v3/0123456789abcdef0123456789abcdef",
      });
    expect(refuse).toThrow(/TOLLGATE_RPC_URL: entry 2 \(\*\*\*\) is not an http\(s\) URL/);
    expect(refuse).not.toThrow(/0123456789abcdef/);
  });
});
