/**
 * What `tollgate up` prints once every service answers: the addresses, the contracts, the dev
 * accounts' parts (as the README's role table gives them), the provider's API key, the dashboard's
 * sign-in token, and the `export` lines another terminal pastes to reach this stack.
 */
import type { DevnetFile } from "../chain/devnetFile.ts";
import type { SavedProviderKey } from "./providerKeys.ts";

export type UpSummary = {
  dir: string;
  devnet: DevnetFile;
  restored: boolean;
  facilitatorUrl: string;
  marketUrl: string;
  dashboardUrl: string;
  dashboardPointerUrl: string;
  dashboardToken: string;
  provider: SavedProviderKey;
};

/** The dev accounts' parts by index; the last account is the facilitator's gas key. */
const ROLES: Readonly<Record<number, string>> = {
  0: "deployer, USDC minter",
  1: "API provider (its key below)",
  2: "client that pays the provider",
  3: "seller of a specialist",
  4: "agent (`tollgate run`)",
};

/** The summary's lines. */
export function formatUpSummary(s: UpSummary): string[] {
  const { devnet } = s;
  return [
    `Tollgate is up (${s.restored ? "restored from" : "new, kept in"} ${s.dir})`,
    "",
    `  devnet       ${devnet.rpcUrl}  (chain ${devnet.chainId}, ${devnet.network})`,
    `  facilitator  ${s.facilitatorUrl}`,
    `  market       ${s.marketUrl}`,
    `  dashboard    ${s.dashboardUrl}  (also via ${s.dashboardPointerUrl})`,
    "",
    "Contracts:",
    `  USDC (FiatToken)     ${devnet.contracts.usd}`,
    `  SubscriptionManager  ${devnet.contracts.subscriptionManager}`,
    `  BatchSettler         ${devnet.contracts.batchSettler}`,
    ...(devnet.contracts.channels === undefined
      ? []
      : [`  TollgateChannels     ${devnet.contracts.channels}`]),
    "",
    `Dev accounts (private keys in ${s.dir}/devnet.json):`,
    ...devnet.accounts.flatMap((account, index) => {
      const role = index === devnet.accounts.length - 1 ? "facilitator gas" : ROLES[index];
      return role === undefined ? [] : [`  ${index}  ${account.address}  ${role}`];
    }),
    "",
    `Provider API key (account 1, key ${s.provider.key.id}): ${s.provider.apiKey}`,
    `Dashboard sign-in: providers with the API key, the agent operator with the token ${s.dashboardToken}`,
    "",
    "In another terminal:",
    `  export TOLLGATE_DIR=${s.dir}`,
    `  export TOLLGATE_RPC_URL=${devnet.rpcUrl}`,
    `  export TOLLGATE_FACILITATOR_URL=${s.facilitatorUrl}`,
    `  export TOLLGATE_MARKET_URL=${s.marketUrl}`,
    `  export TOLLGATE_API_KEY=${s.provider.apiKey}`,
  ];
}
