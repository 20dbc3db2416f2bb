import { describe, expect, it } from "vitest";
import {
  batchSettlerAbi,
  batchSettlerBytecode,
  sourceHash as batchSettlerHash,
} from "./artifacts/BatchSettler.ts";
import {
  subscriptionManagerAbi,
  subscriptionManagerBytecode,
  sourceHash as subscriptionManagerHash,
} from "./artifacts/SubscriptionManager.ts";
import {
  tollgateChannelsAbi,
  tollgateChannelsBytecode,
  sourceHash as tollgateChannelsHash,
} from "./artifacts/TollgateChannels.ts";
import { compileContracts, solcVersion } from "./compileContracts.ts";
import { hashContractSources, loadContractSources } from "./contractSources.ts";

const stale = "artifacts are stale: run `npm run contracts` and commit src/chain/contracts/artifacts";

describe("committed contract artifacts", () => {
  it("were built from the current sources, compiler and settings", () => {
    const current = hashContractSources(solcVersion(), loadContractSources());
    expect(subscriptionManagerHash, stale).toBe(current);
    expect(batchSettlerHash, stale).toBe(current);
    expect(tollgateChannelsHash, stale).toBe(current);
  });

  // solc-js compiles in WebAssembly: seconds alone, much longer on a loaded two-core CI machine.
  it("hold exactly the ABI and bytecode a fresh compile produces", { timeout: 180_000 }, () => {
    const fresh = compileContracts();
    expect(fresh.contracts.SubscriptionManager.bytecode, stale).toBe(subscriptionManagerBytecode);
    expect(fresh.contracts.SubscriptionManager.abi, stale).toEqual(subscriptionManagerAbi);
    expect(fresh.contracts.BatchSettler.bytecode, stale).toBe(batchSettlerBytecode);
    expect(fresh.contracts.BatchSettler.abi, stale).toEqual(batchSettlerAbi);
    expect(fresh.contracts.TollgateChannels.bytecode, stale).toBe(tollgateChannelsBytecode);
    expect(fresh.contracts.TollgateChannels.abi, stale).toEqual(tollgateChannelsAbi);
  });

  it("gather OpenZeppelin imports into the hashed sources", () => {
    const units = Object.keys(loadContractSources());
    expect(units).toContain("@openzeppelin/contracts/utils/cryptography/ECDSA.sol");
    expect(units).toContain("BatchSettler.sol");
  });
});
