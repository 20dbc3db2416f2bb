import { describe, expect, it } from "vitest";
import { createToolQueue } from "./toolQueue.ts";

/** A task that records how many tasks of its seller run with it, and finishes when released. */
function gate() {
  const running = new Map<string, number>();
  const most = new Map<string, number>();
  const waiting: (() => void)[] = [];
  const task = (seller: string) => async () => {
    running.set(seller, (running.get(seller) ?? 0) + 1);
    most.set(seller, Math.max(most.get(seller) ?? 0, running.get(seller)!));
    await new Promise<void>((resolve) => waiting.push(resolve));
    running.set(seller, running.get(seller)! - 1);
    return seller;
  };
  /** Releases running tasks until all have finished. */
  const drain = async (all: Promise<unknown>) => {
    let done = false;
    void all.then(() => {
      done = true;
    });
    while (!done) {
      await new Promise((resolve) => setImmediate(resolve));
      for (const release of waiting.splice(0)) release();
    }
  };
  return { task, most, drain, started: () => waiting.length };
}

describe("createToolQueue", () => {
  it("runs different sellers side by side and bounds each seller's concurrent calls", async () => {
    const queue = createToolQueue({ perSellerConcurrency: 2 });
    const g = gate();
    const all = Promise.all([
      ...Array.from({ length: 5 }, () => queue.run("0xA", g.task("a"))),
      ...Array.from({ length: 3 }, () => queue.run("0xB", g.task("b"))),
    ]);
    await new Promise((resolve) => setImmediate(resolve));
    // Both sellers at their limit at once: 2 + 2 started, the rest wait.
    expect(g.started()).toBe(4);
    await g.drain(all);
    expect(await all).toEqual(["a", "a", "a", "a", "a", "b", "b", "b"]);
    expect(g.most.get("a")).toBe(2);
    expect(g.most.get("b")).toBe(2);
  });

  it("bounds the whole run, and keys sellers in any case", async () => {
    const queue = createToolQueue({ concurrency: 3, perSellerConcurrency: 4 });
    const g = gate();
    const all = Promise.all([
      queue.run("0xabc", g.task("x")),
      queue.run("0xABC", g.task("x")),
      queue.run("0xAbC", g.task("x")),
      queue.run("0xdef", g.task("y")),
      queue.run("0xdef", g.task("y")),
    ]);
    await new Promise((resolve) => setImmediate(resolve));
    expect(g.started()).toBe(3);
    await g.drain(all);
    expect(g.most.get("x")! + (g.most.get("y") ?? 0)).toBeLessThanOrEqual(5);
  });

  it("refuses limits that are not positive integers", () => {
    for (const options of [
      { concurrency: 0 },
      { perSellerConcurrency: 1.5 },
      { perSellerRate: { intervalCap: 0, intervalMs: 1 } },
    ]) {
      expect(() => createToolQueue(options)).toThrow(expect.objectContaining({ code: "InvalidRequest" }));
    }
  });
});
