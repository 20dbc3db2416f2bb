/**
 * What every example stands on: an embedded devnet (anvil with Tollgate's contracts and ten funded dev
 * accounts), an in-memory PGlite store and a facilitator serving on a free local port. On a real
 * network the facilitator runs as its own service (`tollgate facilitator`); here it lives in-process so
 * that each example starts and stops everything it needs.
 */
import { pathToFileURL } from "node:url";
import pino from "pino";
import { type Devnet, type DevnetAccount, startDevnet } from "tollgate/chain";
import { createFacilitator, generateProofKey, serveApp } from "tollgate/facilitator";
import { createStore, type Store } from "tollgate/store";

export type LocalStack = {
  devnet: Devnet;
  store: Store;
  /** The facilitator's base URL. */
  facilitatorUrl: string;
  /** The account that pays the facilitator's gas; providers make it the operator of metered plans. */
  facilitatorSigner: DevnetAccount;
  stop(): Promise<void>;
};

/** Starts a devnet, a store and a facilitator; `stop()` tears them down in reverse order. */
export async function startLocalStack(): Promise<LocalStack> {
  const devnet = await startDevnet({ accounts: 10 });
  const cleanups: (() => Promise<void>)[] = [() => devnet.stop()];
  const stop = async () => {
    for (const cleanup of cleanups.reverse()) await cleanup().catch(() => undefined);
  };
  try {
    const store = await createStore({ dataDir: "memory://" });
    cleanups.push(() => store.close());
    const facilitatorSigner = devnet.accounts[devnet.accounts.length - 1]!;
    const facilitator = createFacilitator({
      store,
      publicClient: devnet.publicClient,
      network: devnet.network,
      gasAccount: facilitatorSigner.account,
      proofKeys: [generateProofKey().key],
      batchSettler: devnet.contracts.batchSettler,
      subscriptionManager: devnet.contracts.subscriptionManager,
      tokens: [
        {
          address: devnet.contracts.usd,
          name: devnet.token.name,
          version: devnet.token.version,
          symbol: "USDC",
          decimals: 6,
        },
      ],
      logger: pino({ level: "silent" }),
    });
    await facilitator.start();
    cleanups.push(() => facilitator.stop());
    const server = await serveApp(facilitator.app);
    cleanups.push(() => server.close());
    return { devnet, store, facilitatorUrl: server.url, facilitatorSigner, stop };
  } catch (error) {
    await stop();
    throw error;
  }
}

/** Where an example's progress lines go: stdout when run as a script, a list in the tests. */
export type Print = (line: string) => void;
export type ExampleOptions = { print?: Print | undefined };
export const printToStdout: Print = (line) => process.stdout.write(`${line}\n`);

/** Runs an example's `main` when its file is the script Node was started with (`npx tsx examples/x.ts`). */
export async function runIfMain(moduleUrl: string, main: () => Promise<unknown>): Promise<void> {
  const script = process.argv[1];
  if (script !== undefined && moduleUrl === pathToFileURL(script).href) await main();
}
