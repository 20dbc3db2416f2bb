import { privateKeyToAccount } from "viem/accounts";
import { describe, expect, it } from "vitest";
import { canonicalJson } from "./canonicalJson.ts";
import {
  type Capability,
  capabilityUrl,
  cheapestPerCallPrice,
  type ManifestInput,
  type ManifestPricing,
  ManifestSchema,
  manifestMessage,
  parseDiscoveryDocument,
  perCallPrice,
  planTermsOfPricing,
  signManifest,
  verifyManifestSignature,
} from "./manifest.ts";

// anvil's well-known development keys #1 and #2: public test keys, never real ones.
const seller = privateKeyToAccount("0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d");
const other = privateKeyToAccount("0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a");

const manager = "0x9fe46736679d2d9a65f0992f2272de9f3c7fa6e0";

function manifestOf(overrides: Partial<ManifestInput> = {}): ManifestInput {
  return {
    version: "1",
    name: "weather-desk",
    description: "Forecasts and climate data.",
    seller: { payTo: seller.address.toLowerCase(), name: "Weather Desk" },
    baseUrl: "http://127.0.0.1:5100/",
    facilitator: "http://127.0.0.1:4020",
    network: "eip155:31337",
    token: "0x5fbdb2315678afecb367f032d93f642f64180aa3",
    capabilities: [
      {
        name: "forecast",
        description: "Seven-day forecast for a city.",
        method: "POST",
        path: "/v1/forecast",
        input: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
        output: { type: "object" },
        pricing: [
          { type: "one-time", amount: "20000" },
          {
            type: "subscription",
            planId: "3",
            amount: "9000000",
            interval: 2_592_000,
            includedUnits: 0,
            overageUnitPrice: "0",
            manager,
          },
        ],
      },
    ],
    issuedAt: 1_763_800_000,
    ...overrides,
  };
}

function capability(overrides: Partial<Capability>): ManifestInput["capabilities"][number] {
  return { ...manifestOf().capabilities[0]!, ...overrides };
}

describe("ManifestSchema", () => {
  it("accepts a manifest and checksums its addresses", () => {
    const parsed = ManifestSchema.parse(manifestOf());
    expect(parsed.seller.payTo).toBe(seller.address);
    expect(parsed.token).toBe("0x5FbDB2315678afecb367f032d93F642f64180aa3");
  });

  it("parses its own output to the same canonical text", () => {
    const once = ManifestSchema.parse(manifestOf());
    expect(canonicalJson(ManifestSchema.parse(once))).toBe(canonicalJson(once));
  });

  it.each([
    ["a name with a space", { name: "get weather" }],
    ["a name longer than 64 characters", { name: "a".repeat(65) }],
    ["an empty name", { name: "" }],
    ["an input schema that is not an object schema", { input: { type: "string" } }],
    ["a path without a leading slash", { path: "v1/forecast" }],
    ["a path with a query", { path: "/v1/forecast?x=1" }],
    ["no pricing", { pricing: [] }],
    ["an amount with a decimal point", { pricing: [{ type: "one-time" as const, amount: "0.5" }] }],
    ["an unknown method", { method: "TRACE" as never }],
    ["a description with a NUL", { description: "bad\u0000text" }],
  ])("refuses a capability with %s", (_, overrides) => {
    const result = ManifestSchema.safeParse(manifestOf({ capabilities: [capability(overrides)] }));
    expect(result.success).toBe(false);
  });

  it("refuses two capabilities with one name", () => {
    const result = ManifestSchema.safeParse(
      manifestOf({ capabilities: [capability({}), capability({ path: "/v2/forecast" })] }),
    );
    expect(result.success).toBe(false);
    expect(result.error?.issues[0]?.path).toEqual(["capabilities", 1, "name"]);
  });

  it("refuses a manifest without a seller address, a facilitator or an http base URL", () => {
    expect(ManifestSchema.safeParse(manifestOf({ seller: { payTo: "0x1234" } })).success).toBe(false);
    expect(ManifestSchema.safeParse({ ...manifestOf(), facilitator: undefined }).success).toBe(false);
    expect(ManifestSchema.safeParse(manifestOf({ baseUrl: "ftp://example.com" })).success).toBe(false);
  });

  it("allows tabs and newlines in descriptions but not in names", () => {
    expect(ManifestSchema.safeParse(manifestOf({ description: "line one\n\tline two" })).success).toBe(true);
    expect(ManifestSchema.safeParse(manifestOf({ name: "two\nlines" })).success).toBe(false);
  });
});

describe("signManifest and verifyManifestSignature", () => {
  it("round-trips: the payout key's signature verifies and names the seller", async () => {
    const envelope = await signManifest(seller, manifestOf());
    const check = await verifyManifestSignature(envelope);
    expect(check).toMatchObject({ valid: true, seller: seller.address });
  });

  it("signs the canonical JSON of the normalized manifest", async () => {
    const envelope = await signManifest(seller, manifestOf());
    const expected = await seller.signMessage({ message: canonicalJson(ManifestSchema.parse(manifestOf())) });
    expect(envelope.signature).toBe(expected);
    expect(manifestMessage(envelope.manifest)).toBe(canonicalJson(envelope.manifest));
  });

  it("refuses to sign with a key other than seller.payTo", async () => {
    await expect(signManifest(other, manifestOf())).rejects.toMatchObject({ code: "InvalidRequest" });
  });

  it("reports a signature by another key as wrong_signer", async () => {
    const manifest = ManifestSchema.parse(manifestOf());
    const signature = await other.signMessage({ message: manifestMessage(manifest) });
    expect(await verifyManifestSignature({ manifest, signature })).toEqual({
      valid: false,
      reason: "wrong_signer",
    });
  });

  it("reports a manifest changed after signing as wrong_signer", async () => {
    const envelope = await signManifest(seller, manifestOf());
    const tampered = {
      ...envelope.manifest,
      capabilities: [{ ...envelope.manifest.capabilities[0]!, pricing: [{ type: "one-time", amount: "1" }] }],
    };
    expect(await verifyManifestSignature({ manifest: tampered, signature: envelope.signature })).toEqual({
      valid: false,
      reason: "wrong_signer",
    });
  });

  it("verifies the manifest as received, even when it is not in normalized form", async () => {
    const raw = { ...manifestOf(), extension: { note: "a field this version does not know" } };
    const signature = await seller.signMessage({ message: canonicalJson(raw) });
    expect(await verifyManifestSignature({ manifest: raw, signature })).toMatchObject({ valid: true });
    // The parsed form drops the unknown field and checksums addresses: a different message.
    expect(await verifyManifestSignature({ manifest: ManifestSchema.parse(raw), signature })).toMatchObject({
      valid: false,
      reason: "wrong_signer",
    });
  });

  it("reports missing and malformed signatures and malformed manifests", async () => {
    const manifest = ManifestSchema.parse(manifestOf());
    expect(await verifyManifestSignature({ manifest })).toEqual({
      valid: false,
      reason: "missing_signature",
    });
    expect(await verifyManifestSignature({ manifest, signature: "0x1234" })).toEqual({
      valid: false,
      reason: "malformed_signature",
    });
    // Right length, but r = 0: no key recovers from it.
    expect(await verifyManifestSignature({ manifest, signature: `0x${"0".repeat(128)}1b` })).toEqual({
      valid: false,
      reason: "malformed_signature",
    });
    const { signature } = await signManifest(seller, manifestOf());
    expect(await verifyManifestSignature({ manifest: { ...manifest, version: "2" }, signature })).toEqual({
      valid: false,
      reason: "malformed_manifest",
    });
  });
});

describe("prices", () => {
  const plan = { planId: "1", interval: 86_400, overageUnitPrice: "0" } as const;

  it.each<[string, ManifestPricing, bigint]>([
    ["one-time: its amount", { type: "one-time", amount: "20000" }, 20_000n],
    [
      "subscription: one period",
      { type: "subscription", ...plan, amount: "9000000", includedUnits: 1000 },
      9_000_000n,
    ],
    [
      "metered: the period spread over the included calls",
      { type: "metered", ...plan, amount: "9000000", includedUnits: 1000, unitsPerCall: 10 },
      90_000n,
    ],
    [
      "metered: rounded up",
      { type: "metered", ...plan, amount: "10", includedUnits: 3, unitsPerCall: 1 },
      4n,
    ],
    [
      "metered: whole calls only",
      { type: "metered", ...plan, amount: "90", includedUnits: 10, unitsPerCall: 3 },
      30n,
    ],
    [
      "metered: a single call's overage when none is included",
      {
        type: "metered",
        ...plan,
        amount: "100",
        includedUnits: 2,
        overageUnitPrice: "7",
        unitsPerCall: 5,
      },
      121n,
    ],
  ])("perCallPrice of %s", (_, entry, expected) => {
    expect(perCallPrice(entry)).toBe(expected);
  });

  it("cheapestPerCallPrice takes the lowest entry, exactly beyond 2^53", () => {
    const big = "9007199254740993"; // 2^53 + 1: a float would round it
    const entries: ManifestPricing[] = [
      { type: "one-time", amount: "9007199254740995" },
      { type: "one-time", amount: big },
    ];
    expect(cheapestPerCallPrice({ pricing: entries })).toBe(9_007_199_254_740_993n);
  });

  it("planTermsOfPricing gives full plan terms for plans that name their manager", () => {
    const manifest = ManifestSchema.parse(manifestOf());
    const [oneTime, subscription] = manifest.capabilities[0]!.pricing;
    expect(planTermsOfPricing(manifest, oneTime!)).toBeUndefined();
    expect(planTermsOfPricing(manifest, subscription!)).toEqual({
      planId: "3",
      amount: "9000000",
      interval: 2_592_000,
      token: manifest.token,
      includedUnits: 0,
      overageUnitPrice: "0",
      payTo: seller.address,
      network: "eip155:31337",
      manager: "0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0",
    });
  });
});

describe("discovery documents", () => {
  it("joins baseUrl and path without a double slash", () => {
    const manifest = ManifestSchema.parse(manifestOf());
    expect(capabilityUrl(manifest, manifest.capabilities[0]!)).toBe("http://127.0.0.1:5100/v1/forecast");
  });

  it("reads a signed envelope with its raw manifest, and a bare manifest without a signature", async () => {
    const envelope = await signManifest(seller, manifestOf());
    const wire = JSON.parse(JSON.stringify(envelope)) as unknown;
    const signed = parseDiscoveryDocument(wire);
    expect(signed.signature).toBe(envelope.signature);
    expect(
      await verifyManifestSignature({ manifest: signed.raw, signature: signed.signature }),
    ).toMatchObject({
      valid: true,
    });
    const bare = parseDiscoveryDocument(JSON.parse(JSON.stringify(envelope.manifest)));
    expect(bare.signature).toBeUndefined();
    expect(bare.manifest.name).toBe("weather-desk");
    expect(() => parseDiscoveryDocument({ hello: "world" })).toThrow(
      expect.objectContaining({ code: "InvalidRequest" }),
    );
  });
});
