import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createPublicClient, http } from "viem";
import { afterAll, describe, expect, it } from "vitest";
import { fiatTokenV2_2Abi } from "../chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import { DevnetFileSchema, devnetCommand, parseDuration } from "./devnet.ts";

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const address = server.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

function capture() {
  const lines: string[] = [];
  return { lines, out: { log: (l: string) => lines.push(l), error: (l: string) => lines.push(l) } };
}

describe("parseDuration", () => {
  it("reads days, hours, minutes and bare seconds", () => {
    expect(parseDuration("30d")).toBe(2_592_000);
    expect(parseDuration("12h")).toBe(43_200);
    expect(parseDuration("90m")).toBe(5_400);
    expect(parseDuration("3600")).toBe(3_600);
  });

  it("rejects anything else", () => {
    expect(() => parseDuration("1.5d")).toThrow(/duration/);
    expect(() => parseDuration("-3h")).toThrow(/duration/);
    expect(() => parseDuration("soon")).toThrow(/duration/);
  });
});

describe("tollgate devnet", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-devnet-"));
  afterAll(async () => {
    await devnetCommand(["down", "--dir", dir], capture().out);
    rmSync(dir, { recursive: true, force: true });
  });

  it("up writes devnet.json, advance moves chain time, down stops it", async () => {
    const port = await freePort();
    const up = capture();
    expect(await devnetCommand(["up", "--dir", dir, "--port", String(port), "--accounts", "2"], up.out)).toBe(
      0,
    );
    const file = DevnetFileSchema.parse(JSON.parse(readFileSync(join(dir, "devnet.json"), "utf8")));
    expect(file.rpcUrl).toBe(`http://127.0.0.1:${port}`);
    expect(file.accounts).toHaveLength(2);
    expect(file.token).toEqual({ kind: "usdc", name: "USD Coin", version: "2" });
    expect(up.lines.join("\n")).toContain(file.contracts.subscriptionManager);

    const again = capture();
    expect(await devnetCommand(["up", "--dir", dir, "--port", String(port)], again.out)).toBe(1);
    expect(again.lines.join("\n")).toMatch(/already running/);

    const before = capture();
    await devnetCommand(["status", "--dir", dir], before.out);
    const timeBefore = BigInt(/chain time ([0-9]+)/.exec(before.lines[0]!)![1]!);
    expect(before.lines[1]).toBe(
      `  token                ${file.contracts.usd} (USDC, Circle's FiatToken v2.2; EIP-712 domain "USD Coin" version 2)`,
    );
    const advanced = capture();
    expect(await devnetCommand(["advance", "12h", "--dir", dir], advanced.out)).toBe(0);
    const timeAfter = BigInt(/chain time ([0-9]+)/.exec(advanced.lines[0]!)![1]!);
    expect(timeAfter - timeBefore).toBeGreaterThanOrEqual(43_200n);
    // The chain clock is now ahead of the wall clock: the command says what that means for payments.
    expect(advanced.lines[1]).toMatch(/one-time payments are refused as expired/);

    expect(await devnetCommand(["down", "--dir", dir], capture().out)).toBe(0);
    expect(existsSync(join(dir, "devnet.json"))).toBe(false);
    const after = capture();
    expect(await devnetCommand(["status", "--dir", dir], after.out)).toBe(1);
  });
});

describe("tollgate devnet up --token usdc", () => {
  const dir = mkdtempSync(join(tmpdir(), "tollgate-devnet-usdc-"));
  afterAll(async () => {
    await devnetCommand(["down", "--dir", dir], capture().out);
    rmSync(dir, { recursive: true, force: true });
  });

  it("settles in Circle's FiatToken v2.2 when the flag names it, every account funded, and refuses any other token", async () => {
    const port = await freePort();
    const up = capture();
    const args = ["up", "--dir", dir, "--port", String(port), "--accounts", "2", "--balance", "25"];
    expect(await devnetCommand([...args, "--token", "usdc"], up.out)).toBe(0);
    const file = DevnetFileSchema.parse(JSON.parse(readFileSync(join(dir, "devnet.json"), "utf8")));
    expect(up.lines.join("\n")).toContain(`USDC (FiatToken)     ${file.contracts.usd}`);
    expect(file.token).toEqual({ kind: "usdc", name: "USD Coin", version: "2" });
    const status = capture();
    expect(await devnetCommand(["status", "--dir", dir], status.out)).toBe(0);
    expect(status.lines[1]).toBe(
      `  token                ${file.contracts.usd} (USDC, Circle's FiatToken v2.2; EIP-712 domain "USD Coin" version 2)`,
    );
    const client = createPublicClient({ transport: http(file.rpcUrl) });
    const read = { address: file.contracts.usd as `0x${string}`, abi: fiatTokenV2_2Abi } as const;
    // currency() is FiatToken's own function: the token is Circle's code, not a plain ERC-20.
    expect(await client.readContract({ ...read, functionName: "currency" })).toBe("USD");
    expect(await client.readContract({ ...read, functionName: "name" })).toBe("USD Coin");
    for (const { address } of file.accounts) {
      expect(
        await client.readContract({ ...read, functionName: "balanceOf", args: [address as `0x${string}`] }),
      ).toBe(25_000_000n);
    }
    expect(await devnetCommand(["down", "--dir", dir], capture().out)).toBe(0);
    await expect(devnetCommand([...args, "--token", "dai"], capture().out)).rejects.toThrow(
      /bad --token dai \(a devnet settles in usdc\)/,
    );
  });
});
