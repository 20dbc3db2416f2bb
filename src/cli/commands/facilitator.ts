/**
 * `tollgate facilitator`: runs the facilitator service until interrupted.
 * Configuration comes from the environment (see docs/operations.md); flags override the port and host.
 */
import { parseArgs } from "node:util";
import { privateKeyToAccount } from "viem/accounts";
import { createFacilitator, serveApp } from "../../facilitator/createFacilitator.ts";
import { createLogger } from "../../facilitator/createLogger.ts";
import { loadFacilitatorConfig } from "../../facilitator/facilitatorConfig.ts";
import { createStore } from "../../store/createStore.ts";

export const summary = "run the facilitator service (settlement, proofs, subscriptions, webhooks)";

export async function run(argv: string[]): Promise<number> {
  const { values } = parseArgs({
    args: argv,
    options: { port: { type: "string" }, host: { type: "string" }, help: { type: "boolean", short: "h" } },
  });
  if (values.help === true) {
    console.log(
      "usage: tollgate facilitator [--port 4020] [--host 127.0.0.1]\n" +
        "environment: TOLLGATE_RPC_URL TOLLGATE_NETWORK TOLLGATE_GAS_KEY TOLLGATE_PROOF_KEYS TOLLGATE_TOKEN\n" +
        "  TOLLGATE_BATCH_SETTLER TOLLGATE_SUBSCRIPTION_MANAGER TOLLGATE_CONFIRMATIONS DATABASE_URL LOG_LEVEL\n" +
        "  (defaults come from .tollgate/devnet.json after `tollgate devnet up`)",
    );
    return 0;
  }
  const config = loadFacilitatorConfig({
    ...process.env,
    ...(values.port === undefined ? {} : { TOLLGATE_PORT: values.port }),
    ...(values.host === undefined ? {} : { TOLLGATE_HOST: values.host }),
  });
  const logger = createLogger({ level: config.logLevel, name: "facilitator" });
  const store = await createStore({ databaseUrl: config.databaseUrl, dataDir: config.dataDir, logger });
  const facilitator = createFacilitator({
    store,
    rpcUrl: config.rpcUrl,
    network: config.network,
    gasAccount: privateKeyToAccount(config.gasKey),
    proofKeys: config.proofKeys,
    batchSettler: config.batchSettler,
    subscriptionManager: config.subscriptionManager,
    tokens: [config.token],
    confirmations: config.confirmations,
    logger,
  });
  await facilitator.start();
  const server = await serveApp(facilitator.app, { port: config.port, hostname: config.host });
  logger.info(
    {
      url: server.url,
      network: config.network,
      gas: privateKeyToAccount(config.gasKey).address,
      kid: config.proofKeys[0]?.kid,
    },
    "facilitator listening",
  );
  console.log(`facilitator listening on ${server.url} (${config.network})`);
  await new Promise<void>((resolve) => {
    const stop = () => resolve();
    process.once("SIGINT", stop);
    process.once("SIGTERM", stop);
  });
  await server.close();
  await facilitator.stop();
  await store.close();
  return 0;
}
