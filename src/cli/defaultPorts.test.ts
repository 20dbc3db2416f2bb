import { describe, expect, it } from "vitest";
import { DEFAULT_PORTS } from "./defaultPorts.ts";

describe("DEFAULT_PORTS", () => {
  it("gives every server the CLI starts a port of its own", () => {
    const ports = Object.values(DEFAULT_PORTS);
    expect(Object.keys(DEFAULT_PORTS).sort()).toEqual(["dashboard", "devnet", "facilitator", "market"]);
    for (const port of ports) expect(Number.isInteger(port) && port > 0 && port < 65_536).toBe(true);
    expect(new Set(ports).size).toBe(ports.length);
  });
});
