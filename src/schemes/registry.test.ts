import { describe, expect, it } from "vitest";
import { TollgateError } from "../protocol/errors.ts";
import { createSchemeRegistry, defineScheme } from "./registry.ts";
import type { Scheme } from "./types.ts";

const gatePart = (pricingTypes: string[]) => ({ pricingTypes, create: () => ({}) });
const scheme = (id: string, pricingTypes: string[] = []): Scheme =>
  defineScheme({ id, description: `${id} payments`, gate: gatePart(pricingTypes) });

describe("scheme registry", () => {
  it("finds schemes by id and gate pricing type, base before extra", () => {
    const registry = createSchemeRegistry([scheme("exact", ["one-time"])], [scheme("toy", ["toy"])]);
    expect(registry.schemes.map((s) => s.id)).toEqual(["exact", "toy"]);
    expect(registry.get("toy")?.id).toBe("toy");
    expect(registry.forPricingType("one-time")?.id).toBe("exact");
    expect(registry.forPricingType("toy")?.id).toBe("toy");
    expect(registry.get("nope")).toBeUndefined();
  });

  it("refuses an extra scheme that reuses a built-in id instead of replacing it", () => {
    expect(() => createSchemeRegistry([scheme("exact")], [scheme("exact")])).toThrow(
      /scheme "exact" is registered twice/,
    );
  });

  it("refuses two schemes compiling one pricing type", () => {
    expect(() =>
      createSchemeRegistry([scheme("exact", ["one-time"])], [scheme("toy", ["one-time"])]),
    ).toThrow(/pricing type "one-time" of scheme "toy" is already compiled by "exact"/);
  });

  it("refuses malformed schemes with InvalidRequest naming the problem", () => {
    const bad = [
      { id: "Bad id", description: "x", gate: gatePart([]) },
      { id: "toy", description: "", gate: gatePart([]) },
      { id: "toy", description: "x" },
      { id: "toy", description: "x", client: { payable: () => true } },
    ];
    for (const value of bad) {
      let error: unknown;
      try {
        createSchemeRegistry([], [value as unknown as Scheme]);
      } catch (caught) {
        error = caught;
      }
      expect(error).toBeInstanceOf(TollgateError);
      expect((error as TollgateError).code).toBe("InvalidRequest");
    }
    expect(() => createSchemeRegistry([], "toy" as unknown as Scheme[])).toThrow(/expected an array/);
  });
});
