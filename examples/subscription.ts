/**
 * Subscription: a provider creates a plan on chain (9 USDC per 30 days) and sells it at its gate beside
 * a one-time price; a client with test USDC and no ETH subscribes gaslessly on its first call and is
 * then served with no further payments. Paused, it is refused with `SubscriptionNotActive`; resumed, it
 * is served again.
 *
 *   npx tsx examples/subscription.ts
 */
import { randomBytes } from "node:crypto";
import { Hono } from "hono";
import { createPlan, getPlanIdFromReceipt, getTokenBalance } from "tollgate/chain";
import { createFacilitatorClient, createPayer, fetchWithPayment, registerProvider } from "tollgate/client";
import { serveApp } from "tollgate/facilitator";
import { honoPaymentGate, type PaymentGateEnv, paymentGate } from "tollgate/gate";
import { formatUnitsExact, isTollgateError, parseUnitsExact } from "tollgate/protocol";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { type ExampleOptions, printToStdout, runIfMain, startLocalStack } from "./startLocalStack.ts";

export type SubscriptionResult = {
  planId: bigint;
  planPrice: bigint;
  subscriptionId: bigint;
  /** Statuses the API answered, in order, 402s included (the first call's 402 leads to subscribing). */
  statuses: number[];
  /** Statuses of the calls made with the subscription already held. */
  subscribedStatuses: number[];
  pausedError: string | undefined;
  resumedStatus: number;
  subscriberPaid: bigint;
  providerReceived: bigint;
};

export async function main(options: ExampleOptions = {}): Promise<SubscriptionResult> {
  const print = options.print ?? printToStdout;
  const stack = await startLocalStack();
  const stops: (() => Promise<void>)[] = [];
  try {
    const { devnet, facilitatorUrl } = stack;
    const provider = devnet.accounts[1]!;
    const balanceOf = (owner: `0x${string}`) =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });

    // 1. The provider creates a plan on chain (`tollgate plan create --amount 9 --interval 30d` does the same).
    const planPrice = parseUnitsExact("9");
    const hash = await createPlan(devnet.walletClient(provider), {
      manager: devnet.contracts.subscriptionManager,
      token: devnet.contracts.usd,
      amount: planPrice,
      interval: 30n * 86_400n,
      includedUnits: 0n,
      overageUnitPrice: 0n,
    });
    const planId = getPlanIdFromReceipt(await devnet.publicClient.waitForTransactionReceipt({ hash }));
    print(`plan #${planId}: ${formatUnitsExact(planPrice)} USDC per 30 days, paid to ${provider.address}`);

    // 2. The provider's API key (its payout key signs a challenge): the gate reads the facilitator's
    //    event feed with it, which is per provider and private.
    const { apiKey } = await registerProvider(
      createFacilitatorClient({ url: facilitatorUrl, fetch }),
      provider.account,
    );

    // 3. The gate sells the plan beside a one-time price. Subscribers sign tokens for the API's public
    //    origin, so the server listens first and the gate is told where.
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
      pricing: [
        { type: "one-time", price: "0.50" },
        { type: "subscription", plan: planId },
      ],
    });
    stops.push(() => gate.close());
    api.use("/api/*", honoPaymentGate(gate));
    api.get("/api/report", (c) => c.json({ report: "quarterly" }));

    // 4. A client with test USDC and no ETH: subscribing is relayed by the facilitator (permit + intent).
    const account = privateKeyToAccount(generatePrivateKey());
    await devnet.fund(account.address, { usd: parseUnitsExact("20") });
    const payer = createPayer({ account, network: devnet.network, facilitator: facilitatorUrl });
    const statuses: number[] = [];
    const countingFetch: typeof fetch = async (input, init) => {
      const response = await fetch(input, init);
      statuses.push(response.status);
      return response;
    };
    let subscriptionId: bigint | undefined;
    const paidFetch = fetchWithPayment(countingFetch, payer, {
      maxPrice: "1",
      // Leave to subscribe: the 402 flags its plan with `subscriptionScheme`, so the default chooser
      // takes it (up to 10 USDC a period) instead of paying once. A paused subscription is then a
      // SubscriptionNotActive error, never a silent one-time payment.
      subscription: { maxPrice: "10" },
      onSubscribe: (use) => {
        subscriptionId = use.subscriptionId;
        if (use.created) print(`subscribed: subscription #${use.subscriptionId} to plan #${use.planId}`);
      },
    });
    const before = {
      subscriber: await balanceOf(account.address),
      provider: await balanceOf(provider.address),
    };

    const first = await paidFetch(`${server.url}/api/report`);
    print(`first call → ${first.status} (after a 402 and a gasless subscribe)`);
    const subscribedStatuses: number[] = [];
    for (let i = 0; i < 3; i++) subscribedStatuses.push((await paidFetch(`${server.url}/api/report`)).status);
    print(`three more calls → ${subscribedStatuses.join(", ")} (headers sent up front: no 402, no payment)`);
    if (subscriptionId === undefined) throw new Error("the client did not subscribe");

    // 5. Pause: the gate learns of it from the facilitator's event feed (polled every second by
    //    default; `syncEvents()` applies it now).
    await payer.pause(subscriptionId);
    await gate.syncEvents();
    const paused = await paidFetch(`${server.url}/api/report`).catch((error: unknown) => error);
    const pausedError = isTollgateError(paused) ? paused.code : undefined;
    print(`paused → ${pausedError}`);

    await payer.resume(subscriptionId);
    await gate.syncEvents();
    const resumed = await paidFetch(`${server.url}/api/report`);
    print(`resumed → ${resumed.status}`);

    const subscriberPaid = before.subscriber - (await balanceOf(account.address));
    const providerReceived = (await balanceOf(provider.address)) - before.provider;
    print(
      `subscriber paid ${formatUnitsExact(subscriberPaid)} USDC in all, provider received ${formatUnitsExact(providerReceived)} USDC`,
    );
    return {
      planId,
      planPrice,
      subscriptionId,
      statuses,
      subscribedStatuses,
      pausedError,
      resumedStatus: resumed.status,
      subscriberPaid,
      providerReceived,
    };
  } finally {
    for (const stop of stops.reverse()) await stop();
    await stack.stop();
  }
}

await runIfMain(import.meta.url, main);
