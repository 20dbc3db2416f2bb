import { describe, expect, it } from "vitest";
import { eachGateHeader, GatePass } from "./gatePass.ts";

const collect = (result: { headers: Headers }) => {
  const seen: [string, string][] = [];
  eachGateHeader(result, (name, value) => seen.push([name, value]));
  return seen;
};

describe("GatePass", () => {
  it("gives adapters its header pairs and hosts the same headers as a Headers", () => {
    const pass = new GatePass([
      ["X-PAYMENT-RESPONSE", "eyJ9"],
      ["X-Tollgate-Units", "3"],
    ]);
    expect(collect(pass)).toEqual([
      ["X-PAYMENT-RESPONSE", "eyJ9"],
      ["X-Tollgate-Units", "3"],
    ]);
    expect(pass.headers.get("x-payment-response")).toBe("eyJ9");
    expect(pass.headers.get("x-tollgate-units")).toBe("3");
  });

  it("shows what a host changed in headers once it has read them", () => {
    const pass = new GatePass([["X-PAYMENT-RESPONSE", "eyJ9"]]);
    pass.headers.set("x-extra", "1");
    pass.headers.delete("x-payment-response");
    expect(collect(pass)).toEqual([["x-extra", "1"]]);
  });

  it("copies the headers of a plain pass result too, and completes nothing by default", async () => {
    const headers = new Headers({ "x-a": "1" });
    expect(collect({ headers })).toEqual([["x-a", "1"]]);
    const pass = new GatePass();
    expect(collect(pass)).toEqual([]);
    await expect(pass.complete(500)).resolves.toBeUndefined();
  });
});
