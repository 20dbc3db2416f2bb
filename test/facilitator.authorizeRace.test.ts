/**
 * `/authorize` is idempotent on the authorization nonce, also across instances (docs/facilitator.md): the same
 * signed payment sent to two facilitator instances on one store gets the same proof from both, even
 * when one instance reads "no row yet" and the other has queued *and settled* the payment on chain
 * before the first one simulates it. The interleaving is forced: both instances' chain clients hold the
 * payment's simulation until the other request has passed its row read, and the later one until the
 * payment is settled. A different payment reusing the nonce in the same interleaving is still a 409.
 */

import { x402Client } from "@x402/core/client";
import { HTTPFacilitatorClient } from "@x402/core/server";
import type { PaymentRequirements } from "@x402/core/types";
import { ExactEvmScheme } from "@x402/evm/exact/client";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { type Devnet, type DevnetAccount, startDevnet } from "../src/chain/startDevnet.ts";
import { findPaymentByNonce } from "../src/facilitator/paymentRecords.ts";
import type { SignedPayment } from "../src/protocol/signedPayment.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

let devnet: Devnet;
let store: Store;
let a: TestFacilitator;
let b: TestFacilitator;
let payer: DevnetAccount;
let payTo: DevnetAccount;

/**
 * Orders the simulations of one nonce: the first waits until a second arrives (both requests have
 * read "no row"), the second waits until the nonce's row is settled (its transfer used the nonce).
 */
function createSimulationOrder() {
  let nonce: string | undefined;
  let arrived = 0;
  let secondArrived!: () => void;
  let second = new Promise<void>((resolve) => {
    secondArrived = resolve;
  });
  async function untilSettled(n: string): Promise<void> {
    const deadline = Date.now() + 20_000;
    while (Date.now() < deadline) {
      if ((await findPaymentByNonce(store, n))?.status === "settled") return;
      await new Promise((resolve) => setTimeout(resolve, 25));
    }
  }
  return {
    arm(n: string) {
      nonce = n.toLowerCase();
      arrived = 0;
      second = new Promise<void>((resolve) => {
        secondArrived = resolve;
      });
    },
    async before(n: string): Promise<void> {
      if (n.toLowerCase() !== nonce) return;
      arrived += 1;
      if (arrived === 1) {
        await Promise.race([second, new Promise((resolve) => setTimeout(resolve, 10_000))]);
      } else if (arrived === 2) {
        secondArrived();
        await untilSettled(n);
      }
    },
  };
}

const order = createSimulationOrder();

/** The devnet's client, with each `simulateContract` of the armed nonce held in `order`. */
type ChainClient = Devnet["publicClient"];

function orderedClient(client: ChainClient): ChainClient {
  return new Proxy(client, {
    get(target, property, receiver) {
      if (property !== "simulateContract") return Reflect.get(target, property, receiver);
      return async (parameters: Parameters<ChainClient["simulateContract"]>[0]) => {
        const nonce = (parameters.args as readonly unknown[] | undefined)?.[5];
        if (typeof nonce === "string") await order.before(nonce);
        return target.simulateContract(parameters);
      };
    },
  });
}

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 6 });
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  // Both instances read the chain through the ordered client (the harness takes it from the devnet).
  const ordered: Devnet = { ...devnet, publicClient: orderedClient(devnet.publicClient) };
  a = await startTestFacilitator(ordered, { store, gasAccount: devnet.accounts[4]! });
  b = await startTestFacilitator(ordered, { store, gasAccount: devnet.accounts[5]! });
  payer = devnet.accounts[1]!;
  payTo = devnet.accounts[2]!;
});

afterAll(async () => {
  await a?.stop();
  await b?.stop();
  await store?.close();
  await devnet?.stop();
});

function authorize(url: string, signedPayment: SignedPayment) {
  return fetch(`${url}/authorize`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ signedPayment }),
  });
}

describe("the same payment at two instances, settled by one while the other simulates it", () => {
  it("answers both with the same proof and settles it once", async () => {
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 100_000n });
    const balance = () =>
      getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: payer.address });
    const before = await balance();
    order.arm(payment.authorization.nonce);
    const [ra, rb] = await Promise.all([authorize(a.url, payment), authorize(b.url, payment)]);
    expect([ra.status, rb.status]).toEqual([200, 200]);
    const [pa, pb] = (await Promise.all([ra.json(), rb.json()])) as { proof: unknown }[];
    expect(pa!.proof).toEqual(pb!.proof);
    expect(await balance()).toBe(before - 100_000n);
  });

  it("still answers 409 NonceAlreadyUsed to a different payment reusing the nonce in that race", async () => {
    const payment = await signTestPayment(devnet, payer, { payTo: payTo.address, amount: 100_000n });
    const other = await signTestPayment(devnet, payer, {
      payTo: payTo.address,
      amount: 100_000n,
      memo: payment.memo,
      validBefore: BigInt(payment.authorization.validBefore) - 1n,
    });
    order.arm(payment.authorization.nonce);
    const answers = await Promise.all([authorize(a.url, payment), authorize(b.url, other)]);
    const statuses = answers.map((r) => r.status).sort();
    expect(statuses).toEqual([200, 409]);
    const refused = answers.find((r) => r.status === 409)!;
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("NonceAlreadyUsed");
  });
});

describe("the same x402 settle at two instances, settled by one while the other simulates it", () => {
  it("answers a gate's identical request with the same transaction from both, settled once", async () => {
    const network = "eip155:31337" as const;
    const requirements: PaymentRequirements = {
      scheme: "exact",
      network,
      amount: "100000",
      asset: devnet.contracts.usd,
      payTo: payTo.address,
      maxTimeoutSeconds: 300,
      // As a Tollgate gate sends it: naming itself, so that it may be answered again.
      extra: { name: "USD Coin", version: "2", tollgateGate: "0123456789abcdef0123456789abcdef" },
    };
    const client = new x402Client()
      .register(network, new ExactEvmScheme(payer.account))
      .setSpendControls({ allowedAssets: [{ network, asset: devnet.contracts.usd }] });
    const payload = await client.createPaymentPayload({
      x402Version: 2,
      resource: {
        url: "http://127.0.0.1/api/report",
        description: "one report",
        mimeType: "application/json",
      },
      accepts: [requirements],
    });
    const nonce = (payload.payload as { authorization: { nonce: string } }).authorization.nonce;
    const before = await getTokenBalance(devnet.publicClient, {
      token: devnet.contracts.usd,
      owner: payer.address,
    });
    order.arm(nonce);
    const [sa, sb] = await Promise.all([
      new HTTPFacilitatorClient({ url: `${a.url}/x402` }).settle(payload, requirements),
      new HTTPFacilitatorClient({ url: `${b.url}/x402` }).settle(payload, requirements),
    ]);
    expect(sa).toMatchObject({ success: true });
    expect(sb).toEqual(sa);
    expect(
      await getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner: payer.address }),
    ).toBe(before - 100_000n);
  });
});
