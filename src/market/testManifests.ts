/**
 * Sellers and manifests for the market's tests. The keys are anvil's well-known development keys:
 * public test keys, never real ones.
 */
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import type { Capability, ManifestInput } from "../protocol/manifest.ts";

export const testSellers: readonly PrivateKeyAccount[] = [
  "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
  "0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a",
  "0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6",
  "0x47e179ec197488593b187f80a8eb0da30f8e8b8ca6d6b3a3b5d8a0b27c2e5f3a",
].map((key) => privateKeyToAccount(key as `0x${string}`));

export function testCapability(
  name: string,
  description: string,
  pricing: Capability["pricing"] = [{ type: "one-time", amount: "20000" }],
): ManifestInput["capabilities"][number] {
  return {
    name,
    description,
    method: "POST",
    path: `/v1/${name}`,
    input: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
    output: { type: "object" },
    pricing,
  };
}

/** A manifest of `seller` with the given capabilities, issued at `issuedAt` (Unix seconds). */
export function testManifest(
  seller: { address: string },
  issuedAt: number,
  capabilities: ManifestInput["capabilities"],
  overrides: Partial<ManifestInput> = {},
): ManifestInput {
  return {
    version: "1",
    name: "test-seller",
    description: "A seller in Tollgate's market tests.",
    seller: { payTo: seller.address },
    baseUrl: "http://127.0.0.1:5100",
    facilitator: "http://127.0.0.1:4020",
    network: "eip155:31337",
    token: "0x5FbDB2315678afecb367f032d93F642f64180aa3",
    capabilities,
    issuedAt,
    ...overrides,
  };
}
