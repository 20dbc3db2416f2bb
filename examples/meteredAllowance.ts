/**
 * Metered allowance: a plan of 5 USDC per 30 days with 3 included searches, then 0.01 USDC a search
 * deducted from the subscriber's allowance up to the overage cap it chose (0.05 USDC). Included units
 * are free; overage is recorded by the gate and deducted on chain in batches by the facilitator (no
 * transaction per request); at the cap the gate answers 402 `AllowanceExhausted`; raising the cap
 * (a gasless, relayed call) lets the subscriber continue.
 *
 *   npx tsx examples/meteredAllowance.ts
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { createPlan, getPlanIdFromReceipt, getTokenBalance, setOperator } from "tollgate/chain";
import { createFacilitatorClient, createPayer, registerProvider } from "tollgate/client";
import { serveApp } from "tollgate/facilitator";
import { honoPaymentGate, type PaymentGateEnv, paymentGate } from "tollgate/gate";
import { formatUnitsExact, PaymentRequiredSchema, parseUnitsExact } from "tollgate/protocol";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

export type MeteredAllowanceResult = {
  planPrice: bigint;
  unitPrice: bigint;
  /** Per request: 200, or the 402's error code. */
  beforeRaise: (number | string)[];
  afterRaise: (number | string)[];
  /** What moved on chain from the subscriber to the provider, plan period included. */
  subscriberPaid: bigint;
  providerReceived: bigint;
};

export async function main(options: ExampleOptions = {}): Promise<MeteredAllowanceResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  const stops: (() => Promise<void>)[] = [];
  try {
    const { devnet, facilitatorUrl } = stack;
    const provider = devnet.accounts[1]!;
    const wallet = devnet.walletClient(provider);
    const wait = (hash: `0x${string}`) => devnet.publicClient.waitForTransactionReceipt({ hash });
    const balanceOf = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

    // 1. The provider: an API key from the facilitator (it proves control of its payout address),
    //    the facilitator as operator of its plans (so it can deduct usage), and a metered plan.
    const { apiKey } = await registerProvider(
      createFacilitatorClient({ url: facilitatorUrl, fetch }),
      provider.account,
    );
    await wait(
      await setOperator(wallet, {
        manager: devnet.contracts.subscriptionManager,
        operator: stack.facilitatorSigner.address,
        allowed: true,
      }),
    );
    const planPrice = parseUnitsExact("5");
    const unitPrice = parseUnitsExact("0.01");
    const receipt = await wait(
      await createPlan(wallet, {
        manager: devnet.contracts.subscriptionManager,
        token: devnet.contracts.usd,
        amount: planPrice,
        interval: 30n * 86_400n,
        includedUnits: 3n,
        overageUnitPrice: unitPrice,
      }),
    );
    const planId = getPlanIdFromReceipt(receipt);
    print(`plan #${planId}: 5 USDC per 30 days, 3 searches included, then 0.01 USDC each`);

    // 2. The gate: every search is one unit of the plan's allowance.
    const api = new Hono<PaymentGateEnv>();
    const server = await serveApp(api);
    stops.push(() => server.close());
    const gate = paymentGate({
      payTo: provider.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: facilitatorUrl,
      memoSecret: randomBytes(32), // one process; several instances share one from the environment
      publicOrigin: server.url,
      providerApiKey: apiKey,
      routes: { "GET /api/search": { pricing: [{ type: "subscription", plan: planId }], units: 1 } },
    });
    stops.push(() => gate.close());
    api.use("/api/*", honoPaymentGate(gate));
    api.get("/api/search", (c) => c.json({ hits: [c.req.query("q") ?? ""] }));

    // 3. A subscriber with an overage cap of 0.05 USDC a period.
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: parseUnitsExact("20") });
    const before = {
      subscriber: await balanceOf(account.address),
      provider: await balanceOf(provider.address),
    };
    const payer = createPayer({ account, network: devnet.network, facilitator: facilitatorUrl });
    const subscriptionId = await payer.subscribe({ planId, maxOverage: "0.05" });
    print(`subscription #${subscriptionId}, overage cap 0.05 USDC`);
    const headers = await payer.subscriptionHeaders(subscriptionId, server.url);
    const search = async (q: number): Promise<number | string> => {
      const response = await fetch(`${server.url}/api/search?q=${q}`, { headers });
      if (response.status !== 402) return response.status;
      return PaymentRequiredSchema.parse(await response.json()).error;
    };

    const beforeRaise: (number | string)[] = [];
    for (let i = 0; i < 9; i++) beforeRaise.push(await search(i));
    print(`9 searches → ${beforeRaise.join(", ")}`);

    // 4. The subscriber raises its cap to 0.08 USDC. A capped subscription is re-read from the chain
    //    at most once a second, so the gate sees the new cap a moment later.
    await payer.setMaxOverage(subscriptionId, "0.08");
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const afterRaise: (number | string)[] = [];
    for (let i = 0; i < 4; i++) afterRaise.push(await search(100 + i));
    print(`cap raised to 0.08 USDC; 4 more searches → ${afterRaise.join(", ")}`);

    // 5. Overage reaches the chain in batches: flush now and wait for the deductions to land.
    const charged = planPrice + 8n * unitPrice;
    await gate.flushUsage();
    for (let i = 0; i < 200 && before.subscriber - (await balanceOf(account.address)) < charged; i++) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    const subscriberPaid = before.subscriber - (await balanceOf(account.address));
    const providerReceived = (await balanceOf(provider.address)) - before.provider;
    print(
      `on chain: subscriber paid ${formatUnitsExact(subscriberPaid)} USDC (plan + 8 overage units), provider received ${formatUnitsExact(providerReceived)} USDC`,
    );
    return { planPrice, unitPrice, beforeRaise, afterRaise, subscriberPaid, providerReceived };
  } finally {
    for (const stop of stops.reverse()) await stop();
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
