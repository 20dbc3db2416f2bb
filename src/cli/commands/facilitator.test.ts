import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { loadFacilitatorConfig } from "../../facilitator/facilitatorConfig.ts";
import { proofKeyFromSeed } from "../../facilitator/proofKeys.ts";
import { isTollgateError } from "../../protocol/errors.ts";
import { facilitatorEnvironment } from "./facilitator.ts";

// A directory without devnet.json: nothing is defaulted from a local devnet.
const dir = mkdtempSync(join(tmpdir(), "tollgate-facilitator-config-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const seedA = `0x${"11".repeat(32)}`;
const seedB = `0x${"22".repeat(32)}`;
const environment = {
  TOLLGATE_DIR: dir,
  TOLLGATE_NETWORK: "eip155:8453",
  TOLLGATE_RPC_URL: "http://127.0.0.1:1",
  TOLLGATE_GAS_KEY: `0x${"ab".repeat(32)}`,
  TOLLGATE_PROOF_KEYS: `${seedA}, ${seedB}`,
  TOLLGATE_BATCH_SETTLER: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
};

function configFrom(argv: string[], env: Record<string, string | undefined> = environment) {
  return loadFacilitatorConfig(facilitatorEnvironment(argv, env).env);
}

function codeOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (error) {
    return isTollgateError(error) ? error.code : `not a TollgateError: ${String(error)}`;
  }
  return undefined;
}

describe("tollgate facilitator configuration", () => {
  it("lets flags override the environment for every setting that is not a secret", () => {
    const config = configFrom([
      "--rpc-url",
      "http://rpc.example:8545",
      "--network",
      "eip155:84532",
      "--confirmations",
      "3",
      "--database-url",
      "postgres://db.example/tollgate",
      "--port",
      "4100",
      "--host",
      "0.0.0.0",
    ]);
    expect(config).toMatchObject({
      rpcUrl: "http://rpc.example:8545",
      network: "eip155:84532",
      confirmations: 3,
      databaseUrl: "postgres://db.example/tollgate",
      port: 4100,
      host: "0.0.0.0",
    });
    // Base Sepolia's real USDC and its EIP-712 domain are the defaults on that network.
    expect(config.token).toMatchObject({
      address: "0x036CbD53842c5426634e7929541eC2318f3dCF7e",
      name: "USDC",
      version: "2",
    });
  });

  it("reads the proof keys in order (the first signs, the others stay published) and defaults the rest", () => {
    const config = configFrom([]);
    expect(config.token).toMatchObject({
      address: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
      name: "USD Coin",
      version: "2",
    });
    expect(config.proofKeys.map((k) => k.kid)).toEqual([
      proofKeyFromSeed(Buffer.from(seedA.slice(2), "hex")).kid,
      proofKeyFromSeed(Buffer.from(seedB.slice(2), "hex")).kid,
    ]);
    expect(config.confirmations).toBe(2);
    expect(config.databaseUrl).toBeUndefined();
  });

  it("waits for the network's confirmations unless the operator states them (src/chain/networks.ts)", () => {
    // A network whose token the table does not name needs it stated.
    const on = (network: string, extra: Record<string, string> = {}) =>
      configFrom(["--network", network], {
        ...environment,
        TOLLGATE_TOKEN: "0x1111111111111111111111111111111111111111",
        ...extra,
      }).confirmations;
    // Base: the receipt's block and one more; Base Sepolia and a devnet: the receipt's block.
    expect(configFrom([]).confirmations).toBe(2);
    expect(on("eip155:84532")).toBe(1);
    expect(on("eip155:31337")).toBe(1);
    // A network the table does not know: 1.
    expect(on("eip155:10")).toBe(1);
    // Stated, the setting wins, below the default as above it.
    expect(configFrom(["--confirmations", "1"]).confirmations).toBe(1);
    expect(configFrom([], { ...environment, TOLLGATE_CONFIRMATIONS: "1" }).confirmations).toBe(1);
    expect(on("eip155:84532", { TOLLGATE_CONFIRMATIONS: "5" })).toBe(5);
  });

  it("refuses bad settings with a typed error naming what to fix", () => {
    // The environment alone is complete, so each refusal below is caused by the one bad setting.
    expect(codeOf(() => configFrom([]))).toBeUndefined();
    expect(codeOf(() => configFrom(["--confirmations", "0"]))).toBe("InvalidRequest");
    expect(() => configFrom(["--confirmations", "0"])).toThrow(/TOLLGATE_CONFIRMATIONS/);
    expect(codeOf(() => configFrom(["--network", "base"]))).toBe("InvalidRequest");
    expect(codeOf(() => configFrom(["--rpc-url", "not a url"]))).toBe("InvalidRequest");
    expect(codeOf(() => configFrom([], { ...environment, TOLLGATE_PROOF_KEYS: "short" }))).toBe(
      "InvalidRequest",
    );
    expect(codeOf(() => configFrom([], { ...environment, TOLLGATE_GAS_KEY: "0x1234" }))).toBe(
      "InvalidRequest",
    );
    const { TOLLGATE_GAS_KEY: _, ...withoutGasKey } = environment;
    expect(() => configFrom([], withoutGasKey)).toThrow(/TOLLGATE_GAS_KEY/);
  });

  it("reads the fee share and the ETH price the minimum follows, or off, and refuses nonsense for them", () => {
    expect(configFrom([]).settlementFee).toEqual({});
    expect(configFrom(["--max-fee-share", "0.2", "--eth-price-usd", "3999.5"]).settlementFee).toEqual({
      maxFeeShare: "0.2",
      ethPriceUsd: "3999.5",
    });
    expect(configFrom([], { ...environment, TOLLGATE_MAX_FEE_SHARE: "1" }).settlementFee).toEqual({
      maxFeeShare: "1",
    });
    expect(configFrom(["--max-fee-share=off"]).settlementFee).toBe(false);
    for (const bad of ["0", "0.0", "1.5", "-0.1", "half", "50%"]) {
      expect(() => configFrom([`--max-fee-share=${bad}`]), bad).toThrow(/TOLLGATE_MAX_FEE_SHARE/);
    }
    for (const bad of ["0", "0.00", "-4000", "4e3", "$4000"]) {
      expect(() => configFrom([`--eth-price-usd=${bad}`]), bad).toThrow(/TOLLGATE_ETH_PRICE_USD/);
    }
  });

  it("reads the minimum amount and the rate limits, and refuses nonsense for them", () => {
    const config = configFrom(["--min-amount", "0.05"], {
      ...environment,
      TOLLGATE_RATE_LIMIT_CLIENT: "120:20",
      TOLLGATE_RATE_LIMIT_PAYER: "off",
      TOLLGATE_TRUSTED_PROXIES: "10.0.0.1, ::1",
    });
    expect(config.token.minAmount).toBe(50_000n);
    expect(config.rateLimits).toEqual({
      perClient: { capacity: 120, refillPerSecond: 20 },
      perPayer: false,
      trustedProxies: ["10.0.0.1", "::1"],
    });
    // Unset, the facilitator applies the network's defaults.
    expect(configFrom([]).token.minAmount).toBeUndefined();
    expect(configFrom([]).rateLimits).toEqual({
      perClient: undefined,
      perPayer: undefined,
      trustedProxies: undefined,
    });
    // The one money notation: bare digits are USDC, smallest units only as <digits>units.
    expect(configFrom(["--min-amount=50000units"]).token.minAmount).toBe(50_000n);
    expect(configFrom([], { ...environment, TOLLGATE_MIN_AMOUNT: "1" }).token.minAmount).toBe(1_000_000n);
    for (const bad of ["0", "-1", "0units", "1.5units", "0.0000001", "1e6", "ten"]) {
      expect(() => configFrom([`--min-amount=${bad}`]), bad).toThrow(/TOLLGATE_MIN_AMOUNT \(--min-amount\)/);
    }
    for (const bad of ["60", "60:0", "0:10", "lots"]) {
      expect(() => configFrom([], { ...environment, TOLLGATE_RATE_LIMIT_CLIENT: bad })).toThrow(
        /TOLLGATE_RATE_LIMIT_CLIENT/,
      );
    }
    expect(() => configFrom([], { ...environment, TOLLGATE_TRUSTED_PROXIES: "proxy.local" })).toThrow(
      /TOLLGATE_TRUSTED_PROXIES/,
    );
  });

  it("reads how long an outbox row may wait before the chain is asked whether it lost it, and refuses nonsense", () => {
    expect(configFrom([]).outboxStuckAfterMs).toBeUndefined();
    expect(
      configFrom([], { ...environment, TOLLGATE_OUTBOX_STUCK_AFTER_MS: "60000" }).outboxStuckAfterMs,
    ).toBe(60_000);
    for (const bad of ["soon", "10", "1.5", "-1", "99999999"]) {
      expect(() => configFrom([], { ...environment, TOLLGATE_OUTBOX_STUCK_AFTER_MS: bad })).toThrow(
        /TOLLGATE_OUTBOX_STUCK_AFTER_MS/,
      );
    }
  });

  it("reads the RPC batch size, 100 unless told, and refuses nonsense", () => {
    expect(configFrom([]).rpcBatchSize).toBe(100);
    expect(configFrom([], { ...environment, TOLLGATE_RPC_BATCH_SIZE: "1" }).rpcBatchSize).toBe(1);
    for (const bad of ["0", "many", "2.5", "1001"]) {
      expect(() => configFrom([], { ...environment, TOLLGATE_RPC_BATCH_SIZE: bad })).toThrow(
        /TOLLGATE_RPC_BATCH_SIZE/,
      );
    }
  });

  it("reads the maximum fee in gwei (flag or environment) into wei, none unless told, and refuses nonsense", () => {
    expect(configFrom([]).maxFeePerGas).toBeUndefined();
    expect(configFrom(["--max-fee-gwei", "0.5"]).maxFeePerGas).toBe(500_000_000n);
    expect(configFrom([], { ...environment, TOLLGATE_MAX_FEE_GWEI: "50" }).maxFeePerGas).toBe(
      50_000_000_000n,
    );
    for (const bad of ["0", "-1", "1e9", "fifty", "0.0000000001", "50 gwei"]) {
      expect(() => configFrom([`--max-fee-gwei=${bad}`])).toThrow(/TOLLGATE_MAX_FEE_GWEI/);
    }
  });

  it("reads the gas key's runway warning in hours (24 unless told)", () => {
    expect(configFrom([]).gasRunwayWarnSeconds).toBe(86_400);
    expect(configFrom(["--gas-runway-warn-hours", "72"]).gasRunwayWarnSeconds).toBe(259_200);
    expect(() => configFrom(["--gas-runway-warn-hours", "soon"])).toThrow(/TOLLGATE_GAS_RUNWAY_WARN_HOURS/);
  });

  it("has no flag for the keys", () => {
    expect(() => facilitatorEnvironment(["--gas-key", environment.TOLLGATE_GAS_KEY], environment)).toThrow();
    expect(() => facilitatorEnvironment(["--proof-keys", seedA], environment)).toThrow();
  });
});
