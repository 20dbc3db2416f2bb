import { createPublicClient, http, keccak256, stringToBytes } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type RpcFaultProxy, startRpcFaultProxy } from "../../../../test/support/rpcFaultProxy.ts";
import { signTransferAuthorization } from "../../signers/signTransferAuthorization.ts";
import { type Devnet, startDevnet } from "../../startDevnet.ts";
import { getAuthorizationUsedLogs } from "./getAuthorizationUsedLogs.ts";
import { transferWithAuthorization } from "./transferWithAuthorization.ts";

describe("getAuthorizationUsedLogs", () => {
  let devnet: Devnet;
  let proxy: RpcFaultProxy;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc" });
    proxy = await startRpcFaultProxy(devnet.rpcUrl);
  });

  afterAll(async () => {
    await proxy?.close();
    await devnet?.stop();
  });

  it("finds the transaction that used a nonce over a range wider than the provider lets one query span", async () => {
    const [payer, relayer] = devnet.accounts as [Devnet["accounts"][0], Devnet["accounts"][0]];
    const token = devnet.contracts.usd;
    await devnet.fund(payer.address, { usd: 5_000_000n });
    const authorization = {
      from: payer.address,
      to: relayer.address,
      value: 1_000_000n,
      validAfter: 0n,
      validBefore: 2n ** 40n,
      nonce: keccak256(stringToBytes("paged-authorization-log")),
    };
    const signature = await signTransferAuthorization(payer.account, {
      domain: {
        name: devnet.token.name,
        version: devnet.token.version,
        chainId: devnet.chain.id,
        verifyingContract: token,
      },
      authorization,
    });
    const hash = await transferWithAuthorization(devnet.walletClient(relayer), {
      token,
      authorization,
      signature,
    });
    await devnet.publicClient.waitForTransactionReceipt({ hash });
    for (let i = 0; i < 5; i++) await devnet.mine(300);

    proxy.set({ maxLogsRange: 200 });
    const client = createPublicClient({ chain: devnet.chain, transport: http(proxy.url, { retryCount: 0 }) });
    const latest = await client.getBlockNumber();
    const logs = await getAuthorizationUsedLogs(client, {
      token,
      authorizer: payer.address,
      nonce: authorization.nonce,
      fromBlock: 0n,
      toBlock: latest,
    });
    expect(logs.map((l) => l.transactionHash)).toEqual([hash]);
    expect(proxy.refusedRanges()).toBeGreaterThan(0);
  }, 60_000);
});
