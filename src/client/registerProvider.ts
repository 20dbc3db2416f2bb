/**
 * Registers a provider with a facilitator (docs/facilitator.md, "Provider accounts"): the payout key signs a
 * single-use challenge, and the facilitator answers with an API key, shown this once. The key
 * authenticates `POST /usage`, `/webhooks` and `/analytics`.
 */

import { requireMessageSigner } from "../http/checkInput.ts";
import { type FacilitatorClient, requireFacilitator } from "../http/facilitatorClient.ts";
import {
  ProviderChallengeResponseSchema,
  type ProviderRegisterResponse,
  ProviderRegisterResponseSchema,
} from "../protocol/subscriptions.ts";

/** The payout account: an address that can sign EIP-191 messages (a viem `LocalAccount`). */
export type ProviderSigner = {
  address: `0x${string}`;
  signMessage(args: { message: string }): Promise<`0x${string}`>;
};

/**
 * @example
 * const { apiKey } = await registerProvider(facilitator, privateKeyToAccount(payoutKey));
 */
export async function registerProvider(
  facilitator: Pick<FacilitatorClient, "request">,
  account: ProviderSigner,
): Promise<ProviderRegisterResponse> {
  requireFacilitator(facilitator, "registerProvider(facilitator, account)");
  requireMessageSigner(account, "registerProvider(facilitator, account): account signs EIP-191 messages");
  const { challenge } = await facilitator.request(
    "POST",
    "/providers/challenge",
    ProviderChallengeResponseSchema,
    {
      body: { address: account.address },
    },
  );
  const signature = await account.signMessage({ message: challenge });
  return facilitator.request("POST", "/providers", ProviderRegisterResponseSchema, {
    body: { address: account.address, challenge, signature },
  });
}
