import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "./canonicalJson.ts";

/** The same JSON value with every object's keys inserted in a shuffled order. */
function shuffled(value: unknown, random: () => number): unknown {
  if (Array.isArray(value)) return value.map((item) => shuffled(item, random));
  if (value === null || typeof value !== "object") return value;
  const entries = Object.entries(value);
  for (let i = entries.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [entries[i], entries[j]] = [entries[j]!, entries[i]!];
  }
  return Object.fromEntries(entries.map(([k, v]) => [k, shuffled(v, random)]));
}

describe("canonicalJson", () => {
  it("sorts keys at every depth and writes no whitespace", () => {
    expect(canonicalJson({ b: 1, a: { d: [3, { z: null, y: "x" }], c: true } })).toBe(
      '{"a":{"c":true,"d":[3,{"y":"x","z":null}]},"b":1}',
    );
  });

  it("orders keys by UTF-16 code unit, not by locale", () => {
    expect(canonicalJson({ b: 0, B: 0, a: 0, é: 0, "\u{1F600}": 0, "\uFB01": 0 })).toBe(
      '{"B":0,"a":0,"b":0,"é":0,"\u{1F600}":0,"\uFB01":0}',
    );
  });

  it("drops undefined properties as JSON.stringify does", () => {
    expect(canonicalJson({ a: undefined, b: 1 })).toBe('{"b":1}');
  });

  it("writes numbers and strings as JSON.stringify does", () => {
    expect(canonicalJson([-0, 1e21, 0.1, 1763800000, 'a"\\\n\u2028'])).toBe(
      JSON.stringify([0, 1e21, 0.1, 1763800000, 'a"\\\n\u2028']),
    );
  });

  it("is stable under key order and parses back to the same value", () => {
    fc.assert(
      fc.property(fc.jsonValue(), fc.integer(), (value, seed) => {
        let state = seed;
        const random = () => {
          state = (state * 1103515245 + 12345) & 0x7fffffff;
          return state / 0x80000000;
        };
        const text = canonicalJson(value);
        expect(canonicalJson(shuffled(value, random))).toBe(text);
        expect(canonicalJson(JSON.parse(text))).toBe(text);
        expect(JSON.parse(text)).toEqual(JSON.parse(JSON.stringify(value)));
      }),
      { numRuns: 500 },
    );
  });

  it.each([
    ["NaN", Number.NaN],
    ["Infinity", Number.POSITIVE_INFINITY],
    ["bigint", 1n],
    ["a function", () => 1],
    ["a symbol", Symbol("s")],
    ["top-level undefined", undefined],
    ["undefined in an array", [undefined]],
    ["a Date", new Date(0)],
    ["a Map", new Map()],
    ["a nested bigint", { a: { b: [1n] } }],
  ])("refuses %s with InvalidEncoding", (_name, value) => {
    expect(() => canonicalJson(value)).toThrow(expect.objectContaining({ code: "InvalidEncoding" }));
  });

  it("refuses cycles and absurd nesting", () => {
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    expect(() => canonicalJson(cyclic)).toThrow(expect.objectContaining({ code: "InvalidEncoding" }));
    let deep: unknown = 0;
    for (let i = 0; i < 100; i++) deep = [deep];
    expect(() => canonicalJson(deep)).toThrow(expect.objectContaining({ code: "InvalidEncoding" }));
  });

  it("accepts a shared, non-cyclic reference twice", () => {
    const shared = { x: 1 };
    expect(canonicalJson({ a: shared, b: shared })).toBe('{"a":{"x":1},"b":{"x":1}}');
  });
});
