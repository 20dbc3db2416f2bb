import {
  type Address,
  type Chain,
  getAddress,
  isAddressEqual,
  pad,
  type TestClient,
  type Transport,
} from "viem";
import { deployContract, getCode, setCode, setStorageAt } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenProxyAbi, fiatTokenProxyBytecode } from "../../contracts/circle-usdc/FiatTokenProxy.ts";
import { deployedAddress, deployFiatTokenImplementation } from "./deployFiatTokenImplementation.ts";
import { type FiatTokenSetup, initializeFiatToken } from "./initializeFiatToken.ts";

/** keccak256("org.zeppelinos.proxy.implementation"): where FiatTokenProxy keeps its implementation. */
export const FIAT_TOKEN_PROXY_IMPLEMENTATION_SLOT =
  "0x7050c9e0f4ca769c69bd3a8ef740bc37934f8e2c036e5a723fd8ee048ed3f8c3" as const;
/** keccak256("org.zeppelinos.proxy.admin"): where FiatTokenProxy keeps its admin. */
export const FIAT_TOKEN_PROXY_ADMIN_SLOT =
  "0x10d6a54a4754c8869d6886b5f5d7fbfa5b4522237ea5c60d11bc4e7a1ff9390b" as const;

export type PlaceFiatTokenParameters = FiatTokenSetup & {
  /** Sets code and storage: an anvil test client on the same chain as `client`. */
  testClient: TestClient<"anvil", Transport, Chain>;
  /** Where the token goes, e.g. Base Sepolia's USDC 0x036CbD53842c5426634e7929541eC2318f3dCF7e (name "USDC"). */
  address: Address;
  /** The proxy's admin; must differ from the client's account. */
  admin: Address;
};

/**
 * Puts an initialized FiatToken v2.2 at a fixed address of an anvil chain, so that code which knows a real
 * network's USDC address (and its EIP-712 name) runs unchanged against it. Deploys the library and the
 * implementation normally, writes FiatTokenProxy's runtime code at `address` with its implementation and
 * admin slots, then runs the initializers. The address must hold no token yet (the initializers run once).
 *
 * @example
 * await placeFiatToken(walletClient, { testClient, address: baseSepoliaUsdc, name: "USDC", admin });
 */
export async function placeFiatToken(
  client: WriteClient,
  { testClient, address, admin, ...setup }: PlaceFiatTokenParameters,
): Promise<{ token: Address; implementation: Address }> {
  if (isAddressEqual(admin, client.account.address)) {
    throw new Error("the FiatToken proxy's admin must differ from the account that initializes the token");
  }
  const { implementation } = await deployFiatTokenImplementation(client);
  // The proxy's runtime code has no immutables, so a throwaway deployment's code works at any address.
  const template = await deployedAddress(
    client,
    await deployContract(client, {
      abi: fiatTokenProxyAbi,
      bytecode: fiatTokenProxyBytecode,
      args: [implementation],
    }),
  );
  const runtime = await getCode(client, { address: template });
  if (runtime === undefined) throw new Error("FiatTokenProxy deployed without code");
  const token = getAddress(address);
  await setCode(testClient, { address: token, bytecode: runtime });
  await setStorageAt(testClient, {
    address: token,
    index: FIAT_TOKEN_PROXY_IMPLEMENTATION_SLOT,
    value: pad(implementation),
  });
  await setStorageAt(testClient, { address: token, index: FIAT_TOKEN_PROXY_ADMIN_SLOT, value: pad(admin) });
  await initializeFiatToken(client, { ...setup, token });
  return { token, implementation };
}
