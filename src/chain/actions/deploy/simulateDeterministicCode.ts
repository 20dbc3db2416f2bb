import { type Address, type Client, concat, type Hex, size } from "viem";
import { TollgateError } from "../../../protocol/errors.ts";
import { deterministicAddress, deterministicDeployer, tollgateSalt } from "./deterministicAddress.ts";

/**
 * Code that stands in for the proxy in a simulated call: CREATE2 of `calldata[32:]` with salt
 * `calldata[0:32]`, then returns the new contract's runtime code (reverts when creation failed).
 *
 *   PUSH1 32 CALLDATASIZE SUB DUP1 PUSH1 32 PUSH1 0 CALLDATACOPY        initcode → memory[0:len]
 *   PUSH1 0 CALLDATALOAD SWAP1 PUSH1 0 PUSH1 0 CREATE2                   address
 *   DUP1 EXTCODESIZE DUP1 PUSH1 29 JUMPI PUSH1 0 DUP1 REVERT             no code: revert
 *   JUMPDEST DUP1 PUSH1 0 PUSH1 0 DUP5 EXTCODECOPY PUSH1 0 RETURN        return the code
 *
 * PUSH1 0 rather than PUSH0, so that it runs on chains without Shanghai too.
 */
const createAndReturnCode: Hex =
  "0x602036038060206000376000359060006000f5803b80601d57600080fd5b8060006000843c6000f3";

export type SimulateDeterministicCodeParameters = {
  /** The creation code with its constructor arguments. */
  initcode: Hex;
  /** Default `tollgateSalt`. */
  salt?: Hex | undefined;
};

/**
 * The runtime code `initcode` gets when the deterministic-deployment proxy creates it on the client's
 * chain, found by simulation (eth_call with state overrides): the proxy's code is swapped for code that
 * creates the contract and returns its code, and the target address is emptied first, so the answer is
 * the same whether or not the contract is deployed already.
 *
 * Simulated at its real address because immutables may depend on it: OpenZeppelin's EIP712 keeps
 * `address(this)` and the domain separator in the code, so a creation from any other address would
 * return other bytes. The node must support eth_call state overrides (geth, reth, anvil, and the
 * common RPC providers do).
 */
export async function simulateDeterministicCode(
  client: Pick<Client, "request">,
  { initcode, salt = tollgateSalt }: SimulateDeterministicCodeParameters,
): Promise<Hex> {
  const target: Address = deterministicAddress({ initcode, salt });
  let code: Hex;
  try {
    code = await client.request({
      method: "eth_call",
      params: [
        { to: deterministicDeployer, data: concat([salt, initcode]), gas: "0x1c9c380" },
        "latest",
        {
          [deterministicDeployer]: { code: createAndReturnCode },
          // An empty account, also of storage (EIP-7610 refuses to create over non-empty storage).
          [target]: { code: "0x", nonce: "0x0", state: {} },
        },
      ],
    });
  } catch (error) {
    throw new TollgateError(
      "ChainUnavailable",
      `could not simulate the deployment of ${target}: the RPC node must support eth_call state overrides (${(error as Error).message.split("\n")[0]})`,
      { details: { address: target }, cause: error },
    );
  }
  if (size(code) === 0) {
    throw new TollgateError("InvalidRequest", `the creation code for ${target} deploys no code`, {
      details: { address: target },
    });
  }
  return code;
}
