/**
 * Where the facilitator may send webhooks (docs/webhooks.md, "Where webhooks may go"): a provider names any URL, so without a
 * check the facilitator POSTs from inside its own network on the provider's behalf (SSRF: loopback
 * admin ports, the cloud metadata service at 169.254.169.254, private hosts).
 *
 * Invariant: a delivery connects only to an address this module checked. `checkWebhookTarget` resolves
 * the host once and checks *every* address it resolves to (a name with one public and one private
 * address is refused); the transport then connects to the checked address itself, so a DNS answer that
 * changes between the check and the connection (rebinding) cannot redirect it.
 *
 * Refused unless allowed by `allowTargets`: every address that is not global unicast — IPv4 0/8, 10/8,
 * 100.64/10, 127/8, 169.254/16, 172.16/12, 192.0.0/24, the documentation nets, 192.168/16, 198.18/15,
 * multicast and 240/4; IPv6 ::, ::1, fc00::/7, fe80::/10, fec0::/10, ff00::/8, 100::/64, 2001::/23,
 * 2001:db8::/32 — and IPv6 forms that carry an IPv4 address (::ffff:a.b.c.d, ::a.b.c.d, 64:ff9b::/96,
 * 2002::/16), which are judged by that IPv4 address. Odd IPv4 spellings (2130706433, 0x7f.1, 0177.1)
 * are already canonical dotted quads after WHATWG URL parsing, so they are checked as such.
 */
import { lookup as dnsLookup } from "node:dns/promises";
import { isIP } from "node:net";
import { TollgateError } from "../protocol/errors.ts";

/** One resolved address, as `dns.lookup(…, { all: true })` returns it. */
export type WebhookTargetAddress = { address: string; family: 4 | 6 };

/** Resolves a host name to every address it has (`dns.lookup` with `all: true` by default). */
export type WebhookLookup = (hostname: string) => Promise<readonly WebhookTargetAddress[]>;

/** A URL that passed the check, with the address the delivery must connect to. */
export type CheckedWebhookTarget = {
  url: URL;
  /** The checked address; the transport connects here, never to a fresh resolution of the name. */
  address: WebhookTargetAddress;
};

export type WebhookTargetPolicyOptions = {
  /**
   * Addresses allowed although not public: CIDRs or single addresses (`127.0.0.0/8`, `::1`,
   * `10.1.2.3`). For development (receivers on the same machine) and for operators whose receivers
   * are on a private network on purpose. Empty by default.
   */
  allowTargets?: readonly string[] | undefined;
  /** DNS (default `dns.lookup` with `all: true`); injected by tests. */
  lookup?: WebhookLookup | undefined;
};

/** Why a target was refused (`details.reason` of the `InvalidRequest`). */
export type WebhookTargetRefusal =
  | "invalid_url"
  | "unsupported_scheme"
  | "credentials_in_url"
  | "unresolvable_host"
  | "private_address";

export type WebhookTargetPolicy = {
  /** Resolves and checks `url`; throws `InvalidRequest` (`details.reason`) when it may not be sent to. */
  check(url: string): Promise<CheckedWebhookTarget>;
};

type Cidr = { family: 4 | 6; bytes: Uint8Array; prefix: number };

const BLOCKED_V4 = [
  "0.0.0.0/8",
  "10.0.0.0/8",
  "100.64.0.0/10",
  "127.0.0.0/8",
  "169.254.0.0/16",
  "172.16.0.0/12",
  "192.0.0.0/24",
  "192.0.2.0/24",
  "192.88.99.0/24",
  "192.168.0.0/16",
  "198.18.0.0/15",
  "198.51.100.0/24",
  "203.0.113.0/24",
  "224.0.0.0/4",
  "240.0.0.0/4",
].map(parseCidr);

const BLOCKED_V6 = [
  "::/128",
  "::1/128",
  "100::/64",
  "2001::/23",
  "2001:db8::/32",
  "fc00::/7",
  "fe80::/10",
  "fec0::/10",
  "ff00::/8",
  "64:ff9b:1::/48",
].map(parseCidr);

/** IPv6 prefixes whose low bits carry an IPv4 address: [prefix, offset of the IPv4 bytes]. */
const EMBEDS_V4: readonly [Cidr, number][] = [
  [parseCidr("::ffff:0:0/96"), 12],
  [parseCidr("::/96"), 12],
  [parseCidr("64:ff9b::/96"), 12],
  [parseCidr("2002::/16"), 2],
];

/**
 * The policy deliveries and registrations go through.
 * @example
 * const targets = createWebhookTargetPolicy({ allowTargets: ["127.0.0.0/8"] }); // development only
 * const { url, address } = await targets.check("https://hooks.example.com/tollgate");
 */
export function createWebhookTargetPolicy(options: WebhookTargetPolicyOptions = {}): WebhookTargetPolicy {
  const allowed = (options.allowTargets ?? []).map((entry) => {
    try {
      return parseCidr(
        entry.includes("/") ? entry : `${entry}/${isIP(stripBrackets(entry)) === 6 ? 128 : 32}`,
      );
    } catch {
      throw new TypeError(`webhook allowTargets: ${JSON.stringify(entry)} is not an IP address or CIDR`);
    }
  });
  const lookup: WebhookLookup =
    options.lookup ??
    (async (hostname) =>
      (await dnsLookup(hostname, { all: true, verbatim: true })).map((a) => ({
        address: a.address,
        family: a.family === 6 ? 6 : 4,
      })));

  const isAllowed = (address: string) => {
    if (allowed.some((cidr) => inCidr(address, cidr))) return true;
    return !isNonPublicAddress(address);
  };

  return {
    async check(text) {
      let url: URL;
      try {
        url = new URL(text);
      } catch (cause) {
        throw refusal("invalid_url", "the webhook URL is not a valid URL", { cause });
      }
      if (url.protocol !== "http:" && url.protocol !== "https:") {
        throw refusal("unsupported_scheme", "the webhook URL must be http or https");
      }
      if (url.username !== "" || url.password !== "") {
        throw refusal("credentials_in_url", "the webhook URL must not carry credentials");
      }
      const host = stripBrackets(url.hostname);
      const literal = isIP(host) !== 0;
      let addresses: readonly WebhookTargetAddress[];
      if (literal) {
        addresses = [{ address: host, family: isIP(host) === 6 ? 6 : 4 }];
      } else {
        try {
          addresses = await lookup(host);
        } catch (cause) {
          throw refusal("unresolvable_host", `the webhook host ${host} does not resolve`, { cause });
        }
        if (addresses.length === 0) {
          throw refusal("unresolvable_host", `the webhook host ${host} does not resolve`);
        }
      }
      // Every address, not the first: a client library may try the others when one fails.
      for (const { address } of addresses) {
        if (isIP(address) === 0 || !isAllowed(address)) {
          throw refusal(
            "private_address",
            `${literal ? `the webhook address ${host} is` : `the webhook host ${host} resolves to ${address},`} a loopback, link-local, private or reserved address; webhooks are only sent to public addresses`,
            { address },
          );
        }
      }
      return { url, address: addresses[0]! };
    },
  };
}

/**
 * True for every address that is not global unicast (see the module comment). Unparseable input
 * counts as non-public: the check fails closed.
 */
export function isNonPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 0) return true;
  if (family === 4) return BLOCKED_V4.some((cidr) => inCidr(address, cidr));
  const bytes = parseIpv6(address);
  for (const [prefix, offset] of EMBEDS_V4) {
    if (matches(bytes, prefix)) {
      // `::` and `::1` sit inside ::/96 but are IPv6's own unspecified and loopback addresses.
      if (prefix.prefix === 96 && offset === 12 && bytes.slice(0, 12).every((b) => b === 0)) {
        if (bytes.slice(12, 15).every((b) => b === 0) && bytes[15]! <= 1) return true;
      }
      return isNonPublicAddress(Array.from(bytes.slice(offset, offset + 4)).join("."));
    }
  }
  return BLOCKED_V6.some((cidr) => matches(bytes, cidr));
}

function refusal(
  reason: WebhookTargetRefusal,
  message: string,
  extra: { cause?: unknown; address?: string } = {},
) {
  return new TollgateError("InvalidRequest", message, {
    details: { reason, ...(extra.address === undefined ? {} : { address: extra.address }) },
    ...(extra.cause === undefined ? {} : { cause: extra.cause }),
  });
}

function stripBrackets(host: string): string {
  return host.startsWith("[") && host.endsWith("]") ? host.slice(1, -1) : host;
}

function parseCidr(text: string): Cidr {
  const [ip = "", bits] = text.split("/");
  const address = stripBrackets(ip);
  const family = isIP(address);
  if (family === 0) throw new TypeError(`not an IP address: ${text}`);
  const bytes = family === 4 ? parseIpv4(address) : parseIpv6(address);
  const prefix = bits === undefined ? bytes.length * 8 : Number(bits);
  if (!Number.isInteger(prefix) || prefix < 0 || prefix > bytes.length * 8 || !/^\d*$/.test(bits ?? "")) {
    throw new TypeError(`bad prefix length: ${text}`);
  }
  return { family: family === 4 ? 4 : 6, bytes, prefix };
}

function inCidr(address: string, cidr: Cidr): boolean {
  const family = isIP(address);
  if (family === 0) return false;
  if (family === 4 && cidr.family === 4) return matches(parseIpv4(address), cidr);
  if (family === 6 && cidr.family === 6) return matches(parseIpv6(address), cidr);
  // An IPv4 rule also covers the IPv4-mapped IPv6 spelling of its addresses.
  if (family === 6 && cidr.family === 4) {
    const bytes = parseIpv6(address);
    return bytes.slice(0, 10).every((b) => b === 0) && bytes[10] === 0xff && bytes[11] === 0xff
      ? matches(bytes.slice(12), cidr)
      : false;
  }
  return false;
}

function matches(bytes: Uint8Array, cidr: Cidr): boolean {
  if (bytes.length !== cidr.bytes.length) return false;
  let bits = cidr.prefix;
  for (let i = 0; bits > 0; i++, bits -= 8) {
    const mask = bits >= 8 ? 0xff : (0xff << (8 - bits)) & 0xff;
    if ((bytes[i]! & mask) !== (cidr.bytes[i]! & mask)) return false;
  }
  return true;
}

function parseIpv4(address: string): Uint8Array {
  return Uint8Array.from(address.split(".").map(Number));
}

/** 16 bytes of an IPv6 address (as `net.isIP` accepts it: `::`, an embedded dotted quad, a zone). */
function parseIpv6(text: string): Uint8Array {
  let address = text.split("%")[0]!;
  const at = address.lastIndexOf(":");
  if (address.indexOf(".", at) !== -1) {
    // An embedded dotted quad (::ffff:127.0.0.1): rewrite it as its two hex words.
    const v4 = parseIpv4(address.slice(at + 1));
    const hex = (hi: number, lo: number) => ((hi << 8) | lo).toString(16);
    address = `${address.slice(0, at + 1)}${hex(v4[0]!, v4[1]!)}:${hex(v4[2]!, v4[3]!)}`;
  }
  const [head = "", rest] = address.split("::");
  const parse = (part: string) => (part === "" ? [] : part.split(":").map((w) => Number.parseInt(w, 16)));
  const left = parse(head);
  const right = rest === undefined ? [] : parse(rest);
  const words =
    rest === undefined
      ? left
      : [...left, ...new Array<number>(8 - left.length - right.length).fill(0), ...right];
  const bytes = new Uint8Array(16);
  words.forEach((word, i) => {
    bytes[2 * i] = word >> 8;
    bytes[2 * i + 1] = word & 0xff;
  });
  return bytes;
}
