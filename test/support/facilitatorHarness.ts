/**
 * Shared set-up for suites that need a real facilitator over a real devnet and store.
 * The store is PostgreSQL (a throwaway schema) when `DATABASE_URL` is set, else in-memory PGlite.
 */
import { randomBytes } from "node:crypto";
import type { Address, Hex } from "viem";
import { signTransferAuthorization } from "../../src/chain/signers/signTransferAuthorization.ts";
import type { Devnet, DevnetAccount } from "../../src/chain/startDevnet.ts";
import {
  type CreateFacilitatorOptions,
  createFacilitator,
  type Facilitator,
  type RunningServer,
  serveApp,
} from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey, type ProofKey } from "../../src/facilitator/proofKeys.ts";
import { sealMemo } from "../../src/gate/memo.ts";
import { base64UrlEncode } from "../../src/protocol/base64.ts";
import { memoNonce } from "../../src/protocol/memo.ts";
import type { SignedPayment } from "../../src/protocol/signedPayment.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";

/** A random secret per test process: gates refuse low-entropy ones such as `fill(7)`. */
export const testMemoSecret: Uint8Array = randomBytes(32);

export type TestFacilitator = {
  facilitator: Facilitator;
  store: Store;
  proofKey: ProofKey;
  server: RunningServer;
  url: string;
  stop(): Promise<void>;
};

export async function startTestFacilitator(
  devnet: Devnet,
  options: Partial<
    Pick<
      CreateFacilitatorOptions,
      | "settlement"
      | "confirmations"
      | "rpcUrl"
      | "rpcFailover"
      | "modules"
      | "webhooks"
      | "logger"
      | "dashboard"
      | "tokenPause"
      | "settlementFee"
    >
  > & {
    store?: Store;
    gasAccount?: DevnetAccount;
    /** Another BatchSettler deployment (default: the devnet's). */
    batchSettler?: Address;
    /** Proof keys, the first signing (default: one fresh key). */
    proofKeys?: readonly ProofKey[];
    /** Further USDC (FiatToken) deployments to serve beside the devnet's, under the same domain. */
    extraTokens?: readonly Address[];
  } = {},
): Promise<TestFacilitator> {
  const store = options.store ?? (await createTestStore({ databaseUrl: process.env.DATABASE_URL }));
  const proofKeys = options.proofKeys ?? [generateProofKey().key];
  const proofKey = proofKeys[0]!;
  const gas = options.gasAccount ?? devnet.accounts[devnet.accounts.length - 1]!;
  const facilitator = createFacilitator({
    store,
    ...(options.rpcUrl === undefined ? { publicClient: devnet.publicClient } : { rpcUrl: options.rpcUrl }),
    rpcFailover: options.rpcFailover,
    network: devnet.network,
    gasAccount: gas.account,
    proofKeys,
    batchSettler: options.batchSettler ?? devnet.contracts.batchSettler,
    subscriptionManager: devnet.contracts.subscriptionManager,
    channels: devnet.contracts.channels,
    tokens: [devnet.contracts.usd, ...(options.extraTokens ?? [])].map((address) => ({
      address,
      name: devnet.token.name,
      version: devnet.token.version,
      symbol: "USDC",
      decimals: 6,
    })),
    settlement: { reconcileIntervalMs: 200, ...options.settlement },
    confirmations: options.confirmations,
    modules: options.modules,
    logger: options.logger,
    dashboard: options.dashboard,
    tokenPause: options.tokenPause,
    // Suites' webhook receivers listen on loopback, which a facilitator refuses unless allowed.
    webhooks: options.webhooks ?? { allowTargets: ["127.0.0.0/8", "::1"] },
    settlementFee: options.settlementFee,
  });
  await facilitator.start();
  const server = await serveApp(facilitator.app);
  return {
    facilitator,
    store,
    proofKey,
    server,
    url: server.url,
    async stop() {
      await server.close();
      await facilitator.stop();
      if (options.store === undefined) await store.close();
    },
  };
}

/** A memo as a gate would issue it (sealed with `testMemoSecret`). */
export function testMemo(fields: {
  payTo: Address;
  amount: bigint;
  token: Address;
  network?: string;
  method?: string;
  path?: string;
  expiresAt?: number;
}): string {
  return sealMemo(testMemoSecret, {
    m: fields.method ?? "GET",
    p: fields.path ?? "/paid",
    a: fields.amount.toString(),
    t: fields.payTo,
    n: (fields.network ?? "eip155:31337") as `eip155:${number}`,
    k: fields.token,
    e: fields.expiresAt ?? Math.floor(Date.now() / 1000) + 600,
    r: base64UrlEncode(randomBytes(12)),
  });
}

/** A payer's signed payment for a fresh memo, as `createPayer().pay` would send it. */
export async function signTestPayment(
  devnet: Devnet,
  payer: DevnetAccount,
  fields: {
    payTo: Address;
    amount: bigint;
    memo?: string;
    validAfter?: bigint;
    validBefore?: bigint;
    value?: bigint;
    chainId?: number;
  },
): Promise<SignedPayment> {
  const token = devnet.contracts.usd;
  const memo = fields.memo ?? testMemo({ payTo: fields.payTo, amount: fields.amount, token });
  const now = BigInt(Math.floor(Date.now() / 1000));
  const authorization = {
    from: payer.address,
    to: fields.payTo,
    value: fields.value ?? fields.amount,
    validAfter: fields.validAfter ?? now - 60n,
    validBefore: fields.validBefore ?? now + 600n,
    nonce: memoNonce(memo),
  };
  const signature: Hex = await signTransferAuthorization(payer.account, {
    domain: {
      name: devnet.token.name,
      version: devnet.token.version,
      chainId: fields.chainId ?? devnet.chain.id,
      verifyingContract: token,
    },
    authorization,
  });
  return {
    scheme: "exact",
    network: devnet.network,
    token,
    memo,
    authorization: {
      from: authorization.from,
      to: authorization.to,
      value: authorization.value.toString(),
      validAfter: authorization.validAfter.toString(),
      validBefore: authorization.validBefore.toString(),
      nonce: authorization.nonce,
    },
    signature,
  };
}
