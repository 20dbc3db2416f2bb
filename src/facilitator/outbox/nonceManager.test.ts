import { describe, expect, it } from "vitest";
import { createNonceManager } from "./nonceManager.ts";

const address = "0x00000000000000000000000000000000000000aa";

function chainAt(count: number) {
  let reads = 0;
  const client = {
    getTransactionCount: async () => {
      reads++;
      return count;
    },
  };
  return { client, reads: () => reads, set: (n: number) => (count = n) };
}

describe("createNonceManager", () => {
  it("takes the highest of the store's next nonce, the chain's count and the last taken here, plus one each time", async () => {
    const chain = chainAt(7);
    const nonces = createNonceManager({ address, client: chain.client });
    expect(await nonces.floor()).toBe(7);
    expect(nonces.take(3)).toBe(7); // the store is behind the chain: the chain wins
    expect(nonces.take(3)).toBe(8); // never a nonce taken here twice
    expect(nonces.take(12)).toBe(12); // another instance went further: the store wins
    expect(nonces.take(0)).toBe(13);
  });

  it("reads the chain once until resynced, then again", async () => {
    const chain = chainAt(4);
    const nonces = createNonceManager({ address, client: chain.client });
    await Promise.all([nonces.floor(), nonces.floor(), nonces.floor()]);
    expect(chain.reads()).toBe(1);
    chain.set(9);
    expect(await nonces.floor()).toBe(4);
    nonces.resync();
    expect(await nonces.floor()).toBe(9);
    expect(chain.reads()).toBe(2);
    expect(nonces.take(0)).toBe(9);
  });
});
