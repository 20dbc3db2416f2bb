/**
 * `tollgate devnet up | advance <30d|12h|3600> | down | status`: a local anvil chain with Tollgate
 * deployed, left running in the background and described in `.tollgate/devnet.json` so that other
 * commands, scripts and tests can find it.
 */
import { existsSync, readFileSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { createPublicClient, createTestClient, http } from "viem";
import { type DevnetFile, DevnetFileSchema, describeDevnet, writeDevnetFile } from "../chain/devnetFile.ts";
import { startAnvil } from "../chain/startAnvil.ts";
import { setUpDevnet } from "../chain/startDevnet.ts";
import { formatUnitsExact } from "../protocol/amount.ts";
import { ensurePrivateDir, tightenPrivateFile } from "../store/privateFiles.ts";
import { DEFAULT_PORTS } from "./defaultPorts.ts";
import { inlineNegativeValues, MONEY_NOTATION, parseMoney } from "./money.ts";

export { type DevnetFile, DevnetFileSchema } from "../chain/devnetFile.ts";

const units: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86_400, w: 604_800 };

/** `"30d"` → 2 592 000, `"12h"` → 43 200, `"3600"` → 3600 (seconds). Throws on anything else. */
export function parseDuration(text: string): number {
  const match = /^([0-9]+)([smhdw]?)$/.exec(text.trim());
  if (match === null) throw new Error(`not a duration: "${text}" (use e.g. 30d, 12h, 90m or seconds)`);
  return Number(match[1]) * (units[match[2] || "s"] ?? 1);
}

type Output = { log(line: string): void; error(line: string): void };

const usage = `usage: tollgate devnet <command> [--dir .tollgate]
  up [--port ${DEFAULT_PORTS.devnet}] [--accounts 10] [--balance 10000] [--block-time <s>] [--token usdc]
                      start anvil in the background, deploy Tollgate and USDC (Circle's FiatToken v2.2,
                      EIP-712 domain "USD Coin"/"2" as on Base, the first account its minter), fund the
                      accounts (--balance each, 0 or more); refuses a port something else already listens on
  advance <30d|12h|seconds>
                      move chain time forward and mine a block
  status              show the running devnet
  down                stop it
The devnet is described in <dir>/devnet.json; <dir> is --dir, else TOLLGATE_DIR, else .tollgate.
${MONEY_NOTATION}`;

/** Runs `tollgate devnet …`; returns the process exit code. */
export async function devnetCommand(
  argv: string[],
  out: Output = console,
  env: Record<string, string | undefined> = process.env,
): Promise<number> {
  const { values, positionals } = parseArgs({
    args: inlineNegativeValues(argv, ["--balance"]),
    allowPositionals: true,
    options: {
      dir: { type: "string" },
      port: { type: "string", default: String(DEFAULT_PORTS.devnet) },
      accounts: { type: "string", default: "10" },
      balance: { type: "string", default: "10000" },
      "block-time": { type: "string" },
      token: { type: "string", default: "usdc" },
      help: { type: "boolean", short: "h" },
    },
  });
  const [command, arg] = positionals;
  // Like every other command: the flag, then TOLLGATE_DIR, then .tollgate.
  const dir = resolve(values.dir ?? (env.TOLLGATE_DIR || ".tollgate"));
  const file = join(dir, "devnet.json");
  if (values.help === true || command === undefined) {
    out.log(usage);
    return values.help === true ? 0 : 2;
  }
  switch (command) {
    case "up":
      return up(dir, file, values, out);
    case "advance":
      return advance(file, arg, out);
    case "status":
      return status(file, out);
    case "down":
      return down(file, out);
    default:
      out.error(`tollgate devnet: unknown command "${command}"\n${usage}`);
      return 2;
  }
}

function readDevnetFile(file: string): DevnetFile | undefined {
  if (!existsSync(file)) return undefined;
  // It holds the accounts' keys: an older version may have left it readable by others.
  tightenPrivateFile(file);
  return DevnetFileSchema.parse(JSON.parse(readFileSync(file, "utf8")));
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

async function up(
  dir: string,
  file: string,
  flags: {
    port: string;
    accounts: string;
    balance: string;
    "block-time"?: string | undefined;
    token: string;
  },
  out: Output,
): Promise<number> {
  const running = readDevnetFile(file);
  if (running !== undefined && isAlive(running.pid)) {
    out.error(
      `a devnet is already running at ${running.rpcUrl} (pid ${running.pid}); run \`tollgate devnet down\` first`,
    );
    return 1;
  }
  const port = Number(flags.port);
  const count = Number(flags.accounts);
  if (!Number.isInteger(port) || port < 1 || port > 65_535) throw new Error(`bad --port ${flags.port}`);
  if (!Number.isInteger(count) || count < 1) throw new Error(`bad --accounts ${flags.accounts}`);
  const balance = parseMoney(flags.balance, "--balance", { allowZero: true });
  const token = flags.token;
  if (token !== "usdc") throw new Error(`bad --token ${token} (a devnet settles in usdc)`);
  if (running !== undefined) {
    // The devnet it describes is gone: other commands would read its RPC URL and reach whatever
    // listens there now, so it goes whether or not this start succeeds.
    rmSync(file, { force: true });
    out.log(`removed ${file}: its devnet (pid ${running.pid}) is no longer running`);
  }
  // Before anything is started or written: a node already on the port would answer for the anvil
  // started here (which dies with "Address already in use"), and Tollgate would be deployed onto it.
  const occupant = await portOccupant(port);
  if (occupant !== undefined) {
    out.error(
      `tollgate devnet: port ${port} is in use${occupant === "" ? "" : ` (${occupant})`}; ` +
        `stop what listens there, or start the devnet on another port with --port`,
    );
    return 1;
  }
  // The Tollgate directory holds the devnet's keys and the stores: its owner's only.
  ensurePrivateDir(dir);
  const anvil = await startAnvil({
    port,
    accounts: count,
    blockTime: flags["block-time"] === undefined ? undefined : Number(flags["block-time"]),
    detachedLogFile: join(dir, "anvil.log"),
  });
  try {
    const devnet = await setUpDevnet(anvil.rpcUrl, count, balance, () => anvil.stop(), { token });
    writeDevnetFile(file, describeDevnet(devnet, anvil.pid));
    out.log(`devnet up: ${devnet.rpcUrl} (chain ${devnet.chain.id}, ${devnet.network}, pid ${anvil.pid})`);
    out.log(`  USDC (FiatToken)     ${devnet.contracts.usd}`);
    out.log(`  SubscriptionManager  ${devnet.contracts.subscriptionManager}`);
    out.log(`  BatchSettler         ${devnet.contracts.batchSettler}`);
    out.log(`  TollgateChannels     ${devnet.contracts.channels}`);
    out.log(`  ${count} accounts with ${formatUnitsExact(balance)} USDC each; keys in ${file}`);
    return 0;
  } catch (error) {
    await anvil.stop();
    throw error;
  }
}

/**
 * `undefined` when 127.0.0.1:`port` is free; otherwise what listens there, as far as it says
 * (`"an Ethereum node, chain id 31337"`, or `""` when it does not speak JSON-RPC).
 */
async function portOccupant(port: number): Promise<string | undefined> {
  const free = await new Promise<boolean>((done) => {
    const probe = createServer();
    probe.once("error", () => done(false));
    probe.listen({ port, host: "127.0.0.1", exclusive: true }, () => probe.close(() => done(true)));
  });
  if (free) return undefined;
  try {
    const response = await fetch(`http://127.0.0.1:${port}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] }),
      signal: AbortSignal.timeout(2_000),
    });
    const body = (await response.json()) as { result?: unknown };
    return typeof body.result === "string"
      ? `an Ethereum node answers there, chain id ${Number(body.result)}`
      : "";
  } catch {
    return "";
  }
}

function clients(devnet: DevnetFile) {
  const transport = http(devnet.rpcUrl);
  return {
    publicClient: createPublicClient({ transport, cacheTime: 0 }),
    testClient: createTestClient({ transport, mode: "anvil" }),
  };
}

async function advance(file: string, arg: string | undefined, out: Output): Promise<number> {
  const devnet = readDevnetFile(file);
  if (devnet === undefined) {
    out.error("no devnet is running (run `tollgate devnet up`)");
    return 1;
  }
  if (arg === undefined) {
    out.error("usage: tollgate devnet advance <30d|12h|seconds>");
    return 2;
  }
  const seconds = parseDuration(arg);
  const { publicClient, testClient } = clients(devnet);
  await testClient.increaseTime({ seconds });
  await testClient.mine({ blocks: 1 });
  const block = await publicClient.getBlock();
  out.log(`advanced ${seconds} s: block ${block.number}, chain time ${chainTime(block.timestamp)}`);
  // EIP-3009 windows are signed against the wall clock (capped by the gate's memo expiry), so a
  // chain clock far ahead of it refuses every new one-time payment as expired.
  out.log(
    "note: chain time now runs ahead of this machine's clock; subscriptions, renewals and metering carry on, " +
      "but new one-time payments are refused as expired on this devnet until it is restarted (`tollgate devnet down && tollgate devnet up`)",
  );
  return 0;
}

async function status(file: string, out: Output): Promise<number> {
  const devnet = readDevnetFile(file);
  if (devnet === undefined || !isAlive(devnet.pid)) {
    out.log("devnet: not running");
    return 1;
  }
  const block = await clients(devnet).publicClient.getBlock();
  out.log(
    `devnet: ${devnet.rpcUrl} (pid ${devnet.pid}), block ${block.number}, chain time ${chainTime(block.timestamp)}`,
  );
  out.log(`  token                ${devnet.contracts.usd}${tokenLabel(devnet.token)}`);
  out.log(`  SubscriptionManager  ${devnet.contracts.subscriptionManager}`);
  out.log(`  BatchSettler         ${devnet.contracts.batchSettler}`);
  // A devnet started before channels existed has no TollgateChannels.
  if (devnet.contracts.channels !== undefined) {
    out.log(`  TollgateChannels     ${devnet.contracts.channels}`);
  }
  return 0;
}

/**
 * `1765000000` → `1765000000 (2025-12-06T05:46:40.000Z)`: the epoch first, as scripts read it, then
 * the same instant in ISO 8601 UTC for people.
 */
function chainTime(timestamp: bigint): string {
  return `${timestamp} (${new Date(Number(timestamp) * 1000).toISOString()})`;
}

/** Which token it is, for status; nothing for a file written before devnets recorded it. */
function tokenLabel(token: DevnetFile["token"]): string {
  if (token === undefined) return "";
  return ` (USDC, Circle's FiatToken v2.2; EIP-712 domain "${token.name}" version ${token.version})`;
}

async function down(file: string, out: Output): Promise<number> {
  const devnet = readDevnetFile(file);
  if (devnet === undefined) {
    out.log("devnet: not running");
    return 0;
  }
  if (isAlive(devnet.pid)) {
    process.kill(devnet.pid, "SIGTERM");
    for (let i = 0; i < 100 && isAlive(devnet.pid); i++) await new Promise((r) => setTimeout(r, 50));
  }
  rmSync(file, { force: true });
  out.log(`devnet down (pid ${devnet.pid})`);
  return 0;
}
