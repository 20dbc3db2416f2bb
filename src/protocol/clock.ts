/** A source of time, injected so that code and tests agree on "now" without reading the wall clock. */
export type Clock = {
  /** Milliseconds since the Unix epoch. */
  now(): number;
};

export const systemClock: Clock = { now: () => Date.now() };

/** Whole seconds since the Unix epoch, as chain timestamps and token lifetimes use. */
export function unixSeconds(clock: Clock): number {
  return Math.floor(clock.now() / 1000);
}

/** A clock that stands still until moved: for tests. */
export function createFixedClock(
  startMs: number,
): Clock & { advance(ms: number): void; set(ms: number): void } {
  let current = startMs;
  return {
    now: () => current,
    advance(ms) {
      current += ms;
    },
    set(ms) {
      current = ms;
    },
  };
}
