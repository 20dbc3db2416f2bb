import { describe, expect, it } from "vitest";
import { defaultConfirmations, getNetworkConfig } from "./networks.ts";

describe("networks", () => {
  it("knows USDC and its EIP-712 domain on Base and Base Sepolia", () => {
    expect(getNetworkConfig("eip155:8453")?.tokenDomain).toEqual({ name: "USD Coin", version: "2" });
    expect(getNetworkConfig("eip155:84532")?.tokenDomain).toEqual({ name: "USDC", version: "2" });
    expect(getNetworkConfig("eip155:84532")?.usdc).toBe("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
    expect(getNetworkConfig("eip155:31337")?.chain.id).toBe(31337);
    expect(getNetworkConfig("eip155:1")).toBeUndefined();
  });

  it("defaults the confirmations per network: 2 on Base, 1 on Base Sepolia, a devnet and networks it does not know", () => {
    expect(defaultConfirmations("eip155:8453")).toBe(2);
    expect(defaultConfirmations("eip155:84532")).toBe(1);
    expect(defaultConfirmations("eip155:31337")).toBe(1);
    expect(defaultConfirmations("eip155:1")).toBe(1);
  });
});
