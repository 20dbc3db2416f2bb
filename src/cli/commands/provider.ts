/**
 * `tollgate provider register | show | revoke`: a provider's account at a facilitator. `register` is
 * the challenge/sign flow of `registerProvider` (the payout key signs the facilitator's sealed
 * challenge) and yields the API key `tollgate analytics`, `tollgate webhooks` and a gate's
 * `providerApiKey` use.
 *
 * Decisions (docs/cli.md): the payout key comes from `--account <n>` (a devnet account of
 * `<dir>/devnet.json`; account 1, the README's API provider, by default on a devnet) or from
 * TOLLGATE_PROVIDER_KEY — never from a flag, since the command line is visible to every user of the
 * machine. The API key is printed once, or with `--save` written 0600 to `<dir>/provider-keys.json`
 * for that facilitator (src/cli/providerKeys.ts) and not printed. Private keys are never printed.
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import { readDevnetFile } from "../../chain/devnetFile.ts";
import { registerProvider } from "../../client/registerProvider.ts";
import { createFacilitatorClient, type FetchFn } from "../../http/facilitatorClient.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { ProviderAccountSchema } from "../../protocol/subscriptions.ts";
import { forgetProviderKey, saveProviderKey } from "../providerKeys.ts";
import { DEFAULT_FACILITATOR_URL, providerClient } from "./analytics.ts";

export const summary = "register [--account 1] [--save] | show | revoke <id> — a provider's API keys";

/** The dev account the README's role table gives to the API provider. */
const DEFAULT_DEVNET_ACCOUNT = 1;

const usage = `usage: tollgate provider <command> [--facilitator ${DEFAULT_FACILITATOR_URL}] [--dir .tollgate] [--json]
  register [--account <devnet index>] [--save]
           prove control of the payout address (it signs the facilitator's challenge) and get an API
           key for analytics, webhooks, usage and a gate's providerApiKey. The key is printed once;
           with --save it is written to <dir>/provider-keys.json (0600) instead, where
           \`tollgate analytics\` and \`tollgate webhooks\` find it when TOLLGATE_API_KEY is unset.
           Registering again issues another key and keeps the others (rotation).
  show     the provider and its active keys (id, prefix, created)
  revoke <id>
           revoke an API key; a saved key that is revoked is forgotten
The payout key: TOLLGATE_PROVIDER_KEY (0x…, for a real network), or --account <n> from <dir>/devnet.json
(default on a devnet: account ${DEFAULT_DEVNET_ACCOUNT}, the API provider). It is never printed.
show and revoke authenticate like \`tollgate analytics\`: --api-key, TOLLGATE_API_KEY, or the saved key.
environment: TOLLGATE_PROVIDER_KEY TOLLGATE_FACILITATOR_URL TOLLGATE_API_KEY TOLLGATE_DIR`;

const PrivateKeySchema = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, { error: "expected a 0x-prefixed 32-byte private key" })
  .transform((key) => key as `0x${string}`);

const ProviderEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  TOLLGATE_FACILITATOR_URL: z.url({ protocol: /^https?$/ }).optional(),
  TOLLGATE_PROVIDER_KEY: PrivateKeySchema.optional(),
});

type CommandOutput = { log(line: string): void; error(line: string): void };

export type ProviderCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
  /** Directory relative paths are read from (default: the process's). */
  cwd?: string | undefined;
};

function parseProviderArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      account: { type: "string" },
      save: { type: "boolean", default: false },
      facilitator: { type: "string" },
      "api-key": { type: "string" },
      dir: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

/** What every subcommand works with: the flags, the environment, the directory and the printer. */
interface ProviderSession {
  deps: ProviderCommandDeps;
  values: ReturnType<typeof parseProviderArgs>["values"];
  env: z.infer<typeof ProviderEnvSchema>;
  cwd: string;
  dir: string;
  facilitatorUrl: string;
  /** JSON under --json, else the lines. */
  print(value: unknown, lines: () => string[]): void;
}

/** Runs `tollgate provider …`; returns the exit code. */
export async function providerCommand(argv: string[], deps: ProviderCommandDeps): Promise<number> {
  const { values, positionals } = parseProviderArgs(argv);
  const [command, target, ...extra] = positionals;
  if (values.help === true || command === undefined) {
    deps.out.log(usage);
    return values.help === true ? 0 : 2;
  }
  const env = parseWire(ProviderEnvSchema, deps.env, { what: "environment" });
  const cwd = deps.cwd ?? process.cwd();
  const dir = resolve(cwd, values.dir ?? env.TOLLGATE_DIR);
  const facilitatorUrl = values.facilitator ?? env.TOLLGATE_FACILITATOR_URL ?? DEFAULT_FACILITATOR_URL;
  const print = (value: unknown, lines: () => string[]) => {
    if (values.json) deps.out.log(JSON.stringify(value, null, 2));
    else for (const line of lines()) deps.out.log(line);
  };
  const session: ProviderSession = { deps, values, env, cwd, dir, facilitatorUrl, print };

  switch (command) {
    case "register":
      return registerCommand(session, target);
    case "show":
      return showCommand(session);
    case "revoke":
      return revokeCommand(session, target, extra);
    default:
      deps.out.error(`tollgate provider: unknown command "${command}"\n\n${usage}`);
      return 2;
  }
}

/** `tollgate provider register [--save]` */
async function registerCommand(session: ProviderSession, target: string | undefined): Promise<number> {
  const { deps, values, env, dir, print } = session;
  if (target !== undefined) {
    deps.out.error(`tollgate provider register: takes no arguments\n\n${usage}`);
    return 2;
  }
  const { account, source } = payoutAccount(values.account, env.TOLLGATE_PROVIDER_KEY, dir);
  const facilitator = createFacilitatorClient({ url: session.facilitatorUrl, fetch: deps.fetch });
  if (!isLocalOrTls(facilitator.url)) {
    // The key is a bearer credential: over plain HTTP anyone on the path may read and reuse it.
    deps.out.error(
      `warning: ${facilitator.url} is plain HTTP on another host: the API key travels unencrypted (put TLS in front of the facilitator)`,
    );
  }
  const registered = await registerProvider(facilitator, account);
  const key = registered.key;
  if (values.save) {
    const { file, replaced } = saveProviderKey(dir, facilitator.url, {
      provider: registered.provider,
      apiKey: registered.apiKey,
      key,
    });
    print({ provider: registered.provider, facilitator: facilitator.url, key, savedTo: file }, () => [
      `provider ${registered.provider} (${source}) registered at ${facilitator.url}`,
      `API key ${key.id} (${key.prefix}…) saved to ${file}`,
      "`tollgate analytics` and `tollgate webhooks` use it when TOLLGATE_API_KEY is not set",
      ...(replaced === undefined || replaced.key.id === key.id
        ? []
        : [
            `it replaces the saved key ${replaced.key.id} (${replaced.key.prefix}…) of ${replaced.provider}, ` +
              `which stays active until revoked (\`tollgate provider revoke ${replaced.key.id} --api-key …\`)`,
          ]),
    ]);
    return 0;
  }
  print(
    { provider: registered.provider, facilitator: facilitator.url, key, apiKey: registered.apiKey },
    () => [
      `provider ${registered.provider} (${source}) registered at ${facilitator.url}`,
      `API key ${key.id}, shown this once (the facilitator keeps only its hash):`,
      registered.apiKey,
      "use it with TOLLGATE_API_KEY=<key>, or run `tollgate provider register --save` to keep one in the Tollgate directory",
    ],
  );
  return 0;
}

/** `tollgate provider show` */
async function showCommand({ deps, values, cwd, print }: ProviderSession): Promise<number> {
  const client = providerClient(values, { ...deps, cwd });
  const account = await client.request("GET", "/providers/me", ProviderAccountSchema);
  print(account, () => [
    `provider ${account.provider} at ${client.url}: ${account.keys.length} active key(s)`,
    ...account.keys.map((k) => `  ${k.id}  ${k.prefix}…  created ${k.createdAt}`),
  ]);
  return 0;
}

/** `tollgate provider revoke <id>` */
async function revokeCommand(
  { deps, values, cwd, dir, print }: ProviderSession,
  target: string | undefined,
  extra: string[],
): Promise<number> {
  if (target === undefined || extra.length > 0 || !/^[1-9][0-9]{0,15}$/.test(target)) {
    deps.out.error(`tollgate provider revoke: give one key id (\`tollgate provider show\` lists them)`);
    return 2;
  }
  const client = providerClient(values, { ...deps, cwd });
  const revoked = await client.request(
    "DELETE",
    `/providers/keys/${target}`,
    z.object({ revoked: z.int().positive() }),
  );
  const forgotten = forgetProviderKey(dir, client.url, revoked.revoked);
  print({ ...revoked, forgotten }, () => [
    `revoked API key ${revoked.revoked} at ${client.url}${forgotten ? " (and forgot the saved copy)" : ""}`,
  ]);
  return 0;
}

/** https, or http to this machine (loopback): where a bearer key may travel. */
function isLocalOrTls(url: string): boolean {
  const { protocol, hostname } = new URL(url);
  return (
    protocol === "https:" ||
    hostname === "localhost" ||
    hostname === "[::1]" ||
    /^127\.[0-9]+\.[0-9]+\.[0-9]+$/.test(hostname)
  );
}

/** The payout account and where it came from (for the output; never the key itself). */
function payoutAccount(
  accountFlag: string | undefined,
  envKey: `0x${string}` | undefined,
  dir: string,
): { account: PrivateKeyAccount; source: string } {
  if (accountFlag === undefined && envKey !== undefined) {
    return { account: privateKeyToAccount(envKey), source: "key from TOLLGATE_PROVIDER_KEY" };
  }
  const devnet = readDevnetFile(dir);
  if (devnet === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `no payout key: set TOLLGATE_PROVIDER_KEY, or run \`tollgate devnet up\` and pass --account <n> (no devnet in ${dir})`,
    );
  }
  const index = accountFlag === undefined ? DEFAULT_DEVNET_ACCOUNT : Number(accountFlag);
  const entry = /^[0-9]+$/.test(accountFlag ?? "0") ? devnet.accounts[index] : undefined;
  if (entry === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `--account must be a devnet account index from 0 to ${devnet.accounts.length - 1}`,
    );
  }
  return {
    account: privateKeyToAccount(parseWire(PrivateKeySchema, entry.privateKey, { what: "devnet key" })),
    source: `devnet account ${index}`,
  };
}

export function run(argv: string[]): Promise<number> {
  return providerCommand(argv, { env: process.env, out: console, fetch: globalThis.fetch });
}
