/**
 * Tollgate's token actions and EIP-712 signers on USDC (Circle's FiatToken v2.2, the devnet's token):
 * what each action sends is what the token accepts, and each refusal the token makes comes out under
 * the name `fiatTokenRevertName` gives its message, the name the facilitator's error codes are keyed by.
 */
import {
  BaseError,
  ContractFunctionRevertedError,
  type Hex,
  hexToBigInt,
  keccak256,
  numberToHex,
  parseEventLogs,
  stringToBytes,
} from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from "vitest";
import { fiatTokenV2_2Abi } from "../src/chain/contracts/circle-usdc/FiatTokenV2_2.ts";
import { fiatTokenRevertName } from "../src/chain/events/fiatTokenRevertNames.ts";
import {
  cancelAuthorization,
  type Devnet,
  getAuthorizationState,
  getPermitNonce,
  getTokenAllowance,
  getTokenBalance,
  getTokenDecimals,
  getTokenDomain,
  mintFiatToken,
  permit,
  receiveWithAuthorization,
  signCancelAuthorization,
  signPermit,
  signReceiveAuthorization,
  signTransferAuthorization,
  startDevnet,
  type TokenDomain,
  type TransferAuthorization,
  transferWithAuthorization,
  verifyTransferAuthorization,
} from "../src/chain/index.ts";

const secp256k1n = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n;

/** The same signature with s mirrored into the upper half (and v flipped): valid to a naive ecrecover. */
function toHighS(signature: Hex): Hex {
  const r = signature.slice(2, 66);
  const s = hexToBigInt(`0x${signature.slice(66, 130)}`);
  const v = Number.parseInt(signature.slice(130, 132), 16);
  const highS = numberToHex(secp256k1n - s, { size: 32 }).slice(2);
  const flipped = (v === 27 ? 28 : 27).toString(16);
  return `0x${r}${highS}${flipped}`;
}

/**
 * The name of the revert a call was refused with: `fiatTokenRevertName` of FiatToken's message, or the
 * message itself when the table has no name for it. Throws when the call went through.
 */
async function refusal(call: Promise<unknown>): Promise<string> {
  try {
    await call;
  } catch (error) {
    const reverted =
      error instanceof BaseError ? error.walk((e) => e instanceof ContractFunctionRevertedError) : null;
    if (reverted instanceof ContractFunctionRevertedError && reverted.reason !== undefined) {
      return fiatTokenRevertName(reverted.reason) ?? reverted.reason;
    }
    throw error;
  }
  throw new Error("the token accepted the call");
}

describe("the token actions on USDC (FiatToken v2.2)", () => {
  let devnet: Devnet;
  let domain: TokenDomain;
  let snapshot: Hex;

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 5 });
    domain = {
      name: "USD Coin",
      version: "2",
      chainId: devnet.chain.id,
      verifyingContract: devnet.contracts.usd,
    };
  });
  afterAll(() => devnet.stop());
  beforeEach(async () => {
    snapshot = await devnet.snapshot();
  });
  afterEach(() => devnet.revert(snapshot));

  const payer = () => devnet.accounts[1]!;
  const payee = () => devnet.accounts[2]!;
  const relayer = () => devnet.walletClient(devnet.accounts[3]!);
  const wait = (hash: Hex) => devnet.publicClient.waitForTransactionReceipt({ hash });
  const balance = (owner: Hex) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const chainNow = async () => (await devnet.publicClient.getBlock()).timestamp;

  let memoCounter = 0;
  async function authorization(
    overrides: Partial<TransferAuthorization> = {},
  ): Promise<TransferAuthorization> {
    return {
      from: payer().address,
      to: payee().address,
      value: 500_000n,
      validAfter: 0n,
      validBefore: (await chainNow()) + 300n,
      nonce: keccak256(stringToBytes(`memo-${memoCounter++}`)),
      ...overrides,
    };
  }

  it("exposes USDC's metadata and EIP-712 domain (USD Coin, version 2, 6 decimals)", async () => {
    expect(await getTokenDecimals(devnet.publicClient, { token: devnet.contracts.usd })).toBe(6);
    expect(await getTokenDomain(devnet.publicClient, { token: devnet.contracts.usd })).toEqual({
      name: "USD Coin",
      version: "2",
      verifyingContract: devnet.contracts.usd,
    });
  });

  it("settles an EIP-3009 transfer signed by the payer and submitted by a relayer", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, { domain, authorization: auth });
    expect(await verifyTransferAuthorization({ domain, authorization: auth, signature })).toEqual({
      valid: true,
    });
    const [before, payeeBefore] = [await balance(payer().address), await balance(payee().address)];
    const receipt = await wait(
      await transferWithAuthorization(relayer(), {
        token: devnet.contracts.usd,
        authorization: auth,
        signature,
      }),
    );
    expect(receipt.status).toBe("success");
    expect(await balance(payer().address)).toBe(before - 500_000n);
    expect(await balance(payee().address)).toBe(payeeBefore + 500_000n);
    const used = parseEventLogs({
      abi: fiatTokenV2_2Abi,
      logs: receipt.logs,
      eventName: "AuthorizationUsed",
    });
    expect(used[0]?.args).toEqual({ authorizer: payer().address, nonce: auth.nonce });
    expect(
      await getAuthorizationState(devnet.publicClient, {
        token: devnet.contracts.usd,
        authorizer: auth.from,
        nonce: auth.nonce,
      }),
    ).toBe(true);
  });

  it("accepts the (v, r, s) form as well", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, { domain, authorization: auth });
    const hash = await transferWithAuthorization(relayer(), {
      token: devnet.contracts.usd,
      authorization: auth,
      signature,
      form: "vrs",
    });
    expect((await wait(hash)).status).toBe("success");
  });

  it("refuses the same nonce twice", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, { domain, authorization: auth });
    await wait(
      await transferWithAuthorization(relayer(), {
        token: devnet.contracts.usd,
        authorization: auth,
        signature,
      }),
    );
    expect(
      await refusal(
        transferWithAuthorization(relayer(), { token: devnet.contracts.usd, authorization: auth, signature }),
      ),
    ).toBe("AuthorizationAlreadyUsed");
  });

  it("refuses an expired authorization and one that is not yet valid", async () => {
    const now = await chainNow();
    const expired = await authorization({ validBefore: now });
    expect(
      await refusal(
        transferWithAuthorization(relayer(), {
          token: devnet.contracts.usd,
          authorization: expired,
          signature: await signTransferAuthorization(payer().account, { domain, authorization: expired }),
        }),
      ),
    ).toBe("AuthorizationExpired");
    const early = await authorization({ validAfter: now + 3600n, validBefore: now + 7200n });
    expect(
      await refusal(
        transferWithAuthorization(relayer(), {
          token: devnet.contracts.usd,
          authorization: early,
          signature: await signTransferAuthorization(payer().account, { domain, authorization: early }),
        }),
      ),
    ).toBe("AuthorizationNotYetValid");
  });

  it("refuses a high-s signature, which ecrecover alone would accept", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, { domain, authorization: auth });
    const malleated = toHighS(signature);
    expect(await verifyTransferAuthorization({ domain, authorization: auth, signature: malleated })).toEqual({
      valid: false,
      reason: "HighS",
    });
    for (const form of ["bytes", "vrs"] as const) {
      expect(
        await refusal(
          transferWithAuthorization(relayer(), {
            token: devnet.contracts.usd,
            authorization: auth,
            signature: malleated,
            form,
          }),
        ),
      ).toBe("InvalidSignature");
    }
    // The canonical signature of the same authorization still settles.
    expect(
      (
        await wait(
          await transferWithAuthorization(relayer(), {
            token: devnet.contracts.usd,
            authorization: auth,
            signature,
          }),
        )
      ).status,
    ).toBe("success");
  });

  it("refuses a signature made for another chain id", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, {
      domain: { ...domain, chainId: 8453 },
      authorization: auth,
    });
    expect(
      await refusal(
        transferWithAuthorization(relayer(), { token: devnet.contracts.usd, authorization: auth, signature }),
      ),
    ).toBe("InvalidSignature");
  });

  it("refuses a signature by someone other than `from`", async () => {
    const auth = await authorization();
    const forged = await devnet.accounts[4]!.account.signTypedData({
      domain,
      types: {
        TransferWithAuthorization: [
          { name: "from", type: "address" },
          { name: "to", type: "address" },
          { name: "value", type: "uint256" },
          { name: "validAfter", type: "uint256" },
          { name: "validBefore", type: "uint256" },
          { name: "nonce", type: "bytes32" },
        ],
      },
      primaryType: "TransferWithAuthorization",
      message: auth,
    });
    expect(
      await refusal(
        transferWithAuthorization(relayer(), {
          token: devnet.contracts.usd,
          authorization: auth,
          signature: forged,
        }),
      ),
    ).toBe("InvalidSignature");
  });

  it("lets only the payee submit receiveWithAuthorization", async () => {
    const auth = await authorization();
    const signature = await signReceiveAuthorization(payer().account, { domain, authorization: auth });
    expect(
      await refusal(
        receiveWithAuthorization(relayer(), { token: devnet.contracts.usd, authorization: auth, signature }),
      ),
    ).toBe("CallerMustBePayee");
    const before = await balance(payee().address);
    await wait(
      await receiveWithAuthorization(devnet.walletClient(payee()), {
        token: devnet.contracts.usd,
        authorization: auth,
        signature,
      }),
    );
    expect(await balance(payee().address)).toBe(before + auth.value);
  });

  it("refuses a transfer signature submitted as a receive authorization", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, { domain, authorization: auth });
    expect(
      await refusal(
        receiveWithAuthorization(devnet.walletClient(payee()), {
          token: devnet.contracts.usd,
          authorization: auth,
          signature,
        }),
      ),
    ).toBe("InvalidSignature");
  });

  it("cancelAuthorization burns a nonce so its authorization can no longer settle", async () => {
    const auth = await authorization();
    const signature = await signTransferAuthorization(payer().account, { domain, authorization: auth });
    const cancel = await signCancelAuthorization(payer().account, { domain, nonce: auth.nonce });
    const receipt = await wait(
      await cancelAuthorization(relayer(), {
        token: devnet.contracts.usd,
        authorizer: payer().address,
        nonce: auth.nonce,
        signature: cancel,
      }),
    );
    const events = parseEventLogs({
      abi: fiatTokenV2_2Abi,
      logs: receipt.logs,
      eventName: "AuthorizationCanceled",
    });
    expect(events).toHaveLength(1);
    expect(
      await refusal(
        transferWithAuthorization(relayer(), { token: devnet.contracts.usd, authorization: auth, signature }),
      ),
    ).toBe("AuthorizationAlreadyUsed");
    expect(
      await refusal(
        cancelAuthorization(relayer(), {
          token: devnet.contracts.usd,
          authorizer: payer().address,
          nonce: auth.nonce,
          signature: cancel,
        }),
      ),
    ).toBe("AuthorizationAlreadyUsed");
  });

  it("permit sets an allowance from a signature and cannot be replayed or used late", async () => {
    const owner = payer();
    const spender = devnet.accounts[4]!.address;
    const deadline = (await chainNow()) + 600n;
    const nonce = await getPermitNonce(devnet.publicClient, {
      token: devnet.contracts.usd,
      owner: owner.address,
    });
    const signature = await signPermit(owner.account, {
      domain,
      spender,
      value: 7_000_000n,
      nonce,
      deadline,
    });
    const args = {
      token: devnet.contracts.usd,
      owner: owner.address,
      spender,
      value: 7_000_000n,
      deadline,
      signature,
    };
    await wait(await permit(relayer(), args));
    expect(
      await getTokenAllowance(devnet.publicClient, {
        token: devnet.contracts.usd,
        owner: owner.address,
        spender,
      }),
    ).toBe(7_000_000n);
    expect(await refusal(permit(relayer(), args))).toBe("InvalidSignature");
    const late = await signPermit(owner.account, {
      domain,
      spender,
      value: 1n,
      nonce: nonce + 1n,
      deadline: 1n,
    });
    expect(await refusal(permit(relayer(), { ...args, value: 1n, deadline: 1n, signature: late }))).toBe(
      "PermitExpired",
    );
  });

  it("mints only from a configured minter: the devnet's deployer, not a stranger", async () => {
    const stranger = devnet.walletClient(privateKeyToAccount(generatePrivateKey()));
    await devnet.fund(stranger.account.address, { eth: 10n ** 18n });
    expect(
      await refusal(
        mintFiatToken(stranger, { token: devnet.contracts.usd, to: stranger.account.address, amount: 1n }),
      ),
    ).toBe("FiatToken: caller is not a minter");
    const before = await balance(stranger.account.address);
    await wait(
      await mintFiatToken(devnet.walletClient(devnet.deployer), {
        token: devnet.contracts.usd,
        to: stranger.account.address,
        amount: 1n,
      }),
    );
    expect(await balance(stranger.account.address)).toBe(before + 1n);
  });
});
