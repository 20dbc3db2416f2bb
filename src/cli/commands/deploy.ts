/**
 * `tollgate deploy`: puts Tollgate's contracts (BatchSettler, SubscriptionManager, TollgateChannels) on a
 * chain at deterministic addresses through the deterministic-deployment proxy, checks the settlement
 * token's EIP-712 domain, and writes `<dir>/deployment-<chain id>.json` for `tollgate facilitator`.
 *
 * Decisions (docs/going-live.md): the deployer key comes from TOLLGATE_DEPLOYER_KEY or an encrypted
 * keystore (`--keystore`), never from a flag, since a command line is visible to every user of the
 * machine (`ps`) and stays in shell history; it is never printed. The RPC URL is not written to the file
 * (provider URLs often embed an API key). Running it again deploys nothing that is there already.
 */

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import {
  type Address,
  type Chain,
  createPublicClient,
  createWalletClient,
  defineChain,
  formatEther,
  type Hash,
  http,
  type PublicClient,
} from "viem";
import { type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import { assertNotForeign, deployDeterministic } from "../../chain/actions/deploy/deployDeterministic.ts";
import { deterministicDeployer, tollgateSalt } from "../../chain/actions/deploy/deterministicAddress.ts";
import {
  type PlannedDeployment,
  planTollgateDeployment,
} from "../../chain/actions/deploy/planTollgateDeployment.ts";
import { readSettlementToken, type SettlementToken } from "../../chain/actions/deploy/readSettlementToken.ts";
import { deployFiatToken } from "../../chain/actions/usdc/deployFiatToken.ts";
import {
  type DeploymentFile,
  deploymentFilePath,
  readDeploymentFile,
  writeDeploymentFile,
} from "../../chain/deploymentFile.ts";
import { devnetChainId, getNetworkConfig } from "../../chain/networks.ts";
import { redactRpcUrlsInError } from "../../chain/rpcUrls.ts";
import { decryptKeystore } from "../../chain/signers/decryptKeystore.ts";
import { AddressSchema } from "../../protocol/address.ts";
import { TollgateError } from "../../protocol/errors.ts";
import { chainIdOf, type Network, NetworkSchema, networkOf } from "../../protocol/network.ts";
import { readSecretLine } from "../readSecretLine.ts";

export const summary =
  "deploy Tollgate's contracts on a chain (deterministic addresses) and write its deployment file";

const usage = `usage: tollgate deploy --rpc-url URL [--network eip155:N] [--token 0x… | --test-token]
                       [--keystore FILE] [--dir .tollgate] [--confirmations 1] [--dry-run] [--json]

Deploys BatchSettler, SubscriptionManager and TollgateChannels through the deterministic-deployment proxy
${deterministicDeployer} (CREATE2, salt keccak256("tollgate")), so each lands at the same
address on every chain, and writes <dir>/deployment-<chain id>.json, from which \`tollgate facilitator\`
takes the token and the contract addresses. Contracts already at their address (same code) are not
deployed again: running it twice is safe. Other code at one of the addresses is an error.

Steps to go live (docs/going-live.md walks through each):
  1. tollgate deploy --rpc-url URL --dry-run
       what would be sent, at which addresses, its gas and its cost at the current fee; sends nothing and
       needs no funded key (with no key it estimates from an empty address).
  2. fund the deployer with that much ETH (plus a margin), then
     TOLLGATE_DEPLOYER_KEY=0x… tollgate deploy --rpc-url URL        (or --keystore FILE)
  3. fund the facilitator's gas key (a different key: TOLLGATE_GAS_KEY) with ETH: it pays every settlement.
  4. TOLLGATE_NETWORK=eip155:N TOLLGATE_RPC_URL=URL TOLLGATE_GAS_KEY=0x… TOLLGATE_PROOF_KEYS=… tollgate facilitator
       reads <dir>/deployment-<chain id>.json (or the file TOLLGATE_DEPLOYMENT names).
  5. each provider registers its payout address at the facilitator:
     TOLLGATE_PROVIDER_KEY=0x… tollgate provider register --facilitator https://… --save

options:
  --rpc-url URL        the chain's JSON-RPC endpoint (or TOLLGATE_RPC_URL); it must support eth_call state
                       overrides (geth, reth, anvil and the usual providers do). It is not written anywhere.
  --network eip155:N   the chain expected; default: the RPC's. A different chain at the RPC is an error.
  --token 0x…          the settlement token on a chain Tollgate does not know; default: the network's USDC
                       (Base, Base Sepolia). Its name(), version() and DOMAIN_SEPARATOR() are read and
                       checked: a token whose separator is not that of {name, version, chain id, address}
                       is refused.
  --test-token         deploy a fresh test USDC (Circle's FiatToken v2.2) that the deployer owns and can
                       mint. Refused on any chain but a devnet (chain id ${devnetChainId}). Run again, it
                       reuses the test token of the deployment file.
  --keystore FILE      the deployer key as an encrypted JSON keystore (Web3 Secret Storage v3, as
                       \`cast wallet import\` or geth write it); its password comes from
                       TOLLGATE_KEYSTORE_PASSWORD or is asked for without echo.
  --dir DIR            the Tollgate directory (or TOLLGATE_DIR; default .tollgate)
  --confirmations N    blocks to wait for on each deployment (default 1)
  --dry-run            send nothing: print each transaction, the address it lands at, whether it is
                       deployed already, its estimated gas and cost, and the total.
  --json               print the result as JSON
The deployer key: TOLLGATE_DEPLOYER_KEY (0x…) or --keystore. It is never accepted on the command line and
never printed. It needs ETH for the deployments only; the facilitator never uses it.
environment: TOLLGATE_RPC_URL TOLLGATE_DEPLOYER_KEY TOLLGATE_KEYSTORE_PASSWORD TOLLGATE_DIR`;

const PrivateKeySchema = z
  .string()
  .trim()
  .regex(/^(0x)?[0-9a-fA-F]{64}$/, { error: "expected a 32-byte hex private key" })
  .transform((key) => (key.startsWith("0x") ? key : `0x${key}`) as `0x${string}`);

const DeployEnvSchema = z.object({
  TOLLGATE_DIR: z.string().min(1).default(".tollgate"),
  TOLLGATE_RPC_URL: z.url({ protocol: /^(https?|wss?)$/ }).optional(),
  TOLLGATE_DEPLOYER_KEY: PrivateKeySchema.optional(),
  TOLLGATE_KEYSTORE_PASSWORD: z.string().optional(),
});

/** Flags that would put a secret on the command line; refused, each with the way that is offered instead. */
const secretFlags = /^--?(private-?key|deployer-?key|key|mnemonic|password|keystore-?password)(=.*)?$/i;

type CommandOutput = { log(line: string): void; error(line: string): void };

export type DeployCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  /** Asks for the keystore's password (no echo on a terminal). */
  askPassword(question: string): Promise<string>;
  /** The current time, for `deployedAt`. */
  now(): Date;
};

/** A step of the run, as printed and as recorded. */
type Step = {
  contract: PlannedDeployment["contract"] | "token";
  address: Address | undefined;
  status: PlannedDeployment["status"] | "sent";
  gas: bigint | undefined;
  transactionHash?: Hash | undefined;
};

/** Runs `tollgate deploy …`; returns the exit code. */
export async function deployCommand(argv: string[], deps: DeployCommandDeps): Promise<number> {
  const refused = argv.find((arg) => secretFlags.test(arg));
  if (refused !== undefined) {
    deps.out.error(
      `tollgate deploy: ${refused.split("=")[0]} is refused: a key or password on the command line is visible to every user of this machine (ps) and stays in the shell's history. Set TOLLGATE_DEPLOYER_KEY, or use --keystore FILE with TOLLGATE_KEYSTORE_PASSWORD or the password prompt.`,
    );
    return 2;
  }
  const { values, positionals } = parseDeployArgs(argv);
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  if (positionals.length > 0) {
    deps.out.error(`tollgate deploy: takes no arguments (got "${positionals[0]}")\n\n${usage}`);
    return 2;
  }
  const env = parseEnv(deps.env);
  const rpcUrl = values["rpc-url"] ?? env.TOLLGATE_RPC_URL;
  if (rpcUrl === undefined) {
    deps.out.error(`tollgate deploy: no RPC URL: pass --rpc-url URL or set TOLLGATE_RPC_URL\n\n${usage}`);
    return 2;
  }
  if (values["test-token"] && values.token !== undefined) {
    deps.out.error("tollgate deploy: --token and --test-token exclude each other");
    return 2;
  }
  try {
    return await deployWith(rpcUrl, values, env, deps);
  } catch (error) {
    // viem's errors name the URL they called, and an RPC URL often holds a provider's API key.
    // (viem prints it without its user and password, which a plain search for the URL would miss).
    redactRpcUrlsInError(error, [rpcUrl]);
    throw error;
  }
}

type DeployFlags = ReturnType<typeof parseDeployArgs>["values"];

function parseDeployArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      "rpc-url": { type: "string" },
      network: { type: "string" },
      token: { type: "string" },
      "test-token": { type: "boolean", default: false },
      keystore: { type: "string" },
      dir: { type: "string" },
      confirmations: { type: "string" },
      "dry-run": { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

async function deployWith(
  rpcUrl: string,
  values: DeployFlags,
  env: z.infer<typeof DeployEnvSchema>,
  deps: DeployCommandDeps,
): Promise<number> {
  const confirmations = parseConfirmations(values.confirmations);
  const dir = values.dir ?? env.TOLLGATE_DIR;
  const dryRun = values["dry-run"];

  const probe = createPublicClient({ transport: http(parseRpcUrl(rpcUrl)) });
  const chainId = await readChainId(probe);
  if (values.network !== undefined) assertAskedNetwork(values.network, chainId);
  const network = networkOf(chainId);
  const chain = chainFor(chainId, rpcUrl);
  const publicClient = createPublicClient({ chain, transport: http(rpcUrl), cacheTime: 0 }) as PublicClient;
  if (values["test-token"]) assertTestTokenAllowed(chainId);

  const account = await loadDeployer(values.keystore, env, deps, !dryRun);
  const file = deploymentFilePath(dir, chainId);
  const previous = readDeploymentFile(file);

  // The token first: a deployment for a token payers cannot sign for is of no use.
  const tokenChoice = await chooseToken(publicClient, {
    network,
    token: values.token,
    testToken: values["test-token"],
    previous: previous?.token.kind === "test" ? previous : undefined,
  });

  const plan = await planTollgateDeployment(publicClient, { from: account?.address ?? emptyAddress });
  // Someone else's code at one of the addresses: refuse before sending anything.
  for (const step of plan) assertNotForeign(step);

  if (dryRun) {
    await printPlannedDeployment(publicClient, deps, values.json, {
      network,
      chainId,
      plan,
      tokenChoice,
      from: account?.address,
    });
    return 0;
  }
  if (account === undefined) throw new Error("unreachable: a key is loaded unless --dry-run");

  const walletClient = createWalletClient({ account, chain, transport: http(rpcUrl), cacheTime: 0 });
  const sent = await sendDeployment(walletClient, publicClient, deps, { tokenChoice, plan, confirmations });
  const { deployment, unchanged } = recordDeployment(deps, {
    sent,
    previous,
    network,
    chainId,
    tokenChoice,
    deployer: account.address,
  });
  if (!unchanged) writeDeploymentFile(file, deployment);
  printDeployment(deps, values, { file, dir, network, sent, deployment, unchanged });
  return 0;
}

/** --network must name the chain the RPC serves. */
function assertAskedNetwork(asked: string, chainId: number): void {
  const network = NetworkSchema.safeParse(asked);
  if (!network.success)
    throw new TollgateError("InvalidRequest", `--network: expected eip155:<chain id>, not "${asked}"`);
  if (chainIdOf(network.data) !== chainId) {
    throw new TollgateError(
      "UnsupportedNetwork",
      `--network ${network.data} was asked for, but the RPC serves chain ${chainId} (${networkOf(chainId)}): check the RPC URL`,
      { details: { expected: network.data, chainId } },
    );
  }
}

/** A test token is deployed on a devnet only. */
function assertTestTokenAllowed(chainId: number): void {
  if (chainId === devnetChainId) return;
  throw new TollgateError(
    "UnsupportedNetwork",
    `--test-token is refused on chain ${chainId}: a test token's owner can mint dollars at will under USDC's name and domain, so it is deployed on a devnet (chain id ${devnetChainId}) only. Use the network's USDC, or --token <address>`,
    { details: { chainId } },
  );
}

type DeploymentPlan = Awaited<ReturnType<typeof planTollgateDeployment>>;

/** --dry-run: what would be sent, and at what fee; nothing is sent. */
async function printPlannedDeployment(
  publicClient: PublicClient,
  deps: DeployCommandDeps,
  json: boolean,
  run: {
    network: Network;
    chainId: number;
    plan: DeploymentPlan;
    tokenChoice: TokenChoice;
    from: Address | undefined;
  },
): Promise<void> {
  const fee = await currentFee(publicClient);
  const steps: Step[] = [
    ...(run.tokenChoice.kind === "deploy-test"
      ? [{ contract: "token" as const, address: undefined, status: "absent" as const, gas: undefined }]
      : []),
    ...run.plan.map((p) => ({ contract: p.contract, address: p.address, status: p.status, gas: p.gas })),
  ];
  printDryRun(deps.out, json, {
    network: run.network,
    chainId: run.chainId,
    fee,
    steps,
    token: run.tokenChoice,
    from: run.from,
  });
}

interface SentDeployment {
  token: SettlementToken;
  steps: Step[];
  codeHashes: Partial<DeploymentFile["codeHashes"]>;
  transactions: DeploymentFile["transactions"];
}

/** The test token when asked for, then each planned contract (already deployed ones send nothing). */
async function sendDeployment(
  walletClient: Parameters<typeof deployDeterministic>[0],
  publicClient: PublicClient,
  deps: DeployCommandDeps,
  run: { tokenChoice: TokenChoice; plan: DeploymentPlan; confirmations: number },
): Promise<SentDeployment> {
  const transactions: DeploymentFile["transactions"] = [];
  let token: SettlementToken;
  if (run.tokenChoice.kind === "deploy-test") {
    deps.out.error("deploying a test USDC (FiatToken v2.2) owned by the deployer…");
    const deployed = await deployFiatToken(walletClient, { admin: testTokenAdmin });
    token = await readSettlementToken(publicClient, { token: deployed.token });
  } else {
    token = run.tokenChoice.token;
  }
  const steps: Step[] = [];
  const codeHashes: Partial<DeploymentFile["codeHashes"]> = {};
  for (const planned of run.plan) {
    if (planned.status === "absent") deps.out.error(`deploying ${planned.contract} at ${planned.address}…`);
    const result = await deployDeterministic(walletClient, {
      initcode: planned.initcode,
      confirmations: run.confirmations,
    });
    codeHashes[planned.contract] = result.codeHash;
    if (result.transactionHash !== undefined) {
      transactions.push({
        contract: planned.contract,
        address: result.address,
        hash: result.transactionHash,
      });
    }
    steps.push({
      contract: planned.contract,
      address: result.address,
      status: result.transactionHash === undefined ? "deployed" : "sent",
      gas: undefined,
      transactionHash: result.transactionHash,
    });
  }
  return { token, steps, codeHashes, transactions };
}

/** The deployment file's new content, or the previous one when nothing changed (the file is then not rewritten). */
function recordDeployment(
  deps: DeployCommandDeps,
  run: {
    sent: SentDeployment;
    previous: DeploymentFile | undefined;
    network: Network;
    chainId: number;
    tokenChoice: TokenChoice;
    deployer: Address;
  },
): { deployment: DeploymentFile; unchanged: boolean } {
  const { token, steps, codeHashes, transactions } = run.sent;
  const previous = run.previous;
  const contracts = Object.fromEntries(
    steps.map((s) => [s.contract, s.address]),
  ) as DeploymentFile["contracts"];
  const unchanged =
    previous !== undefined &&
    transactions.length === 0 &&
    previous.token.address === token.address &&
    JSON.stringify(previous.contracts) === JSON.stringify(contracts) &&
    JSON.stringify(previous.codeHashes) === JSON.stringify(codeHashes);
  if (unchanged) return { deployment: previous, unchanged };
  const deployment: DeploymentFile = {
    version: 1,
    network: run.network,
    chainId: run.chainId,
    token: { ...token, kind: run.tokenChoice.kind === "network" ? "network" : "test" },
    contracts,
    codeHashes: codeHashes as DeploymentFile["codeHashes"],
    salt: tollgateSalt,
    deployer: run.deployer,
    deployedAt: deps.now().toISOString(),
    transactions: [
      // Earlier runs' transactions for contracts still at the same address stay on record.
      ...(previous?.transactions ?? []).filter((t) =>
        t.contract !== "token" ? contracts[t.contract] === t.address : t.address === token.address,
      ),
      ...transactions,
    ],
  };
  return { deployment, unchanged };
}

/** The outcome: JSON, or one line a contract, the token, the summary and the next step. */
function printDeployment(
  deps: DeployCommandDeps,
  values: DeployFlags,
  run: {
    file: string;
    dir: string | undefined;
    network: Network;
    sent: SentDeployment;
    deployment: DeploymentFile;
    unchanged: boolean;
  },
): void {
  const { file, dir, network, deployment, unchanged } = run;
  const { token, steps } = run.sent;
  const sent = run.sent.transactions.length;
  if (values.json) {
    deps.out.log(JSON.stringify({ file, sent, deployment }, null, 2));
    return;
  }
  for (const step of steps) {
    deps.out.log(
      `${step.contract.padEnd(20)} ${step.address}  ${step.status === "sent" ? `deployed (${step.transactionHash})` : "already deployed"}`,
    );
  }
  deps.out.log(
    `token                ${token.address}  ${token.symbol}, EIP-712 "${token.name}" version "${token.version}"`,
  );
  deps.out.log(
    sent === 0
      ? `nothing to deploy: every contract is at its address on ${network}${unchanged ? ` (${file} is up to date)` : `; wrote ${file}`}`
      : `deployed ${sent} contract${sent === 1 ? "" : "s"} on ${network}; wrote ${file}`,
  );
  deps.out.log(
    `next: fund the facilitator's gas key, then TOLLGATE_NETWORK=${network} TOLLGATE_RPC_URL=… TOLLGATE_GAS_KEY=… TOLLGATE_PROOF_KEYS=… tollgate facilitator${values.dir === undefined ? "" : ` --dir ${dir}`}`,
  );
}

export async function run(argv: string[]): Promise<number> {
  return deployCommand(argv, {
    env: process.env,
    out: { log: (line) => console.log(line), error: (line) => console.error(line) },
    askPassword: (question) => readSecretLine(process.stdin, process.stderr, question),
    now: () => new Date(),
  });
}

/**
 * The test USDC's proxy admin: an address nobody holds a key to (a transparent proxy's admin cannot use
 * the token, and a test token never needs upgrading).
 */
const testTokenAdmin = "0x000000000000000000000000000000000000ad01" as const;

/** Estimates for a dry run without a key come from this address, which holds nothing and never signs. */
const emptyAddress = "0x000000000000000000000000000000000000dEaD" as const;

function parseEnv(environment: Record<string, string | undefined>): z.infer<typeof DeployEnvSchema> {
  const parsed = DeployEnvSchema.safeParse(environment);
  if (parsed.success) return parsed.data;
  // Never echo a value: the key's variable may hold a malformed key.
  const names = [...new Set(parsed.error.issues.map((i) => String(i.path[0])))];
  throw new TollgateError(
    "InvalidRequest",
    `tollgate deploy: ${parsed.error.issues.map((i) => `${String(i.path[0])}: ${i.message}`).join("; ")}`,
    { details: { variables: names } },
  );
}

function parseRpcUrl(text: string): string {
  const parsed = z.url({ protocol: /^https?$/ }).safeParse(text);
  if (!parsed.success) {
    throw new TollgateError("InvalidRequest", "the RPC URL must be an http(s) URL", { details: {} });
  }
  return parsed.data;
}

function parseConfirmations(text: string | undefined): number {
  if (text === undefined) return 1;
  const n = Number(text);
  if (!Number.isInteger(n) || n < 1 || n > 64) {
    throw new TollgateError("InvalidRequest", `--confirmations: expected 1 to 64, not "${text}"`);
  }
  return n;
}

async function readChainId(client: Pick<PublicClient, "getChainId">): Promise<number> {
  try {
    return await client.getChainId();
  } catch (error) {
    // The URL may hold an API key: name the failure, not the URL.
    throw new TollgateError(
      "ChainUnavailable",
      `cannot read the chain id from the RPC: ${(error as Error).message.split("\n")[0]?.replace(/https?:\/\/\S+/g, "<rpc url>")}`,
      { cause: error },
    );
  }
}

function chainFor(chainId: number, rpcUrl: string): Chain {
  const known = getNetworkConfig(networkOf(chainId));
  return defineChain({
    ...(known?.chain ?? {
      name: `chain ${chainId}`,
      nativeCurrency: { name: "Ether", symbol: "ETH", decimals: 18 },
    }),
    id: chainId,
    rpcUrls: { default: { http: [rpcUrl] } },
  });
}

/**
 * The deployer's account: TOLLGATE_DEPLOYER_KEY, or the keystore decrypted with its password. A dry run
 * needs none (`undefined`); a real run without one is an error.
 */
async function loadDeployer(
  keystore: string | undefined,
  env: z.infer<typeof DeployEnvSchema>,
  deps: DeployCommandDeps,
  required: boolean,
): Promise<PrivateKeyAccount | undefined> {
  if (keystore !== undefined && env.TOLLGATE_DEPLOYER_KEY !== undefined) {
    throw new TollgateError(
      "InvalidRequest",
      "both TOLLGATE_DEPLOYER_KEY and --keystore are given: say which key deploys by giving one",
    );
  }
  if (env.TOLLGATE_DEPLOYER_KEY !== undefined) return privateKeyToAccount(env.TOLLGATE_DEPLOYER_KEY);
  if (keystore !== undefined) {
    const password = env.TOLLGATE_KEYSTORE_PASSWORD ?? (await deps.askPassword(`password for ${keystore}: `));
    let text: string;
    try {
      text = readFileSync(keystore, "utf8");
    } catch (error) {
      throw new TollgateError(
        "InvalidRequest",
        `cannot read the keystore ${keystore}: ${(error as Error).message}`,
      );
    }
    return privateKeyToAccount(await decryptKeystore(text, password));
  }
  if (!required) return undefined;
  throw new TollgateError(
    "InvalidRequest",
    "no deployer key: set TOLLGATE_DEPLOYER_KEY, or pass --keystore FILE (a Web3 Secret Storage v3 keystore). A key is never taken from the command line. --dry-run needs none.",
  );
}

type TokenChoice = { kind: "network" | "test"; token: SettlementToken } | { kind: "deploy-test" };

/** The settlement token: --token, the network's USDC, or a test token (the previous run's, or a new one). */
async function chooseToken(
  client: PublicClient,
  options: {
    network: `eip155:${number}`;
    token: string | undefined;
    testToken: boolean;
    previous: DeploymentFile | undefined;
  },
): Promise<TokenChoice> {
  if (options.testToken) {
    if (options.previous !== undefined) {
      const token = await readSettlementToken(client, { token: options.previous.token.address }).catch(
        () => undefined,
      );
      if (token !== undefined) return { kind: "test", token };
    }
    return { kind: "deploy-test" };
  }
  const given = options.token === undefined ? undefined : AddressSchema.safeParse(options.token);
  if (given !== undefined && !given.success) {
    throw new TollgateError(
      "InvalidRequest",
      `--token: expected a 0x-prefixed 20-byte address, not "${options.token}"`,
    );
  }
  const address = given?.data ?? getNetworkConfig(options.network)?.usdc;
  if (address === undefined) {
    throw new TollgateError(
      "UnsupportedToken",
      `Tollgate knows no USDC on ${options.network}: pass the settlement token with --token <address>${chainIdOf(options.network) === devnetChainId ? ", or --test-token to deploy a test USDC on this devnet" : ""}`,
      { details: { network: options.network } },
    );
  }
  return { kind: "network", token: await readSettlementToken(client, { token: address }) };
}

/** The fee per gas a transaction sent now would pay at most: EIP-1559's maxFeePerGas, or the legacy gas price. */
async function currentFee(client: PublicClient): Promise<bigint> {
  try {
    const fees = await client.estimateFeesPerGas();
    if (fees.maxFeePerGas !== undefined) return fees.maxFeePerGas;
  } catch {
    // A chain without EIP-1559: its gas price.
  }
  return client.getGasPrice();
}

function printDryRun(
  out: CommandOutput,
  json: boolean,
  run: {
    network: string;
    chainId: number;
    fee: bigint;
    steps: Step[];
    token: TokenChoice;
    from: Address | undefined;
  },
): void {
  const total = run.steps.reduce((sum, s) => sum + (s.gas ?? 0n) * run.fee, 0n);
  const totalGas = run.steps.reduce((sum, s) => sum + (s.gas ?? 0n), 0n);
  if (json) {
    out.log(
      JSON.stringify(
        {
          dryRun: true,
          network: run.network,
          from: run.from ?? null,
          maxFeePerGas: run.fee.toString(),
          token: run.token.kind === "deploy-test" ? { deploy: "test" } : run.token.token,
          transactions: run.steps.map((s) => ({
            contract: s.contract,
            address: s.address ?? null,
            alreadyDeployed: s.status === "deployed",
            gas: s.gas?.toString() ?? null,
            cost: s.gas === undefined ? null : (s.gas * run.fee).toString(),
          })),
          totalGas: totalGas.toString(),
          totalCost: total.toString(),
        },
        null,
        2,
      ),
    );
    return;
  }
  out.log(
    `dry run on ${run.network}: nothing is sent. Fee now: ${formatEther(run.fee, "gwei")} gwei per gas (maxFeePerGas); estimated from ${run.from ?? `${emptyAddress} (no key given)`}`,
  );
  if (run.token.kind !== "deploy-test") {
    out.log(
      `token                ${run.token.token.address}  ${run.token.token.symbol}, EIP-712 "${run.token.token.name}" version "${run.token.token.version}"${run.token.kind === "test" ? " (the test token deployed before)" : ""}`,
    );
  }
  for (const s of run.steps) {
    if (s.contract === "token") {
      out.log("token                (new test USDC)  would be deployed (nine transactions, not estimated)");
      continue;
    }
    out.log(
      s.status === "deployed"
        ? `${s.contract.padEnd(20)} ${s.address}  already deployed: nothing to send`
        : `${s.contract.padEnd(20)} ${s.address}  would be deployed: ${s.gas} gas, ${formatEther((s.gas ?? 0n) * run.fee)} ETH`,
    );
  }
  out.log(
    totalGas === 0n
      ? "total: nothing to deploy"
      : `total: ${totalGas} gas, ${formatEther(total)} ETH at the current fee (fund the deployer with more: fees move)`,
  );
}
