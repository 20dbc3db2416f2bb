/**
 * A smart-contract wallet payer for the suites: `OwnedWallet` (test/fixtures/SmartWallets.sol), a
 * minimal ERC-1271 wallet owned by one EOA, and a viem account for it whose address is the wallet's
 * and whose signatures are its owner's. Such a signature is 65 bytes but recovers to the owner, never
 * to the wallet: only the wallet's `isValidSignature` (a chain read) says it is good.
 */
import {
  type Abi,
  type Address,
  encodeFunctionData,
  getAddress,
  type Hex,
  type LocalAccount,
  type PrivateKeyAccount,
} from "viem";
import { toAccount } from "viem/accounts";
import { deployContract, writeContract } from "viem/actions";
import type { Devnet, DevnetAccount } from "../../src/chain/startDevnet.ts";
import { compileFixture } from "./compileFixtures.ts";

const compiled = compileFixture("SmartWallets.sol");
export const ownedWallet = compiled.OwnedWallet!;
export const gasBurningWallet = compiled.GasBurningWallet!;

export type SmartWallet = {
  address: Address;
  owner: DevnetAccount;
  /** The wallet as a payer: address = the wallet, signatures = the owner's. */
  account: LocalAccount;
  /** Has the wallet make a call (its owner sends the transaction); waits for it to succeed. */
  execute(target: Address, data: Hex): Promise<void>;
};

/** Deploys an `OwnedWallet` owned by `owner` and funds it with `usd` of the devnet's token. */
export async function deploySmartWallet(
  devnet: Devnet,
  owner: DevnetAccount,
  funds: { usd?: bigint } = {},
): Promise<SmartWallet> {
  const address = await deployFixture(devnet, owner, ownedWallet, [owner.address]);
  if (funds.usd !== undefined) await devnet.fund(address, { usd: funds.usd });
  return {
    address,
    owner,
    account: walletAccount(address, owner.account),
    async execute(target, data) {
      const hash = await writeContract(devnet.walletClient(owner), {
        address,
        abi: ownedWallet.abi,
        functionName: "execute",
        args: [target, 0n, data],
      });
      const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
      if (receipt.status !== "success") throw new Error(`the wallet's call to ${target} reverted`);
    },
  };
}

/** A viem account for the wallet at `address`: its owner signs every message and typed datum. */
export function walletAccount(address: Address, owner: PrivateKeyAccount): LocalAccount {
  return toAccount({
    address,
    signMessage: ({ message }) => owner.signMessage({ message }),
    signTypedData: (parameters) => owner.signTypedData(parameters as never),
    signTransaction: () => {
      throw new Error("a contract wallet sends no transactions of its own: its owner calls execute");
    },
  });
}

/** Deploys a fixture of SmartWallets.sol from `from`. */
export async function deployFixture(
  devnet: Devnet,
  from: DevnetAccount,
  fixture: { abi: Abi; bytecode: Hex },
  args: readonly unknown[] = [],
): Promise<Address> {
  const hash = await deployContract(devnet.walletClient(from), {
    abi: fixture.abi,
    bytecode: fixture.bytecode,
    args,
  });
  const receipt = await devnet.publicClient.waitForTransactionReceipt({ hash });
  if (receipt.contractAddress == null) throw new Error("the fixture was not deployed");
  return getAddress(receipt.contractAddress);
}

/** Calldata of `approve(spender, amount)` on an ERC-20, for `execute`. */
export function approveCall(spender: Address, amount: bigint): Hex {
  return encodeFunctionData({
    abi: [
      {
        type: "function",
        name: "approve",
        stateMutability: "nonpayable",
        inputs: [
          { name: "spender", type: "address" },
          { name: "amount", type: "uint256" },
        ],
        outputs: [{ type: "bool" }],
      },
    ],
    functionName: "approve",
    args: [spender, amount],
  });
}
