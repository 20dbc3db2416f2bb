/**
 * What a renewal keeper runs on, built from plain settings, so a test and a child process of its can
 * make keepers over one store: the store, a public client (with its own request timeout), the gas key.
 */
import pino from "pino";
import { type Address, createPublicClient, type Hex, http } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { foundry } from "viem/chains";
import { createGasAccount } from "../../src/facilitator/gasAccount.ts";
import { createOutbox } from "../../src/facilitator/outbox/createOutbox.ts";
import { createGasKey } from "../../src/facilitator/outbox/gasKey.ts";
import { systemClock } from "../../src/protocol/clock.ts";
import {
  createRenewalKeeper,
  type RenewalKeeperOptions,
} from "../../src/schemes/subscription/facilitator/renewalKeeper.ts";
import type { Store } from "../../src/store/store.ts";

export function keeperOver(
  store: Store,
  settings: {
    rpcUrl: string;
    gasKey: Hex;
    manager: Address;
    token: Address;
    /** The token's EIP-712 domain as the chain has it (a devnet's `devnet.token`). */
    tokenName: string;
    tokenVersion: string;
    rpcTimeoutMs?: number;
  },
  options: RenewalKeeperOptions,
) {
  const publicClient = createPublicClient({
    chain: foundry,
    transport: http(settings.rpcUrl, { timeout: settings.rpcTimeoutMs ?? 10_000, retryCount: 0 }),
  });
  const logger = pino({ level: "silent" });
  const key = createGasKey({
    account: privateKeyToAccount(settings.gasKey),
    client: publicClient,
    chainId: foundry.id,
    clock: systemClock,
  });
  const outbox = createOutbox({ store, client: publicClient, key, clock: systemClock, logger });
  const gas = createGasAccount({ key, outbox, client: publicClient, logger });
  return createRenewalKeeper(
    {
      store,
      publicClient,
      gas,
      chainId: foundry.id,
      subscriptionManager: settings.manager,
      logger,
      tokens: [
        {
          address: settings.token,
          name: settings.tokenName,
          version: settings.tokenVersion,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      outbox,
    },
    { ...options, outbox },
  );
}
