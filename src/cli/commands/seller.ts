/**
 * `tollgate seller register | list | show | remove | refresh`: a seller's side of the market. The
 * payout key signs; it comes from `--key`, `TOLLGATE_SELLER_KEY`, `--account <devnet index>`, or the
 * devnet account whose address is the manifest's `seller.payTo`.
 */
import { existsSync, readFileSync } from "node:fs";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { readBoundedText } from "../../http/readBoundedText.ts";
import { DEFAULT_MARKET_URL, type RegistrationResult, signSellerRemoval } from "../../market/marketApi.ts";
import { createMarketClient, type MarketClient } from "../../market/marketClient.ts";
import { AddressSchema, sameAddress } from "../../protocol/address.ts";
import { type Clock, systemClock, unixSeconds } from "../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../protocol/errors.ts";
import { MANIFEST_PATH, signManifest } from "../../protocol/manifest.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { DevnetFileSchema } from "../devnet.ts";

export const summary = "register | list | show | remove | refresh — sell capabilities on a market";

const PrivateKeySchema = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, { error: "expected a 0x-prefixed 32-byte private key" })
  .transform((key) => key as `0x${string}`);

const SellerEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  TOLLGATE_MARKET_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_SELLER_KEY: PrivateKeySchema.optional(),
});

type CommandOutput = { log(line: string): void; error(line: string): void };

export type SellerCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
  clock: Clock;
  /** Directory relative paths are read from (default: the process's). */
  cwd?: string | undefined;
};

const usage = `usage: tollgate seller <command> [--market ${DEFAULT_MARKET_URL}] [--dir .tollgate]
  register <manifest.json | seller URL | manifest URL> [--key 0x… | --account <devnet index>]
              register a manifest. A seller's base URL (http://127.0.0.1:5100) is read at
              ${MANIFEST_PATH}; a URL ending in .json is read as it is. A manifest that is
              already signed (what a seller serves) is registered as it is signed, so the market and
              the seller's server agree; --key or --account signs it afresh (issuedAt = now). An
              unsigned manifest is signed with the payout key.
  list [--json]              sellers registered on the market
  show <address>             a seller's manifest, its signature checked
  remove [<address>] [--key 0x… | --account <devnet index>]
                             remove your registration (signed by the payout key)
  refresh <address>          ask the market to re-read the seller's signed manifest from its baseUrl
The key defaults to TOLLGATE_SELLER_KEY, then to the devnet account (.tollgate/devnet.json) that is seller.payTo.`;

function parseSellerArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      market: { type: "string" },
      dir: { type: "string" },
      key: { type: "string" },
      account: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

/** What every subcommand reads: its flags, environment, directories, output and the market. */
type SellerSession = {
  values: ReturnType<typeof parseSellerArgs>["values"];
  env: z.infer<typeof SellerEnvSchema>;
  deps: SellerCommandDeps;
  cwd: string;
  dir: string;
  market: MarketClient;
};

/** Runs `tollgate seller …`; returns the exit code. */
export async function sellerCommand(argv: string[], deps: SellerCommandDeps): Promise<number> {
  const { values, positionals } = parseSellerArgs(argv);
  const [command, target] = positionals;
  if (values.help === true || command === undefined) {
    deps.out.log(usage);
    return values.help === true ? 0 : 2;
  }
  const env = parseWire(SellerEnvSchema, deps.env, { what: "environment" });
  const cwd = deps.cwd ?? process.cwd();
  const dir = resolve(cwd, values.dir ?? env.TOLLGATE_DIR);
  const market = createMarketClient({
    url: values.market ?? env.TOLLGATE_MARKET_URL ?? DEFAULT_MARKET_URL,
    fetch: deps.fetch,
  });
  const session: SellerSession = { values, env, deps, cwd, dir, market };
  switch (command) {
    case "register":
      return registerSeller(session, target);
    case "list":
      return listSellers(session);
    case "show":
      return showSeller(session, target);
    case "remove":
      return removeSeller(session, target);
    case "refresh":
      return refreshSeller(session, target);
    default:
      deps.out.error(usage);
      return 2;
  }
}

/** The signing key: explicit flags first, then the environment, then a devnet account matching `payTo`. */
function sellerAccount(session: SellerSession, payTo: string | undefined): PrivateKeyAccount | undefined {
  const { values, env, dir } = session;
  if (values.key !== undefined)
    return privateKeyToAccount(parseWire(PrivateKeySchema, values.key, { what: "--key" }));
  if (values.account !== undefined) {
    const accounts = readDevnet(dir).accounts;
    const index = Number(values.account);
    const entry = Number.isInteger(index) ? accounts[index] : undefined;
    if (entry === undefined) {
      throw new TollgateError(
        "InvalidRequest",
        `--account must be a devnet account index from 0 to ${accounts.length - 1}`,
      );
    }
    return privateKeyToAccount(parseWire(PrivateKeySchema, entry.privateKey, { what: "devnet key" }));
  }
  if (env.TOLLGATE_SELLER_KEY !== undefined) return privateKeyToAccount(env.TOLLGATE_SELLER_KEY);
  if (payTo === undefined || !existsSync(join(dir, "devnet.json"))) return undefined;
  const match = readDevnet(dir).accounts.find((a) => sameAddress(a.address, payTo));
  return match === undefined
    ? undefined
    : privateKeyToAccount(parseWire(PrivateKeySchema, match.privateKey, { what: "devnet key" }));
}

/** Prints what a registration did; 1 when the market kept a registration at least as new. */
function reportRegistration(
  session: SellerSession,
  result: RegistrationResult,
  sentIssuedAt: unknown,
  how = "",
): number {
  const { deps, market } = session;
  if (result.status === "superseded") {
    deps.out.error(
      `superseded: nothing changed. ${market.url} already holds a registration of ${result.address} signed at ` +
        `${when(result.issuedAt)}${typeof sentIssuedAt === "number" ? `, not older than this one (${when(sentIssuedAt)})` : ""}; ` +
        "a market keeps the newest. Register a newer manifest (--key or --account signs with issuedAt = now).",
    );
    return 1;
  }
  deps.out.log(`${result.status}: ${result.address} on ${market.url} (issuedAt ${result.issuedAt})${how}`);
  return 0;
}

/** `tollgate seller register <manifest | URL>`. */
async function registerSeller(session: SellerSession, target: string | undefined): Promise<number> {
  const { deps, values, market } = session;
  if (target === undefined) {
    deps.out.error("tollgate seller register: give a manifest file or URL");
    return 2;
  }
  const { document, source } = await loadDocument(target, session.cwd, deps.fetch);
  const isEnvelope = typeof document === "object" && document !== null && "manifest" in document;
  const raw = (isEnvelope ? (document as { manifest: unknown }).manifest : document) as Record<
    string,
    unknown
  >;
  if (typeof raw !== "object" || raw === null || Array.isArray(raw)) {
    throw new TollgateError("InvalidRequest", `${target} does not hold a manifest (a JSON object)`);
  }
  const seller = (raw.seller ?? {}) as Record<string, unknown>;
  const payTo = typeof seller.payTo === "string" ? seller.payTo : undefined;
  const signed = isEnvelope && typeof (document as { signature?: unknown }).signature === "string";
  // A signed manifest goes as it is signed unless a key is named: re-signing it here would give
  // the market a manifest newer than the one the seller serves, and every later refresh from the
  // seller's server would be "superseded" by it.
  if (signed && values.key === undefined && values.account === undefined) {
    try {
      const result = await market.register(document as { manifest: unknown; signature: string });
      return reportRegistration(session, result, raw.issuedAt, `, as signed by the seller (${source})`);
    } catch (error) {
      // Older than the market accepts for a new registration: sign it afresh below, if a key is at hand.
      if (!isTollgateError(error, "AuthorizationExpired") || sellerAccount(session, payTo) === undefined) {
        throw error;
      }
      deps.out.log(
        `${source} was signed too long ago for ${market.url} to take it: signing it afresh with the payout key`,
      );
    }
  }
  const signer = sellerAccount(session, payTo);
  let envelope: { manifest: unknown; signature: string };
  if (signer === undefined) {
    if (!isEnvelope) {
      throw new TollgateError(
        "InvalidRequest",
        "no payout key to sign with: pass --key or --account, or set TOLLGATE_SELLER_KEY",
      );
    }
    envelope = document as { manifest: unknown; signature: string };
  } else {
    // A seller signing now states the manifest now: a file's old issuedAt would be stale.
    envelope = await signManifest(signer, {
      ...(raw as object),
      seller: { ...seller, payTo: payTo ?? signer.address },
      issuedAt: unixSeconds(deps.clock),
    } as Parameters<typeof signManifest>[1]);
  }
  const result = await market.register(envelope);
  return reportRegistration(session, result, (envelope.manifest as { issuedAt?: unknown }).issuedAt);
}

/** `tollgate seller list [--json]`. */
async function listSellers(session: SellerSession): Promise<number> {
  const { deps } = session;
  const { sellers } = await session.market.list({ limit: 100 });
  if (session.values.json) {
    deps.out.log(JSON.stringify(sellers, null, 2));
    return 0;
  }
  if (sellers.length === 0) deps.out.log("no sellers registered");
  for (const s of sellers) {
    deps.out.log(`${s.address}  ${s.name}  ${s.baseUrl}  ${s.network}  [${s.capabilities.join(", ")}]`);
  }
  return 0;
}

/** `tollgate seller show <address>`. */
async function showSeller(session: SellerSession, target: string | undefined): Promise<number> {
  const { deps, market } = session;
  const address = parseWire(AddressSchema, target, { what: "seller address" });
  const seller = await market.get(address);
  if (seller === undefined) {
    deps.out.error(`no seller ${address} on ${market.url}`);
    return 1;
  }
  deps.out.log(JSON.stringify(seller.envelope, null, 2));
  return 0;
}

/** `tollgate seller remove [<address>]`, signed by the payout key. */
async function removeSeller(session: SellerSession, target: string | undefined): Promise<number> {
  const { deps, market } = session;
  const signer = sellerAccount(session, target);
  if (signer === undefined) {
    throw new TollgateError("InvalidRequest", "no payout key to sign the removal: pass --key or --account");
  }
  const address =
    target === undefined ? signer.address : parseWire(AddressSchema, target, { what: "seller address" });
  if (!sameAddress(address, signer.address)) {
    throw new TollgateError("InvalidRequest", `the key given is not ${address}'s payout key`);
  }
  const result = await market.remove(address, await signSellerRemoval(signer, unixSeconds(deps.clock)));
  deps.out.log(`${result.status}: ${result.address} on ${market.url}`);
  return result.status === "removed" ? 0 : 1;
}

/** `tollgate seller refresh <address>`; a superseded refresh says which registration won, and why. */
async function refreshSeller(session: SellerSession, target: string | undefined): Promise<number> {
  const { deps, market } = session;
  const address = parseWire(AddressSchema, target, { what: "seller address" });
  const result = await market.refresh(address);
  if (result.status !== "superseded") {
    deps.out.log(`${result.status}: ${result.address} on ${market.url} (issuedAt ${result.issuedAt})`);
    return 0;
  }
  // The market kept a registration at least as new as what the seller serves: say which, and why.
  const registered = await market.get(address).catch(() => undefined);
  const baseUrl = registered?.manifest.baseUrl;
  const manifestUrl = baseUrl === undefined ? "the seller's manifest" : manifestUrlOf(baseUrl);
  const served =
    baseUrl === undefined
      ? undefined
      : await loadDocument(manifestUrlOf(baseUrl), session.cwd, deps.fetch)
          .then(({ document }) => (document as { manifest?: { issuedAt?: unknown } }).manifest?.issuedAt)
          .catch(() => undefined);
  const servedAt = typeof served === "number" ? ` was signed at ${when(served)} and` : "";
  deps.out.error(
    [
      `superseded: nothing changed. ${manifestUrl}${servedAt} is not newer than the registration ${market.url} holds ` +
        `for ${result.address} (signed at ${when(result.issuedAt)}), and a market keeps the newest signed manifest.`,
      "The registration was signed after the seller published its own, typically by `tollgate seller register` " +
        "with a key (which signs afresh) or by another instance of the seller.",
      "To have the market follow the seller's server again, let the seller sign a newer manifest (restart it: " +
        `a specialist signs its manifest when it starts), then run \`tollgate seller refresh ${result.address}\` again.`,
    ].join("\n"),
  );
  return 1;
}

/** Largest manifest document read from a URL. */
const MAX_DOCUMENT_BYTES = 1024 * 1024;

/** `1763800000` → `2025-11-22T08:26:40Z (issuedAt 1763800000)`. */
function when(issuedAt: number): string {
  return `${new Date(issuedAt * 1000).toISOString().replace(".000Z", "Z")} (issuedAt ${issuedAt})`;
}

/** Where a seller at `baseUrl` serves its manifest (a path prefix of the base is kept). */
function manifestUrlOf(baseUrl: string): string {
  return `${baseUrl.replace(/\/+$/, "")}${MANIFEST_PATH}`;
}

function readDevnet(dir: string) {
  const file = join(dir, "devnet.json");
  if (!existsSync(file)) {
    throw new TollgateError(
      "InvalidRequest",
      `no devnet at ${file}: run \`tollgate devnet up\` or pass --key`,
    );
  }
  return parseWire(DevnetFileSchema, JSON.parse(readFileSync(file, "utf8")), { what: "devnet.json" });
}

/**
 * A manifest document from a file or an http(s) URL, and where it was read. A URL whose path ends in
 * `.json` is read as given; any other URL is a seller's base URL, read at `MANIFEST_PATH` below it.
 */
async function loadDocument(
  target: string,
  cwd: string,
  fetchFn: FetchFn,
): Promise<{ document: unknown; source: string }> {
  let text: string;
  let source: string;
  if (/^https?:\/\//i.test(target)) {
    let url: URL;
    try {
      url = new URL(target);
    } catch (cause) {
      throw new TollgateError("InvalidRequest", `not a URL: ${target}`, { cause });
    }
    const isBase = !url.pathname.endsWith(".json");
    source = isBase ? manifestUrlOf(`${url.origin}${url.pathname}`) : url.href;
    let response: Response;
    try {
      response = await fetchFn(source, {
        headers: { accept: "application/json" },
        signal: AbortSignal.timeout(10_000),
      });
    } catch (cause) {
      throw new TollgateError("SellerUnreachable", `cannot reach ${source}: ${(cause as Error).message}`, {
        cause,
      });
    }
    if (!response.ok) {
      throw new TollgateError(
        "InvalidRequest",
        `${source} answered ${response.status}` +
          (isBase ? `: is ${target} a Tollgate seller? (it serves its manifest at ${MANIFEST_PATH})` : ""),
      );
    }
    // A manifest is a few KiB; a server that sends more is cut off rather than buffered whole.
    text = await readBoundedText(
      response,
      MAX_DOCUMENT_BYTES,
      () => new TollgateError("PayloadTooLarge", `${source} sent more than ${MAX_DOCUMENT_BYTES} bytes`),
    );
  } else {
    const file = resolve(cwd, target);
    if (!existsSync(file)) throw new TollgateError("InvalidRequest", `no such file: ${file}`);
    text = readFileSync(file, "utf8");
    source = file;
  }
  try {
    return { document: JSON.parse(text) as unknown, source };
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `${source} is not JSON`, { cause });
  }
}

export function run(argv: string[]): Promise<number> {
  return sellerCommand(argv, { env: process.env, out: console, fetch: globalThis.fetch, clock: systemClock });
}
