import { randomBytes } from "node:crypto";
import type { Address, Hex } from "viem";
import { describe, expect, it } from "vitest";
import { createFixedClock } from "../../../protocol/clock.ts";
import { isTollgateError } from "../../../protocol/errors.ts";
import { type ChannelState, type ChannelStateSource, toChannelState } from "../channelState.ts";
import { createSessionKey } from "../client/sessionKey.ts";
import { type ChannelLookupGuardOptions, guardChannelSource } from "./channelLookupGuard.ts";

const payTo: Address = "0x00000000000000000000000000000000000070A1";
const token: Address = "0x0000000000000000000000000000000000000dC1";
const stranger: Address = "0x00000000000000000000000000000000000051A0";
const NOW = 1_800_000_000_000;

const randomId = () => `0x${randomBytes(32).toString("hex")}` as Hex;

function channelOf(payee: Address = payTo): ChannelState {
  const key = createSessionKey();
  const fields = {
    channelId: randomId(),
    payer: "0x00000000000000000000000000000000000000A1" as Address,
    payee,
    token,
    deposit: 100_000n,
    claimed: 0n,
    sessionKeyX: key.x,
    sessionKeyY: key.y,
    closeDelay: 3_600,
    closeRequestedAt: 0,
    closed: false,
    tag: undefined as Hex | undefined,
  };
  return toChannelState(fields)!;
}

/**
 * A guard over a map of channels that counts its reads, on a fixed clock whose waits are handed to
 * the test: `tick()` lets the oldest wait end, moving the clock by what it asked.
 */
function setup(channels: ChannelState[], limits: Omit<ChannelLookupGuardOptions, "payTo" | "token">) {
  const clock = createFixedClock(NOW);
  const states = new Map(channels.map((c) => [c.channelId, c]));
  const reads: Hex[] = [];
  const source: ChannelStateSource = {
    async get(channelId) {
      reads.push(channelId);
      return states.get(channelId);
    },
  };
  const waits: { ms: number; resolve: () => void }[] = [];
  const guarded = guardChannelSource(source, {
    payTo,
    token,
    clock,
    ...limits,
    wait: (ms) => new Promise<void>((resolve) => waits.push({ ms, resolve })),
  });
  const tick = async () => {
    const next = waits.shift();
    if (next === undefined) throw new Error("nothing waits");
    clock.advance(next.ms);
    next.resolve();
    await settle();
  };
  return { guarded, reads, clock, waits, tick, states };
}

/** Lets every ready promise callback run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

async function refusalOf(promise: Promise<unknown>) {
  try {
    await promise;
  } catch (error) {
    if (isTollgateError(error)) return error;
    throw error;
  }
  return undefined;
}

describe("guardChannelSource", () => {
  it("reads at most `burst` unknown ids at once, queues the next in order, and refuses past the queue without a read", async () => {
    const { guarded, reads, tick } = setup([], { burst: 2, perSecond: 10, queue: 2 });
    const ids = [randomId(), randomId(), randomId(), randomId(), randomId()];
    const answers = ids.map((id) => guarded.get(id).then(() => id));
    const done: Hex[] = [];
    for (const a of answers.slice(0, 4)) void a.then((id) => done.push(id));
    const refused = await refusalOf(answers[4]!);
    expect(refused?.code).toBe("RateLimited");
    expect(refused?.retryAfter).toBe(1);
    expect(refused?.details).toMatchObject({ limit: "channelLookups" });
    await settle();
    expect(reads).toEqual(ids.slice(0, 2));
    await tick(); // 100 ms: one more read
    expect(reads).toEqual(ids.slice(0, 3));
    await tick();
    expect(reads).toEqual(ids.slice(0, 4));
    expect(done).toEqual(ids.slice(0, 4));
  });

  it("after a flood of made-up ids, reads a payer's new channel in its turn", async () => {
    const real = channelOf();
    const { guarded, reads, waits, tick } = setup([real], { burst: 5, perSecond: 10, queue: 20 });
    const flood = Array.from({ length: 100 }, () => guarded.get(randomId()).catch((error: unknown) => error));
    await settle();
    while (waits.length > 0) await tick();
    const outcomes = await Promise.all(flood);
    expect(outcomes.filter((o) => o === undefined)).toHaveLength(25);
    expect(outcomes.filter((o) => isTollgateError(o) && o.code === "RateLimited")).toHaveLength(75);
    // The flood spent the burst: the payer waits one turn (100 ms), not for the flood's refusals.
    const ofPayer = guarded.get(real.channelId);
    await settle();
    expect(waits.map((w) => w.ms)).toEqual([100]);
    await tick();
    expect((await ofPayer)?.channelId).toBe(real.channelId);
    expect(reads).toHaveLength(26);
  });

  it("reads the gate's own channels straight through while a flood waits", async () => {
    const own = channelOf();
    const { guarded, reads } = setup([own], { burst: 1, perSecond: 1, queue: 5 });
    expect((await guarded.get(own.channelId))?.deposit).toBe(100_000n);
    // The burst is spent and the queue full: another unknown id would be refused now.
    for (let i = 0; i < 6; i++) guarded.get(randomId()).catch(() => undefined);
    await settle();
    expect((await refusalOf(guarded.get(randomId())))?.code).toBe("RateLimited");
    for (let i = 0; i < 3; i++) expect((await guarded.get(own.channelId))?.channelId).toBe(own.channelId);
    expect(reads.filter((id) => id === own.channelId)).toHaveLength(4);
  });

  it("takes a turn for a channel of another payee each time it is read", async () => {
    const foreign = channelOf(stranger);
    const { guarded, reads } = setup([foreign], { burst: 1, perSecond: 1, queue: 0 });
    expect((await guarded.get(foreign.channelId))?.payee).toBe(stranger);
    expect((await refusalOf(guarded.get(foreign.channelId)))?.code).toBe("RateLimited");
    expect(reads).toHaveLength(1);
  });

  it("remembers an unknown id for unknownTtlMs, and shares one read among concurrent asks", async () => {
    const { guarded, reads, clock } = setup([], { burst: 10, perSecond: 10, queue: 10 });
    const id = randomId();
    expect(await Promise.all([guarded.get(id), guarded.get(id), guarded.get(id)])).toEqual([
      undefined,
      undefined,
      undefined,
    ]);
    expect(await guarded.get(id)).toBeUndefined();
    expect(reads).toEqual([id]);
    clock.advance(5_000);
    expect(await guarded.get(id)).toBeUndefined();
    expect(reads).toEqual([id, id]);
  });

  it("learns a channel opened after its id was first asked for, once the negative answer expires", async () => {
    const { guarded, clock, states } = setup([], { burst: 10, perSecond: 10, queue: 10 });
    const later = channelOf();
    expect(await guarded.get(later.channelId)).toBeUndefined();
    states.set(later.channelId, later);
    expect(await guarded.get(later.channelId)).toBeUndefined();
    clock.advance(5_000);
    expect((await guarded.get(later.channelId))?.channelId).toBe(later.channelId);
  });

  describe("per client", () => {
    const a = "10.0.0.1";
    const b = "2001:db8:0:1::/64";

    it("refuses one client's flood past its own share, and reads a payer at another address at once", async () => {
      const real = channelOf();
      const { guarded, reads, waits } = setup([real], {
        burst: 4,
        perSecond: 10,
        queue: 4,
        perClient: { burst: 2, perSecond: 1, queue: 1 },
      });
      const flood = Array.from({ length: 50 }, () =>
        guarded.get(randomId(), { client: a }).catch((error: unknown) => error),
      );
      const outcomes = await Promise.all(flood);
      expect(outcomes.filter((o) => o === undefined)).toHaveLength(2);
      const refusals = outcomes.filter((o) => isTollgateError(o) && o.code === "RateLimited");
      expect(refusals).toHaveLength(48);
      expect(refusals[0]).toMatchObject({ retryAfter: 1, details: { limit: "channelLookupsPerClient" } });
      // The flood took two of the gate's four reads; the payer takes a third, without waiting.
      expect((await guarded.get(real.channelId, { client: b }))?.channelId).toBe(real.channelId);
      expect(waits).toHaveLength(0);
      expect(reads).toHaveLength(3);
    });

    it("lets a client queue at most perClient.queue lookups, while another client still queues behind them", async () => {
      const { guarded, reads, waits, tick } = setup([], {
        burst: 1,
        perSecond: 1,
        queue: 10,
        perClient: { burst: 5, perSecond: 1, queue: 2 },
      });
      const ofA = Array.from({ length: 4 }, () =>
        guarded.get(randomId(), { client: a }).catch((error: unknown) => error),
      );
      await settle();
      expect(reads).toHaveLength(1); // the first read; two wait, the fourth is refused
      expect(await ofA[3]).toMatchObject({
        code: "RateLimited",
        details: { limit: "channelLookupsPerClient" },
      });
      const ofB = guarded.get(randomId(), { client: b });
      await settle();
      expect(waits).toHaveLength(1);
      while (waits.length > 0) await tick();
      expect(await ofB).toBeUndefined();
      expect(reads).toHaveLength(4);
      // A's waiting lookups have been read: it may queue again.
      expect(await Promise.all(ofA.slice(0, 3))).toEqual([undefined, undefined, undefined]);
    });

    it("holds lookups without a client to the gate's limits alone", async () => {
      const { guarded, reads } = setup([], { burst: 5, perSecond: 1, queue: 0, perClient: { burst: 1 } });
      await Promise.all(Array.from({ length: 5 }, () => guarded.get(randomId())));
      expect(reads).toHaveLength(5);
      expect((await refusalOf(guarded.get(randomId())))?.details).toMatchObject({ limit: "channelLookups" });
    });

    it("holds at most maxClients client buckets, dropping the least recently used", async () => {
      const { guarded, reads } = setup([], {
        burst: 100,
        perSecond: 100,
        queue: 0,
        perClient: { burst: 1, perSecond: 0.001 },
        maxClients: 2,
      });
      await guarded.get(randomId(), { client: a });
      expect((await refusalOf(guarded.get(randomId(), { client: a })))?.code).toBe("RateLimited");
      await guarded.get(randomId(), { client: "10.0.0.2" });
      await guarded.get(randomId(), { client: "10.0.0.3" });
      // A's bucket was dropped for the newer two: it starts again full.
      await guarded.get(randomId(), { client: a });
      expect(reads).toHaveLength(4);
    });
  });
});
