import { existsSync, mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../protocol/clock.ts";
import { budgetCommand } from "./commands/budget.ts";
import { marketCommand } from "./commands/market.ts";
import { inlineNegativeValues, parseCount, parseMoney } from "./money.ts";

/** Every money flag the CLI reads, with whether zero means something there. */
const MONEY_FLAGS = [
  { flag: "--total", allowZero: false },
  { flag: "--daily", allowZero: false },
  { flag: "--per-call", allowZero: false },
  { flag: "--max-subscription", allowZero: true },
  { flag: "--provider 0x90F79bf6EB2c4f870365E785982E1f101E93b906", allowZero: true },
  { flag: "--approve-above", allowZero: true },
  { flag: "--amount", allowZero: false },
  { flag: "--overage", allowZero: true },
  { flag: "--max-price", allowZero: false },
  { flag: "--balance", allowZero: true },
] as const;

/** The same text read by every flag: a value in smallest units, or the refusal's words. */
const TABLE: [text: string, expected: bigint | RegExp][] = [
  ["50000", 50_000_000_000n],
  ["50000units", 50_000n],
  ["500000 units", 500_000n],
  ["0.5", 500_000n],
  ["0.50 USDC", 500_000n],
  ["5usdc", 5_000_000n],
  [" 2.5 ", 2_500_000n],
  ["0.000001", 1n],
  ["1units", 1n],
  ["-1", /"-1" is negative/],
  ["-0.5", /"-0.5" is negative/],
  ["abc", /"abc" is not an amount: amounts are USDC .* <digits>units/],
  ["1e6", /"1e6" is not an amount/],
  ["0x10", /"0x10" is not an amount/],
  ["", /is empty/],
  ["1.0000001", /"1.0000001" has more than 6 decimals: as USDC .* smallest units are whole numbers/],
  [
    "1.5units",
    /"1.5units" is not a whole number of smallest units \(if you meant 1.5 USDC, that is 1500000units\)/,
  ],
  ["5 eth", /"5 eth" is not an amount/],
  [`${2n ** 256n}units`, /above the largest amount/],
];

describe("parseMoney", () => {
  for (const { flag, allowZero } of MONEY_FLAGS) {
    describe(flag, () => {
      it.each(TABLE)("reads %j", (text, expected) => {
        if (typeof expected === "bigint") {
          expect(parseMoney(text, flag, { allowZero })).toBe(expected);
        } else {
          expect(() => parseMoney(text, flag, { allowZero })).toThrow(
            expect.objectContaining({ code: "InvalidRequest", message: expect.stringMatching(expected) }),
          );
        }
      });

      it("names the flag in every refusal", () => {
        for (const [text, expected] of TABLE) {
          if (typeof expected === "bigint") continue;
          expect(() => parseMoney(text, flag, { allowZero })).toThrow(`${flag}: "`);
        }
      });

      it(allowZero ? "takes zero" : "refuses zero", () => {
        for (const zero of ["0", "0.00", "0units", "0 USDC"]) {
          if (allowZero) expect(parseMoney(zero, flag, { allowZero })).toBe(0n);
          else
            expect(() => parseMoney(zero, flag, { allowZero })).toThrow(
              `${flag}: "${zero}" must be above zero`,
            );
        }
      });
    });
  }

  it("reads a token's own decimals, units staying its smallest unit", () => {
    expect(parseMoney("1.5", "--amount", { decimals: 2 })).toBe(150n);
    expect(parseMoney("150units", "--amount", { decimals: 2 })).toBe(150n);
    expect(() => parseMoney("1.505", "--amount", { decimals: 2 })).toThrow(/more than 2 decimals/);
  });

  it("names an environment variable or config key as its source", () => {
    expect(() => parseMoney("abc", "TOLLGATE_SOMETHING")).toThrow(
      'TOLLGATE_SOMETHING: "abc" is not an amount',
    );
  });
});

describe("parseCount (--included)", () => {
  it.each([
    ["0", 0n],
    ["1000", 1000n],
    [" 3 ", 3n],
  ])("reads %j as %s", (text, expected) => {
    expect(parseCount(text, "--included")).toBe(expected);
  });

  it.each(["2.5", "-1", "abc", "", "1e3", "5units"])("refuses %j naming the flag", (text) => {
    expect(() => parseCount(text, "--included")).toThrow(
      expect.objectContaining({
        code: "InvalidRequest",
        message: expect.stringMatching(/^--included: ".*" is not a count/),
      }),
    );
  });
});

describe("inlineNegativeValues", () => {
  it("hands a negative amount to the flag instead of letting parseArgs call it ambiguous", () => {
    const args = inlineNegativeValues(["create", "--amount", "-1", "--interval", "30d"], ["--amount"]);
    expect(args).toEqual(["create", "--amount=-1", "--interval", "30d"]);
    const { values } = parseArgs({
      args,
      allowPositionals: true,
      options: { amount: { type: "string" }, interval: { type: "string" } },
    });
    expect(values.amount).toBe("-1");
  });

  it("leaves other flags and options alone", () => {
    expect(inlineNegativeValues(["--total", "--json", "--limit", "-3"], ["--total"])).toEqual([
      "--total",
      "--json",
      "--limit",
      "-3",
    ]);
  });
});

describe("the commands' money flags", () => {
  const out = { log: () => {}, error: () => {} };
  const clock = createFixedClock(Date.UTC(2026, 11, 1));

  it("budget set refuses --total -1, 0 and 50000.0000001 naming the flag, before its store is opened", async () => {
    const dir = join(mkdtempSync(join(tmpdir(), "tollgate-money-")), "never-opened");
    const set = (...flags: string[]) =>
      budgetCommand(["set", "researcher", ...flags], { env: { TOLLGATE_DIR: dir }, out, clock });
    await expect(set("--total", "-1")).rejects.toThrow('--total: "-1" is negative');
    await expect(set("--total", "0")).rejects.toThrow('--total: "0" must be above zero');
    await expect(set("--daily", "50000.0000001")).rejects.toThrow(
      '--daily: "50000.0000001" has more than 6 decimals',
    );
    await expect(set("--approve-above", "abc")).rejects.toThrow('--approve-above: "abc" is not an amount');
    expect(existsSync(dir)).toBe(false);
  });

  it("market search sends --max-price to the market in smallest units, and refuses -1 without asking it", async () => {
    const asked: string[] = [];
    const fetch = async (input: RequestInfo | URL) => {
      asked.push(String(input));
      return Response.json({ results: [], limit: 20, offset: 0 });
    };
    const search = (...flags: string[]) =>
      marketCommand(["search", "weather", ...flags, "--market", "http://127.0.0.1:4030"], {
        env: {},
        out,
        fetch,
        clock,
      });
    expect(await search("--max-price", "0.05")).toBe(0);
    expect(await search("--max-price", "50000units")).toBe(0);
    expect(await search("--max-price", "50000")).toBe(0);
    expect(asked.map((url) => new URL(url).searchParams.get("maxPrice"))).toEqual([
      "50000",
      "50000",
      "50000000000",
    ]);
    await expect(search("--max-price", "-1")).rejects.toThrow('--max-price: "-1" is negative');
    await expect(search("--max-price", "0")).rejects.toThrow('--max-price: "0" must be above zero');
    expect(asked).toHaveLength(3);
  });
});
