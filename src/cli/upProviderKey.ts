/**
 * The API provider's key for `tollgate up`: registered once with the facilitator for dev account 1 (the
 * README's API provider) and kept in `<dir>/provider-keys.json`, where `tollgate analytics` and
 * `tollgate webhooks` find it too; later starts reuse it.
 */
import { privateKeyToAccount } from "viem/accounts";
import type { DevnetFile } from "../chain/devnetFile.ts";
import { registerProvider } from "../client/registerProvider.ts";
import { createFacilitatorClient, type FetchFn } from "../http/facilitatorClient.ts";
import { loadProviderKey, type SavedProviderKey, saveProviderKey } from "./providerKeys.ts";

/** The dev account the README's role table gives to the API provider. */
export const PROVIDER_ACCOUNT = 1;

/** The saved key of the provider for the facilitator at `facilitatorUrl`, registering it the first time. */
export async function ensureProviderKey(
  dir: string,
  facilitatorUrl: string,
  devnet: DevnetFile,
  fetch: FetchFn,
): Promise<SavedProviderKey> {
  const account = devnet.accounts[PROVIDER_ACCOUNT];
  if (account === undefined) throw new Error(`the devnet has no account ${PROVIDER_ACCOUNT}`);
  const saved = loadProviderKey(dir, facilitatorUrl);
  if (saved !== undefined && saved.provider.toLowerCase() === account.address.toLowerCase()) return saved;
  const facilitator = createFacilitatorClient({ url: facilitatorUrl, fetch });
  const registered = await registerProvider(
    facilitator,
    privateKeyToAccount(account.privateKey as `0x${string}`),
  );
  const key = { provider: registered.provider, apiKey: registered.apiKey, key: registered.key };
  saveProviderKey(dir, facilitator.url, key);
  return key;
}
