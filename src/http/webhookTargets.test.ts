import { describe, expect, it } from "vitest";
import { isTollgateError } from "../protocol/errors.ts";
import { createWebhookTargetPolicy, isNonPublicAddress } from "./webhookTargets.ts";

describe("isNonPublicAddress", () => {
  it.each([
    "0.0.0.0",
    "0.1.2.3",
    "10.255.0.1",
    "100.64.0.1",
    "100.127.255.255",
    "127.0.0.1",
    "127.255.255.254",
    "169.254.169.254",
    "172.16.0.1",
    "172.31.255.255",
    "192.0.0.8",
    "192.0.2.1",
    "192.168.0.1",
    "198.18.0.1",
    "224.0.0.1",
    "255.255.255.255",
    "::",
    "::1",
    "::ffff:127.0.0.1",
    "::ffff:7f00:1",
    "::ffff:169.254.169.254",
    "::127.0.0.1",
    "64:ff9b::10.0.0.1",
    "2002:7f00:1::",
    "fc00::1",
    "fdff::1",
    "fe80::1",
    "fe80::1%eth0",
    "fec0::1",
    "ff02::1",
    "2001:db8::1",
    "2001::1",
    "not an address",
  ])("counts %s as non-public", (address) => {
    expect(isNonPublicAddress(address)).toBe(true);
  });

  it.each([
    "8.8.8.8",
    "93.184.215.14",
    "172.32.0.1",
    "100.128.0.1",
    "::ffff:8.8.8.8",
    "64:ff9b::8.8.8.8",
    "2606:4700::1111",
    "2a00:1450::1",
  ])("counts %s as public", (address) => {
    expect(isNonPublicAddress(address)).toBe(false);
  });
});

describe("createWebhookTargetPolicy", () => {
  const lookup = async (hostname: string) =>
    ({
      "public.test": [{ address: "93.184.215.14", family: 4 as const }],
      "both.test": [
        { address: "93.184.215.14", family: 4 as const },
        { address: "::1", family: 6 as const },
      ],
    })[hostname] ?? [];

  async function reason(policy: ReturnType<typeof createWebhookTargetPolicy>, url: string) {
    try {
      await policy.check(url);
      return "accepted";
    } catch (error) {
      return isTollgateError(error) ? (error.details as { reason: string }).reason : String(error);
    }
  }

  it("refuses every spelling of a non-public target and names the reason", async () => {
    const policy = createWebhookTargetPolicy({ lookup });
    expect(await reason(policy, "http://2130706433/")).toBe("private_address");
    expect(await reason(policy, "http://0x7f.1/")).toBe("private_address");
    expect(await reason(policy, "http://[::ffff:127.0.0.1]/")).toBe("private_address");
    expect(await reason(policy, "http://both.test/")).toBe("private_address");
    expect(await reason(policy, "http://nowhere.test/")).toBe("unresolvable_host");
    expect(await reason(policy, "https://u:p@public.test/")).toBe("credentials_in_url");
    expect(await reason(policy, "ftp://public.test/")).toBe("unsupported_scheme");
    expect(await reason(policy, "not a url")).toBe("invalid_url");
    expect(await policy.check("https://public.test/hooks")).toMatchObject({
      address: { address: "93.184.215.14", family: 4 },
    });
  });

  it("lets through exactly the allowed addresses, in IPv4 and IPv4-mapped form", async () => {
    const policy = createWebhookTargetPolicy({ lookup, allowTargets: ["127.0.0.0/8", "::1"] });
    expect(await reason(policy, "http://127.0.0.1:9/")).toBe("accepted");
    expect(await reason(policy, "http://[::ffff:127.0.0.1]/")).toBe("accepted");
    expect(await reason(policy, "http://[::1]/")).toBe("accepted");
    expect(await reason(policy, "http://both.test/")).toBe("accepted");
    expect(await reason(policy, "http://169.254.169.254/")).toBe("private_address");
    expect(await reason(policy, "http://10.0.0.1/")).toBe("private_address");
  });

  it("refuses an allow-list entry that is not an address or CIDR", () => {
    expect(() => createWebhookTargetPolicy({ allowTargets: ["localhost"] })).toThrow(TypeError);
    expect(() => createWebhookTargetPolicy({ allowTargets: ["10.0.0.0/33"] })).toThrow(TypeError);
  });
});
