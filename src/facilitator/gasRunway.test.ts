import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createTestStore } from "../store/createTestStore.ts";
import type { Store } from "../store/store.ts";
import { createGasRunway } from "./gasRunway.ts";

const ADDRESS = "0x00000000000000000000000000000000000000aa";
const HOUR = 3_600_000;
const NOW = Date.parse("2026-12-05T12:00:00Z");
let store: Store;
let nonce = 0;

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});
afterAll(async () => {
  await store?.close();
});

/** A mined transaction of the key that cost `fee` wei, `ago` ms before NOW. */
async function mined(fee: bigint, ago: number): Promise<void> {
  const n = nonce++;
  await store.query(
    `INSERT INTO tx_outbox (chain_id, sender, kind, owner, to_address, data, gas_limit, status, nonce, tx_hash,
       raw_tx, fee_paid, done_at)
     VALUES (1, $1, 'relay', 'x', $1, '0x', 21000, 'confirmed', $2, $3, '0x00', $4, $5)`,
    [ADDRESS, n, `0x${n.toString(16).padStart(64, "0")}`, fee, new Date(NOW - ago)],
  );
}

function runwayWith(balance: bigint, reads: { n: number } = { n: 0 }) {
  return createGasRunway({
    store,
    client: {
      getBalance: async () => {
        reads.n++;
        return balance;
      },
    } as never,
    address: ADDRESS,
    chainId: 1,
    clock: { now: () => NOW },
    logger: pino({ level: "silent" }),
    refreshMs: 60_000,
  });
}

describe("createGasRunway", () => {
  it("measures the pace over the window's spend from its first transaction, at least an hour, a day at most", async () => {
    // Nothing spent: the balance lasts for ever, and is not low.
    let runway = runwayWith(10n ** 18n);
    await runway.start();
    expect(runway.state()).toMatchObject({ spent: 0n, runwaySeconds: undefined, low: false });

    // One spend a minute ago: measured over an hour, not spread over the day.
    await mined(10n ** 15n, 60_000);
    runway = runwayWith(10n ** 18n);
    await runway.start();
    expect(runway.state()).toMatchObject({ spent: 10n ** 15n, spanSeconds: 3_600 });
    expect(runway.state()?.runwaySeconds).toBe(1_000 * 3_600);

    // Another ten hours ago: 2e15 over ten hours. One of 30 hours ago is out of the window.
    await mined(10n ** 15n, 10 * HOUR);
    await mined(5n * 10n ** 17n, 30 * HOUR);
    runway = runwayWith(10n ** 18n);
    await runway.start();
    expect(runway.state()).toMatchObject({ spent: 2n * 10n ** 15n, spanSeconds: 36_000 });
    expect(runway.state()?.runwaySeconds).toBe(500 * 36_000);
    expect(runway.state()?.low).toBe(false);
  });

  it("is low under the threshold or with no balance left", async () => {
    const empty = runwayWith(0n);
    await empty.start();
    expect(empty.state()?.low).toBe(true);
    // 1e15 wei lasts 0.5 of the ten hours measured: 5 h, under the default day.
    const short = runwayWith(10n ** 15n);
    await short.start();
    expect(short.state()?.runwaySeconds).toBe(18_000);
    expect(short.state()?.low).toBe(true);
  });

  it("reads once per refresh interval however many outcomes or readers ask", async () => {
    const reads = { n: 0 };
    const runway = runwayWith(10n ** 18n, reads);
    await runway.start();
    expect(reads.n).toBe(1);
    await runway.fresh();
    await runway.fresh();
    runway.noteOutcome();
    runway.noteOutcome();
    expect(reads.n).toBe(1);
    runway.stop();
    expect(reads.n).toBe(1);
  });
});
