/**
 * A Base Sepolia rehearsal: anvil with chain id 84532 and Circle's USDC (FiatToken v2.2) at Base Sepolia's
 * real address with its real EIP-712 domain, Tollgate deployed and served as a user would do it there,
 * and the README's flows driven against it — one-time payment, subscription, metered usage, a channel
 * and an agent run with the rule planner.
 *
 * The user's side is given only what a Base Sepolia user sets: the network, the RPC URL and keys. Token,
 * domain and contract addresses come from the deployment, `src/chain/networks.ts`, the facilitator's
 * `/supported` and the offers. What a faucet does (ETH for gas, USDC minted by FiatToken's minter) is the
 * test's own part.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { decodePaymentRequiredHeader } from "@x402/core/http";
import { Hono } from "hono";
import {
  type Address,
  type Chain,
  createPublicClient,
  createTestClient,
  createWalletClient,
  domainSeparator,
  getAddress,
  type Hex,
  http,
  type PublicClient,
  type TestClient,
  type Transport,
} from "viem";
import { generatePrivateKey, type PrivateKeyAccount, privateKeyToAccount } from "viem/accounts";
import { baseSepolia } from "viem/chains";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { z } from "zod";
import { createBudgetLedger } from "../src/agent/budget/createBudgetLedger.ts";
import { createSpecialist, type Specialist } from "../src/agent/createSpecialist.ts";
import { discoverTools } from "../src/agent/discoverTools.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import { defineCapability } from "../src/agent/tools/capability.ts";
import { readChannel } from "../src/chain/actions/channels/readChannel.ts";
import { setChannelOperator } from "../src/chain/actions/channels/setChannelOperator.ts";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { mintFiatToken } from "../src/chain/actions/usdc/mintFiatToken.ts";
import { placeFiatToken } from "../src/chain/actions/usdc/placeFiatToken.ts";
import { fiatTokenV2_2Abi } from "../src/chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import { deploymentFilePath, readDeploymentFile } from "../src/chain/deploymentFile.ts";
import { getNetworkConfig } from "../src/chain/networks.ts";
import { type Anvil, startAnvil } from "../src/chain/startAnvil.ts";
import { createPayer, type Payer } from "../src/client/createPayer.ts";
import { fetchWithPayment } from "../src/client/fetchWithPayment.ts";
import { type RunningServer, serveApp } from "../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../src/facilitator/proofKeys.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../src/gate/honoPaymentGate.ts";
import { type PaymentGate, type PaymentGateControls, paymentGate } from "../src/gate/paymentGate.ts";
import type { GatePricingEntry } from "../src/gate/paymentGateOptions.ts";
import { createFacilitatorClient, type FacilitatorClient } from "../src/http/facilitatorClient.ts";
import { parseUnitsExact } from "../src/protocol/amount.ts";
import { ChannelCloseResponseSchema } from "../src/protocol/channels.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { isTollgateError } from "../src/protocol/errors.ts";
import type { SupportedNetwork } from "../src/protocol/facilitator.ts";
import { UsageSummarySchema } from "../src/protocol/subscriptions.ts";
import { createChannelFetch } from "../src/schemes/channel/client/channelFetch.ts";
import { createChannelWallet } from "../src/schemes/channel/client/channelWallet.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { runCli } from "./support/runCli.ts";

const NETWORK = "eip155:84532";
const CHAIN_ID = 84532;
/** Circle's USDC on Base Sepolia, and the domain its FiatTokenV2_2 proxy reports there. */
const BASE_SEPOLIA_USDC = getAddress("0x036CbD53842c5426634e7929541eC2318f3dCF7e");
const BASE_SEPOLIA_USDC_DOMAIN = { name: "USDC", version: "2" } as const;
/** The deterministic-deployment proxy (Arachnid's), which anvil predeploys as Base Sepolia has it. */
const DETERMINISTIC_DEPLOYER = getAddress("0x4e59b44847b379578588920ca78fbf26c0b4956c");
const ETH = 10n ** 18n;
const USDC = (text: string) => parseUnitsExact(text);
// Each step may run the CLI as its own process (`tollgate deploy`, `plan`, a facilitator restart): a tsx
// start takes seconds on a loaded machine, hence the describes' timeouts.

let anvil: Anvil;
let chain: Chain;
let publicClient: PublicClient<Transport, Chain>;
let testClient: TestClient<"anvil", Transport, Chain>;
const dir = mkdtempSync(join(tmpdir(), "tollgate-rehearsal-"));

/** The faucet's part: Circle's minter and anvil's balances. */
let circle: PrivateKeyAccount;
/** What the user holds: keys, and the RPC URL. */
const keys = {
  deployer: generatePrivateKey(),
  gas: generatePrivateKey(),
  proof: generateProofKey().seed,
  provider: generatePrivateKey(),
  payer: generatePrivateKey(),
  seller: generatePrivateKey(),
  agent: generatePrivateKey(),
};
const provider = privateKeyToAccount(keys.provider);

let facilitator: FacilitatorProcess;
let facilitatorEnv: Record<string, string>;
let facilitatorClient: FacilitatorClient;
/** The facilitator's `/supported` entry for Base Sepolia: where gates and payers learn token and contracts. */
let served: SupportedNetwork;
let providerApiKey: string;
const cleanups: (() => Promise<unknown>)[] = [];

/** The facilitator's signer as `/supported` lists it: the operator a provider names for metered plans and channels. */
const gasAddress = (): Address => served.signers?.[0] ?? expect.fail("the facilitator lists no signer");
const wallet = (key: Hex) =>
  createWalletClient({ chain, transport: http(anvil.rpcUrl), account: privateKeyToAccount(key) });
const balanceOf = (owner: Address) => getTokenBalance(publicClient, { token: BASE_SEPOLIA_USDC, owner });

/** The faucet: ETH through anvil, USDC minted by FiatToken's configured minter. */
async function faucet(address: Address, amounts: { eth?: bigint; usdc?: bigint }) {
  if (amounts.eth !== undefined) await testClient.setBalance({ address, value: amounts.eth });
  if (amounts.usdc !== undefined) {
    const minter = createWalletClient({ chain, transport: http(anvil.rpcUrl), account: circle });
    const hash = await mintFiatToken(minter, { token: BASE_SEPOLIA_USDC, to: address, amount: amounts.usdc });
    expect((await publicClient.waitForTransactionReceipt({ hash })).status).toBe("success");
  }
}

/** `tollgate deploy` as a user runs it on Base Sepolia: the RPC URL, the network, the deployer's key. */
function deploy() {
  return runCli(["deploy", "--rpc-url", anvil.rpcUrl, "--network", NETWORK], {
    env: { TOLLGATE_DIR: dir, TOLLGATE_DEPLOYER_KEY: keys.deployer },
  });
}

/** What a Base Sepolia user sets for every `tollgate` command. */
const userEnv = () => ({
  TOLLGATE_DIR: dir,
  TOLLGATE_NETWORK: NETWORK,
  TOLLGATE_RPC_URL: anvil.rpcUrl,
});

beforeAll(async () => {
  anvil = await startAnvil({ chainId: CHAIN_ID, accounts: 1 });
  cleanups.push(() => anvil.stop());
  chain = { ...baseSepolia, rpcUrls: { default: { http: [anvil.rpcUrl] } } };
  publicClient = createPublicClient({ chain, transport: http(anvil.rpcUrl), pollingInterval: 50 });
  testClient = createTestClient({ chain, transport: http(anvil.rpcUrl), mode: "anvil" });

  // Circle's part: FiatToken v2.2 at Base Sepolia's address, initialized as there, with a minter.
  circle = privateKeyToAccount(generatePrivateKey());
  await faucet(circle.address, { eth: 10n * ETH });
  await placeFiatToken(createWalletClient({ chain, transport: http(anvil.rpcUrl), account: circle }), {
    testClient,
    address: BASE_SEPOLIA_USDC,
    name: BASE_SEPOLIA_USDC_DOMAIN.name,
    admin: privateKeyToAccount(generatePrivateKey()).address,
  });

  for (const key of [keys.deployer, keys.gas, keys.provider, keys.seller]) {
    await faucet(privateKeyToAccount(key).address, { eth: 1n * ETH });
  }
  const deployed = await deploy();
  expect(deployed.code, deployed.stdout + deployed.stderr).toBe(0);
  expect(deployed.stdout + deployed.stderr).not.toContain(keys.deployer.slice(2));
  facilitatorEnv = {
    ...userEnv(),
    TOLLGATE_GAS_KEY: keys.gas,
    TOLLGATE_PROOF_KEYS: keys.proof,
    TOLLGATE_PORT: "0",
    LOG_LEVEL: "warn",
    // anvil's fees are not Base Sepolia's: it suggests a 1 gwei tip on a base fee near 1 gwei, about a
    // thousand times what Base Sepolia asks, and at that fee settling 0.01 USDC costs 0.24 USD. The
    // minimum that follows the fee is checked on its own devnets (test/facilitator.feeFloor.test.ts).
    TOLLGATE_MAX_FEE_SHARE: "off",
  };
  facilitator = await startFacilitatorProcess(facilitatorEnv);
  cleanups.push(() => facilitator.stop());
  facilitatorClient = createFacilitatorClient({ url: facilitator.url, fetch });
  const supported = await facilitatorClient.supported();
  served = supported.networks.find((n) => n.network === NETWORK)!;
  // The provider's API key, as `tollgate provider register` gives it on a real network.
  const registered = await runCli(["provider", "register", "--json"], {
    env: {
      TOLLGATE_DIR: dir,
      TOLLGATE_FACILITATOR_URL: facilitator.url,
      TOLLGATE_PROVIDER_KEY: keys.provider,
    },
  });
  expect(registered.code, registered.stderr).toBe(0);
  providerApiKey = z.object({ apiKey: z.string() }).parse(JSON.parse(registered.stdout)).apiKey;
}, 240_000);

afterAll(async () => {
  for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  rmSync(dir, { recursive: true, force: true });
});

describe("the chain a Base Sepolia user meets", { timeout: 90_000 }, () => {
  it("is chain 84532 with the deterministic deployer and Circle's USDC under Base Sepolia's domain", async () => {
    expect(await publicClient.getChainId()).toBe(CHAIN_ID);
    expect(await publicClient.getCode({ address: DETERMINISTIC_DEPLOYER })).toMatch(/^0x[0-9a-f]{2,}$/);
    const read = <F extends "name" | "version" | "DOMAIN_SEPARATOR" | "decimals" | "symbol">(
      functionName: F,
    ) => publicClient.readContract({ address: BASE_SEPOLIA_USDC, abi: fiatTokenV2_2Abi, functionName });
    expect(await read("name")).toBe("USDC");
    expect(await read("version")).toBe("2");
    expect(await read("symbol")).toBe("USDC");
    expect(await read("decimals")).toBe(6);
    expect(await read("DOMAIN_SEPARATOR")).toBe(
      domainSeparator({
        domain: { ...BASE_SEPOLIA_USDC_DOMAIN, chainId: CHAIN_ID, verifyingContract: BASE_SEPOLIA_USDC },
      }),
    );
    // The network table Tollgate defaults from says the same.
    expect(getNetworkConfig(NETWORK)).toMatchObject({
      usdc: BASE_SEPOLIA_USDC,
      tokenDomain: BASE_SEPOLIA_USDC_DOMAIN,
    });
  });

  it("gets a deployment file naming Base Sepolia's USDC with its domain, and a second deploy sends nothing", async () => {
    const file = readDeploymentFile(deploymentFilePath(dir, CHAIN_ID));
    expect(file).toMatchObject({
      network: NETWORK,
      chainId: CHAIN_ID,
      token: {
        address: BASE_SEPOLIA_USDC,
        ...BASE_SEPOLIA_USDC_DOMAIN,
        symbol: "USDC",
        decimals: 6,
        kind: "network",
      },
    });
    for (const address of Object.values(file!.contracts)) {
      expect(await publicClient.getCode({ address: address as Address })).toMatch(/^0x[0-9a-f]{2,}$/);
    }
    const deployer = privateKeyToAccount(keys.deployer).address;
    const nonce = await publicClient.getTransactionCount({ address: deployer });
    const again = await deploy();
    expect(again.code, again.stderr).toBe(0);
    expect(again.stdout).toContain("nothing to deploy");
    expect(await publicClient.getTransactionCount({ address: deployer })).toBe(nonce);
    expect(readDeploymentFile(deploymentFilePath(dir, CHAIN_ID))?.contracts).toEqual(file!.contracts);
  });

  it("gets a facilitator that serves Base Sepolia's USDC under its on-chain domain and Tollgate's contracts", () => {
    expect(served.tokens).toEqual([
      expect.objectContaining({
        address: BASE_SEPOLIA_USDC,
        eip712: BASE_SEPOLIA_USDC_DOMAIN,
        decimals: 6,
        symbol: "USDC",
      }),
    ]);
    expect(served.signers).toEqual([privateKeyToAccount(keys.gas).address]);
    expect(served.subscriptionManager).toMatch(/^0x[0-9a-fA-F]{40}$/);
    expect(served.channels).toMatch(/^0x[0-9a-fA-F]{40}$/);
  });
});

/** A Hono API on a free port behind a gate configured as a Base Sepolia user would. */
async function serveGated(
  route: string,
  pricing: GatePricingEntry[],
  extra: Partial<Parameters<typeof paymentGate>[0]> = {},
): Promise<{ url: string; gate: PaymentGate & PaymentGateControls; close(): Promise<void> }> {
  let origin = "";
  const app = new Hono<PaymentGateEnv>();
  let gate: (PaymentGate & PaymentGateControls) | undefined;
  app.use("/api/*", (c, next) => honoPaymentGate(gate!)(c, next));
  app.get(route, (c) => c.json({ ok: true, paidWith: c.get("payment")?.scheme ?? "subscription" }));
  const server: RunningServer = await serveApp(app);
  origin = server.url;
  gate = paymentGate({
    payTo: provider.address,
    network: NETWORK,
    token: served.tokens[0]!.address,
    facilitator: facilitator.url,
    memoSecret: "a-rehearsal-memo-secret-of-at-least-32-bytes",
    publicOrigin: origin,
    providerApiKey,
    subscriptionEventPollMs: 0,
    usageFlushIntervalMs: 0,
    routes: { [`GET ${route}`]: { pricing } },
    ...extra,
  });
  await gate.ready();
  const close = async () => {
    await gate!.close();
    await server.close();
  };
  cleanups.push(close);
  return { url: `${origin}${route}`, gate, close };
}

/** A payer with USDC from the faucet and no ETH, knowing only the network and the facilitator. */
async function newPayer(
  usdc: string,
  key: Hex = generatePrivateKey(),
): Promise<{ payer: Payer; address: Address }> {
  const account = privateKeyToAccount(key);
  await faucet(account.address, { usdc: USDC(usdc) });
  return {
    payer: createPayer({ account, network: NETWORK, facilitator: facilitator.url }),
    address: account.address,
  };
}

/** Creates a plan with `tollgate plan create`, as the README does, from the provider's key. */
async function createPlanWithCli(args: string[]): Promise<bigint> {
  const result = await runCli(["plan", "create", ...args, "--json"], {
    env: { ...userEnv(), TOLLGATE_PROVIDER_KEY: keys.provider },
  });
  expect(result.stderr).toBe("");
  expect(result.code).toBe(0);
  return BigInt(z.object({ planId: z.string() }).parse(JSON.parse(result.stdout)).planId);
}

describe("the README's flows on Base Sepolia", { timeout: 90_000 }, () => {
  it("pays once: 402, a signed transfer settled on chain, 200", async () => {
    const api = await serveGated("/api/reports/42", [{ type: "one-time", price: "0.50" }]);
    // A standard x402 client reads the token and the domain to sign under from the 402 alone.
    const unpaid = await fetch(api.url);
    expect(unpaid.status).toBe(402);
    expect(decodePaymentRequiredHeader(unpaid.headers.get("payment-required")!).accepts[0]).toMatchObject({
      network: NETWORK,
      asset: BASE_SEPOLIA_USDC,
      amount: "500000",
      extra: BASE_SEPOLIA_USDC_DOMAIN,
    });
    const { payer, address } = await newPayer("1");
    const before = await balanceOf(provider.address);
    const response = await fetchWithPayment(fetch, payer, { maxPrice: "1" })(api.url);
    expect(response.status).toBe(200);
    expect(await balanceOf(address)).toBe(USDC("0.5"));
    expect(await balanceOf(provider.address)).toBe(before + USDC("0.5"));

    const analytics = await runCli(["analytics", "--json"], {
      env: { TOLLGATE_DIR: dir, TOLLGATE_FACILITATOR_URL: facilitator.url, TOLLGATE_API_KEY: providerApiKey },
    });
    expect(analytics.code, analytics.stderr).toBe(0);
    expect(JSON.parse(analytics.stdout).summary).toMatchObject({ volume: "500000", count: 1 });
  });

  it("refuses at start-up a gate priced under the facilitator's minimum payment (0.01 USDC off a devnet)", async () => {
    const cheap = paymentGate({
      payTo: provider.address,
      network: NETWORK,
      token: served.tokens[0]!.address,
      facilitator: facilitator.url,
      memoSecret: "a-rehearsal-memo-secret-of-at-least-32-bytes",
      routes: { "GET /api/detect": { price: "0.005" } },
    });
    await expect(cheap.ready()).rejects.toMatchObject({
      code: "InvalidRequest",
      message: expect.stringMatching(/price 0\.005 is below the facilitator's minimum payment of 0\.01/),
    });
    await cheap.close();
  });

  it("subscribes gaslessly, rides on the subscription, and is refused while paused", async () => {
    const planId = await createPlanWithCli(["--amount", "9", "--interval", "30d"]);
    const api = await serveGated("/api/report", [
      { type: "one-time", amount: 500_000 },
      { type: "subscription", plan: planId.toString() },
    ]);
    const { payer, address } = await newPayer("20");
    const before = await balanceOf(provider.address);
    let subscriptionId: bigint | undefined;
    const paidFetch = fetchWithPayment(fetch, payer, {
      maxPrice: "1",
      subscription: { maxPrice: "10" },
      onSubscribe: (use) => {
        subscriptionId = use.subscriptionId;
      },
    });
    expect((await paidFetch(api.url)).status).toBe(200);
    expect(subscriptionId).toBeDefined();
    expect((await paidFetch(api.url)).status).toBe(200);
    expect(await balanceOf(address)).toBe(USDC("11"));
    expect(await balanceOf(provider.address)).toBe(before + USDC("9"));

    await payer.pause(subscriptionId!);
    await api.gate.syncEvents();
    const refused = await paidFetch(api.url).catch((error: unknown) => error);
    expect(isTollgateError(refused, "SubscriptionNotActive")).toBe(true);
    await payer.resume(subscriptionId!);
    await api.gate.syncEvents();
    expect((await paidFetch(api.url)).status).toBe(200);
    expect(await balanceOf(address)).toBe(USDC("11"));
  });

  it("meters: included units free, overage deducted on chain by the facilitator as the plan's operator", async () => {
    const planId = await createPlanWithCli([
      "--amount",
      "5",
      "--interval",
      "30d",
      "--included",
      "3",
      "--overage",
      "0.01",
    ]);
    const operator = await runCli(["plan", "operator", gasAddress()], {
      env: { ...userEnv(), TOLLGATE_PROVIDER_KEY: keys.provider },
    });
    expect(operator.code, operator.stderr).toBe(0);
    const api = await serveGated("/api/search", [{ type: "subscription", plan: planId.toString() }]);
    const { payer, address } = await newPayer("10");
    const subscriptionId = await payer.subscribe({ planId, maxOverage: "0.05" });
    const headers = await payer.subscriptionHeaders(subscriptionId, new URL(api.url).origin);
    for (let i = 0; i < 5; i++) expect((await fetch(api.url, { headers })).status).toBe(200);
    await api.gate.flushUsage();
    let settled = 0n;
    for (let i = 0; i < 200 && settled !== USDC("0.02"); i++) {
      const response = await fetch(`${facilitator.url}/usage?subscriptionId=${subscriptionId}`, {
        headers: { authorization: `Bearer ${providerApiKey}` },
      });
      settled = BigInt(UsageSummarySchema.parse(await response.json()).settled.amount);
      if (settled !== USDC("0.02")) await new Promise((resolve) => setTimeout(resolve, 100));
    }
    expect(settled).toBe(USDC("0.02"));
    expect(await balanceOf(address)).toBe(USDC("10") - USDC("5") - USDC("0.02"));
  });

  it("pays through a channel with vouchers, claimed and closed cooperatively on chain", async () => {
    const channels = served.channels!;
    const hash = await setChannelOperator(wallet(keys.provider), {
      channels,
      operator: gasAddress(),
      allowed: true,
    });
    await publicClient.waitForTransactionReceipt({ hash });
    const price = USDC("0.01");
    const api = await serveGated("/api/item", [{ type: "channel", amount: price }], {
      // The TollgateChannels contract: the one the facilitator lists, from the deployment file.
      schemeOptions: { channel: { journal: join(dir, "vouchers.journal") } },
    });
    const { address } = await newPayer("5", keys.payer);
    const channelWallet = createChannelWallet({
      account: privateKeyToAccount(keys.payer),
      network: NETWORK,
      facilitator: facilitatorClient,
      calls: 20,
    });
    const paidFetch = createChannelFetch(fetch, { wallet: channelWallet, maxPrice: price });
    for (let i = 0; i < 10; i++) expect((await paidFetch(api.url)).status).toBe(200);
    const [channel] = channelWallet.channels();
    expect(channel).toMatchObject({ status: "open", deposit: 20n * price, signed: 10n * price });
    const providerBefore = await balanceOf(provider.address);
    await api.close();
    const close = await fetch(`${facilitator.url}/channels/${channel!.channelId}/close`, {
      method: "POST",
      headers: { authorization: `Bearer ${providerApiKey}` },
    });
    expect([200, 202], await close.clone().text()).toContain(close.status);
    ChannelCloseResponseSchema.parse(await close.json());
    let onChain = await readChannel(publicClient, { channels, channelId: channel!.channelId });
    for (let i = 0; i < 200 && !onChain.closed; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      onChain = await readChannel(publicClient, { channels, channelId: channel!.channelId });
    }
    expect(onChain).toMatchObject({ closed: true, claimed: 10n * price });
    expect(await balanceOf(address)).toBe(USDC("5") - 10n * price);
    expect(await balanceOf(provider.address)).toBe(providerBefore + 10n * price);
  });

  it("runs an agent with the rule planner that buys a specialist's tool under its budget", async () => {
    const shout = defineCapability({
      name: "shout",
      description: "Upper-cases a text.",
      input: z.object({ text: z.string() }),
      output: z.object({ text: z.string() }),
      pricing: [{ type: "one-time", price: "0.01" }],
      handler: async ({ text }) => ({ text: text.toUpperCase() }),
    });
    const seller = privateKeyToAccount(keys.seller);
    const specialist: Specialist = createSpecialist({
      name: "shouter",
      account: seller,
      capabilities: [shout],
      facilitator: facilitator.url,
      network: NETWORK,
      token: served.tokens[0]!.address,
    });
    const { url } = await specialist.start();
    cleanups.push(() => specialist.stop());
    const { payer, address } = await newPayer("1", keys.agent);
    const store: Store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
    cleanups.push(() => store.close());
    const budget = createBudgetLedger({ store, clock: systemClock });
    await budget.setLimits("researcher", { total: USDC("0.05") });
    const tools = await discoverTools({ urls: [url!], agent: "researcher", payer, budget });
    const orchestrator = createOrchestrator({ tools: tools.map((t) => t.tool), model: "rules" });
    const run = await orchestrator.run("Shout each document", {
      documents: [{ id: "memo-1", text: "Sales rose in May." }],
    });
    expect(run.answer).toContain("SALES ROSE IN MAY.");
    expect((await budget.report("researcher")).spent.total).toBe(USDC("0.01"));
    expect(await balanceOf(address)).toBe(USDC("0.99"));
    expect(await balanceOf(seller.address)).toBe(USDC("0.01"));
  });
});

describe("subscription periods on Base Sepolia", { timeout: 90_000 }, () => {
  // Last in the file: the chain's clock jumps a day ahead of the wall clock that one-time payments sign by.
  it("renews a subscription whose period has ended when the restarted facilitator's keeper runs", async () => {
    const planId = await createPlanWithCli(["--amount", "1", "--interval", "1d"]);
    const { payer, address } = await newPayer("3");
    await payer.subscribe({ planId });
    expect(await balanceOf(address)).toBe(USDC("2"));

    await testClient.increaseTime({ seconds: 86_400 + 60 });
    await testClient.mine({ blocks: 1 });
    // The keeper runs as the facilitator starts (then every 30 s): a restart renews what fell due.
    await facilitator.stop();
    facilitator = await startFacilitatorProcess(facilitatorEnv);
    let balance = await balanceOf(address);
    for (let i = 0; i < 300 && balance !== USDC("1"); i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      balance = await balanceOf(address);
    }
    expect(balance, facilitator.output()).toBe(USDC("1"));
  });
});

type FacilitatorProcess = { url: string; child: ChildProcess; output(): string; stop(): Promise<void> };

/**
 * `tollgate facilitator` as its own process, the way an operator starts it: configured by exactly
 * `env` (plus PATH and HOME), ready once it says where it listens.
 */
function startFacilitatorProcess(env: Record<string, string>): Promise<FacilitatorProcess> {
  const main = join(import.meta.dirname, "../src/cli/main.ts");
  const child = spawn(process.execPath, ["--import", import.meta.resolve("tsx"), main, "facilitator"], {
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  const stop = () =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.once("exit", () => resolve());
      child.kill("SIGTERM");
    });
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`tollgate facilitator did not start: ${output.slice(-2000)}`));
    }, 90_000);
    const onData = (chunk: Buffer) => {
      output = (output + chunk.toString()).slice(-20_000);
      const match = /facilitator listening on (\S+)/.exec(output);
      if (match !== null) {
        clearTimeout(timer);
        resolve({ url: match[1]!, child, output: () => output, stop });
      }
    };
    child.stdout.on("data", onData);
    child.stderr.on("data", onData);
    child.once("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`tollgate facilitator exited (${code}): ${output.slice(-2000)}`));
    });
  });
}
