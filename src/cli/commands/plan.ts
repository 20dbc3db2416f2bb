/**
 * `tollgate plan create | deprecate | show | operator`: a provider's subscription plans on the
 * SubscriptionManager, sent from the provider's own key (plans are paid to whoever creates them).
 * Defaults (RPC, manager, token, dev keys) come from `.tollgate/devnet.json` after `tollgate devnet up`;
 * on another chain, manager and token come from the deployment file `tollgate deploy` wrote for it and the
 * network's USDC (src/chain/networks.ts), so a provider on Base Sepolia sets only the RPC URL and its key.
 */
import { resolve } from "node:path";
import { parseArgs } from "node:util";
import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  defineChain,
  type Hash,
  type PublicClient,
  type TransactionReceipt,
  type Transport,
  type WalletClient,
} from "viem";
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import { createPlan } from "../../chain/actions/subscriptions/createPlan.ts";
import { deprecatePlan } from "../../chain/actions/subscriptions/deprecatePlan.ts";
import { getPlan } from "../../chain/actions/subscriptions/getPlan.ts";
import { setOperator } from "../../chain/actions/subscriptions/setOperator.ts";
import { getTokenDecimals } from "../../chain/actions/usd/getTokenDecimals.ts";
import { getTokenSymbol } from "../../chain/actions/usd/getTokenSymbol.ts";
import { deploymentFilePath, readDeploymentFile } from "../../chain/deploymentFile.ts";
import { type DevnetFile, readDevnetFile } from "../../chain/devnetFile.ts";
import { getPlanIdFromReceipt } from "../../chain/events/decodeSubscriptionEvents.ts";
import { devnetChain, getNetworkConfig } from "../../chain/networks.ts";
import { rpcTransport } from "../../chain/rpcTransport.ts";
import { parseRpcUrls } from "../../chain/rpcUrls.ts";
import { AddressSchema } from "../../protocol/address.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { parseDuration } from "../devnet.ts";
import { inlineNegativeValues, MONEY_NOTATION, parseCount, parseMoney } from "../money.ts";

export const summary = "create | deprecate | show | operator — a provider's subscription plans on chain";

const PrivateKeySchema = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, { error: "expected a 0x-prefixed 32-byte private key" })
  .transform((key) => key as `0x${string}`);

const PlanEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  /** One URL or several, comma-separated (read by parseRpcUrls). */
  TOLLGATE_RPC_URL: z.string().optional(),
  TOLLGATE_SUBSCRIPTION_MANAGER: AddressSchema.optional(),
  TOLLGATE_TOKEN: AddressSchema.optional(),
  TOLLGATE_PROVIDER_KEY: PrivateKeySchema.optional(),
});

type CommandOutput = { log(line: string): void; error(line: string): void };

export type PlanCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  /** Directory `.tollgate` is found in (default: the process's). */
  cwd?: string | undefined;
};

const usage = `usage: tollgate plan <command> [--rpc <url>] [--manager 0x…] [--dir .tollgate] [--json]
  create --amount <USDC> --interval <30d|12h|seconds> [--included <count>] [--overage <USDC per unit>]
         [--token 0x…] [--key 0x… | --account <devnet index>]
                       create a plan paid to the key's address: --amount above zero, --overage 0 or
                       more (default 0), --included a whole number of metered units (default 0)
  deprecate <id> [--successor <id>] [--key 0x… | --account <devnet index>]
                       close a plan to new subscribers, pointing them to its successor
  show <id>            a plan's terms
  operator <address> [--revoke] [--key 0x… | --account <devnet index>]
                       let a facilitator (its /supported signer) deduct metered usage on your plans
RPC, manager and token default to TOLLGATE_RPC_URL, TOLLGATE_SUBSCRIPTION_MANAGER and TOLLGATE_TOKEN,
then to .tollgate/devnet.json (on the devnet's chain), then to the deployment-<chain id>.json that
\`tollgate deploy\` wrote and the network's USDC; the key to TOLLGATE_PROVIDER_KEY.
${MONEY_NOTATION} (with another --token: its text, and its smallest units)`;

function parsePlanArgs(argv: string[]) {
  return parseArgs({
    args: inlineNegativeValues(argv, ["--amount", "--overage", "--included"]),
    allowPositionals: true,
    options: {
      amount: { type: "string" },
      interval: { type: "string" },
      included: { type: "string", default: "0" },
      overage: { type: "string", default: "0" },
      token: { type: "string" },
      successor: { type: "string" },
      revoke: { type: "boolean", default: false },
      key: { type: "string" },
      account: { type: "string" },
      rpc: { type: "string" },
      manager: { type: "string" },
      dir: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

/** What every subcommand reads: its flags, the chain with the SubscriptionManager on it, and the output. */
type PlanSession = {
  values: ReturnType<typeof parsePlanArgs>["values"];
  env: z.infer<typeof PlanEnvSchema>;
  deps: PlanCommandDeps;
  chain: Chain;
  /** The devnet file, when the RPC is the devnet's chain. */
  devnet: DevnetFile | undefined;
  deployment: ReturnType<typeof readDeploymentFile>;
  manager: Address;
  client: PublicClient<Transport, Chain>;
  /** The value as JSON with `--json`, else the lines. */
  print(value: unknown, lines: string[]): void;
  /** The provider's wallet on the chain (its key read when first needed). */
  wallet(): WalletClient<Transport, Chain, PrivateKeyAccount>;
  /** Waits for a transaction's receipt; a revert is ChainUnavailable. */
  wait(hash: Hash): Promise<TransactionReceipt>;
};

/** Runs `tollgate plan …`; returns the exit code. */
export async function planCommand(argv: string[], deps: PlanCommandDeps): Promise<number> {
  const { values, positionals } = parsePlanArgs(argv);
  const [command, target] = positionals;
  if (values.help === true || command === undefined) {
    deps.out.log(usage);
    return values.help === true ? 0 : 2;
  }
  const session = await planSession(values, deps);
  if (typeof session === "number") return session;
  switch (command) {
    case "create":
      return createPlanCommand(session);
    case "deprecate":
      return deprecatePlanCommand(session, target);
    case "show": {
      const id = planId(target, "show <id>");
      const terms = await describe(session.client, session.manager, id);
      session.print(terms.value, terms.lines);
      return 0;
    }
    case "operator":
      return operatorCommand(session, target);
    default:
      deps.out.error(`tollgate plan: unknown command "${command}"\n\n${usage}`);
      return 2;
  }
}

/** The chain and the SubscriptionManager the command works on, or the exit code when there is none. */
async function planSession(
  values: PlanSession["values"],
  deps: PlanCommandDeps,
): Promise<PlanSession | number> {
  const env = parseWire(PlanEnvSchema, deps.env, { what: "environment" });
  const dir = resolve(deps.cwd ?? process.cwd(), values.dir ?? env.TOLLGATE_DIR);
  const devnetFile = readDevnetFile(dir);
  const rpc = values.rpc ?? env.TOLLGATE_RPC_URL ?? devnetFile?.rpcUrl;
  if (rpc === undefined) {
    deps.out.error(
      "tollgate plan: no chain: pass --rpc (or set TOLLGATE_RPC_URL), or run `tollgate devnet up` first",
    );
    return 2;
  }
  const rpcUrls = parseRpcUrls(rpc, values.rpc === undefined ? "TOLLGATE_RPC_URL" : "--rpc");
  const chain = await chainAt(rpcUrls);
  // Defaults come from what describes this very chain: the devnet file only when the RPC is the devnet's
  // chain, then the deployment `tollgate deploy` wrote for it, then the network's own USDC.
  const devnet = devnetFile?.chainId === chain.id ? devnetFile : undefined;
  const deployment = readDeploymentFile(deploymentFilePath(dir, chain.id));
  const managerText =
    values.manager ??
    env.TOLLGATE_SUBSCRIPTION_MANAGER ??
    devnet?.contracts.subscriptionManager ??
    deployment?.contracts.subscriptionManager;
  if (managerText === undefined) {
    deps.out.error(
      `tollgate plan: no SubscriptionManager on chain ${chain.id}: pass --manager, or run \`tollgate deploy\` (it writes ${deploymentFilePath(dir, chain.id)})`,
    );
    return 2;
  }
  const manager = parseWire(AddressSchema, managerText, { what: "--manager" });
  const client = createPublicClient({
    chain,
    transport: rpcTransport(rpcUrls),
    pollingInterval: 100,
  }) as PublicClient<Transport, Chain>;
  return {
    values,
    env,
    deps,
    chain,
    devnet,
    deployment,
    manager,
    client,
    print(value, lines) {
      if (values.json) deps.out.log(JSON.stringify(value, null, 2));
      else for (const line of lines) deps.out.log(line);
    },
    wallet() {
      const key = providerKey(values, env, devnet);
      return createWalletClient({
        chain,
        transport: rpcTransport(rpcUrls),
        account: privateKeyToAccount(key),
      });
    },
    async wait(hash) {
      const receipt = await client.waitForTransactionReceipt({ hash });
      if (receipt.status !== "success")
        throw new TollgateError("ChainUnavailable", `transaction ${hash} reverted`);
      return receipt;
    },
  };
}

function planId(text: string | undefined, what: string): bigint {
  if (text === undefined || !/^[1-9][0-9]{0,30}$/.test(text)) {
    throw new TollgateError("InvalidRequest", `${what} must be a plan id (a positive integer)`);
  }
  return BigInt(text);
}

/** `tollgate plan create --amount … --interval …`. */
async function createPlanCommand(session: PlanSession): Promise<number> {
  const { values, env, deps, devnet, deployment, chain, client, manager } = session;
  if (values.amount === undefined || values.interval === undefined) {
    deps.out.error(`tollgate plan create: --amount and --interval are required\n\n${usage}`);
    return 2;
  }
  const tokenText =
    values.token ??
    env.TOLLGATE_TOKEN ??
    devnet?.contracts.usd ??
    deployment?.token.address ??
    getNetworkConfig(`eip155:${chain.id}`)?.usdc;
  if (tokenText === undefined) {
    deps.out.error("tollgate plan create: no token: pass --token");
    return 2;
  }
  const token = parseWire(AddressSchema, tokenText, { what: "--token" });
  const decimals = await getTokenDecimals(client, { token });
  const amount = parseMoney(values.amount, "--amount", { decimals });
  const overage = parseMoney(values.overage, "--overage", { decimals, allowZero: true });
  const included = parseCount(values.included, "--included");
  let interval: number;
  try {
    interval = parseDuration(values.interval);
  } catch (cause) {
    throw new TollgateError("InvalidRequest", `--interval: ${(cause as Error).message}`, { cause });
  }
  if (interval <= 0) throw new TollgateError("InvalidRequest", "--interval must be above zero");
  const walletClient = session.wallet();
  const hash = await createPlan(walletClient, {
    manager,
    token,
    amount,
    interval: BigInt(interval),
    includedUnits: included,
    overageUnitPrice: overage,
  });
  const id = getPlanIdFromReceipt(await session.wait(hash));
  const terms = await describe(client, manager, id);
  session.print({ ...terms.value, transaction: hash }, [`plan ${id} created (tx ${hash})`, ...terms.lines]);
  return 0;
}

/** `tollgate plan deprecate <id> [--successor <id>]`. */
async function deprecatePlanCommand(session: PlanSession, target: string | undefined): Promise<number> {
  const { values, manager } = session;
  const id = planId(target, "deprecate <id>");
  const successor = values.successor === undefined ? 0n : planId(values.successor, "--successor");
  const hash = await deprecatePlan(session.wallet(), { manager, planId: id, successorPlanId: successor });
  await session.wait(hash);
  session.print(
    {
      planId: id.toString(),
      successorPlanId: successor === 0n ? null : successor.toString(),
      transaction: hash,
    },
    [
      successor === 0n
        ? `plan ${id} deprecated (tx ${hash})`
        : `plan ${id} deprecated; new subscribers are pointed to plan ${successor} (tx ${hash})`,
    ],
  );
  return 0;
}

/** `tollgate plan operator <address> [--revoke]`. */
async function operatorCommand(session: PlanSession, target: string | undefined): Promise<number> {
  const { values, manager } = session;
  const operator = parseWire(AddressSchema, target, { what: "operator <address>" });
  const hash = await setOperator(session.wallet(), { manager, operator, allowed: !values.revoke });
  await session.wait(hash);
  session.print({ operator, allowed: !values.revoke, transaction: hash }, [
    values.revoke
      ? `${operator} may no longer deduct usage on your plans (tx ${hash})`
      : `${operator} may now deduct metered usage on your plans (tx ${hash})`,
  ]);
  return 0;
}

export function run(argv: string[]): Promise<number> {
  return planCommand(argv, { env: process.env, out: console });
}

async function chainAt(rpcUrls: string[]): Promise<Chain> {
  const id = await createPublicClient({ transport: rpcTransport(rpcUrls) }).getChainId();
  return (
    getNetworkConfig(`eip155:${id}`)?.chain ??
    defineChain({ ...devnetChain, id, rpcUrls: { default: { http: rpcUrls } } })
  );
}

function providerKey(
  values: { key?: string | undefined; account?: string | undefined },
  env: { TOLLGATE_PROVIDER_KEY?: `0x${string}` | undefined },
  devnet: DevnetFile | undefined,
): `0x${string}` {
  if (values.key !== undefined) return parseWire(PrivateKeySchema, values.key, { what: "--key" });
  if (values.account !== undefined) {
    const index = Number(values.account);
    const entry = Number.isInteger(index) ? devnet?.accounts[index] : undefined;
    if (entry === undefined) {
      throw new TollgateError("InvalidRequest", `--account ${values.account}: no such devnet account`);
    }
    return parseWire(PrivateKeySchema, entry.privateKey, { what: "devnet account key" });
  }
  if (env.TOLLGATE_PROVIDER_KEY !== undefined) return env.TOLLGATE_PROVIDER_KEY;
  throw new TollgateError(
    "InvalidRequest",
    "no provider key: pass --key 0x…, --account <devnet index> or set TOLLGATE_PROVIDER_KEY",
  );
}

/** A plan's terms, read from the chain, with amounts in the token's units. */
async function describe(client: PublicClient<Transport, Chain>, manager: Address, planId: bigint) {
  const plan = await getPlan(client, { manager, planId });
  if (/^0x0{40}$/i.test(plan.provider)) throw new TollgateError("NotFound", `no plan ${planId}`);
  const [decimals, symbol] = await Promise.all([
    getTokenDecimals(client, { token: plan.token }),
    getTokenSymbol(client, { token: plan.token }).catch(() => "tokens"),
  ]);
  const price = `${formatUnitsExact(plan.amount, decimals)} ${symbol}`;
  const value = {
    planId: planId.toString(),
    provider: plan.provider,
    token: plan.token,
    amount: plan.amount.toString(),
    interval: Number(plan.interval),
    includedUnits: plan.includedUnits.toString(),
    overageUnitPrice: plan.overageUnitPrice.toString(),
    deprecated: plan.deprecated,
    successorPlanId: plan.successorPlanId === 0n ? null : plan.successorPlanId.toString(),
  };
  const lines = [
    `plan ${planId}: ${price} every ${formatInterval(Number(plan.interval))}, paid to ${plan.provider}`,
    `  included units per period: ${plan.includedUnits}`,
    `  overage: ${formatUnitsExact(plan.overageUnitPrice, decimals)} ${symbol} per unit`,
    ...(plan.deprecated
      ? [
          plan.successorPlanId === 0n
            ? "  deprecated"
            : `  deprecated; successor plan ${plan.successorPlanId}`,
        ]
      : []),
  ];
  return { value, lines };
}

function formatInterval(seconds: number): string {
  for (const [unit, size] of [
    ["w", 604_800],
    ["d", 86_400],
    ["h", 3_600],
    ["m", 60],
  ] as const) {
    if (seconds % size === 0) return `${seconds / size}${unit}`;
  }
  return `${seconds}s`;
}
