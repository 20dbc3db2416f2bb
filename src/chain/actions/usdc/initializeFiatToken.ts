import { type Address, type Hash, maxUint256 } from "viem";
import { waitForTransactionReceipt, writeContract } from "viem/actions";
import type { WriteClient } from "../../clientTypes.ts";
import { fiatTokenV2_2Abi } from "../../contracts/circle-usdc/FiatTokenV2_2.ts";

/** The roles and names a FiatToken v2.2 is initialized with; every role defaults to the sending account. */
export type FiatTokenSetup = {
  /** The EIP-712 domain name (default "USD Coin", as on Base; Base Sepolia's is "USDC"). The version is "2", fixed by the code. */
  name?: string | undefined;
  /** Default "USDC". */
  symbol?: string | undefined;
  /** Default "USD". */
  currency?: string | undefined;
  masterMinter?: Address | undefined;
  pauser?: Address | undefined;
  blacklister?: Address | undefined;
  owner?: Address | undefined;
  /** Receives whatever balance the token held at its own address (initializeV2_1); default the owner. */
  lostAndFound?: Address | undefined;
  /** The minter configured by the master minter (default the sending account). */
  minter?: Address | undefined;
  /** How much the minter may mint (default unlimited). */
  minterAllowance?: bigint | undefined;
};

export type InitializeFiatTokenParameters = FiatTokenSetup & {
  /** The proxy, already pointing at a FiatToken v2.2 implementation, with an admin other than the client. */
  token: Address;
};

/**
 * Runs FiatToken v2.2's four initializers through its proxy, then configures a minter. The client must
 * not be the proxy's admin (a transparent proxy never forwards its admin's calls), and must be the master
 * minter for `configureMinter`, which is the default. Each transaction is awaited, since the next one's gas
 * estimate depends on it.
 *
 * @example
 * await initializeFiatToken(walletClient, { token: proxy, name: "USDC" });
 */
export async function initializeFiatToken(
  client: WriteClient,
  parameters: InitializeFiatTokenParameters,
): Promise<void> {
  const self = client.account.address;
  const name = parameters.name ?? "USD Coin";
  const symbol = parameters.symbol ?? "USDC";
  const masterMinter = parameters.masterMinter ?? self;
  const owner = parameters.owner ?? self;
  const send = async (hash: Promise<Hash>) => {
    const receipt = await waitForTransactionReceipt(client, { hash: await hash });
    if (receipt.status !== "success")
      throw new Error(`FiatToken setup transaction ${receipt.transactionHash} reverted`);
  };
  const token = { address: parameters.token, abi: fiatTokenV2_2Abi } as const;
  await send(
    writeContract(client, {
      ...token,
      functionName: "initialize",
      args: [
        name,
        symbol,
        parameters.currency ?? "USD",
        6,
        masterMinter,
        parameters.pauser ?? self,
        parameters.blacklister ?? self,
        owner,
      ],
    }),
  );
  await send(writeContract(client, { ...token, functionName: "initializeV2", args: [name] }));
  await send(
    writeContract(client, {
      ...token,
      functionName: "initializeV2_1",
      args: [parameters.lostAndFound ?? owner],
    }),
  );
  await send(writeContract(client, { ...token, functionName: "initializeV2_2", args: [[], symbol] }));
  if (masterMinter === self) {
    await send(
      writeContract(client, {
        ...token,
        functionName: "configureMinter",
        args: [parameters.minter ?? self, parameters.minterAllowance ?? maxUint256],
      }),
    );
  }
}
