import { describe, expect, it } from "vitest";
import { createCoalescer } from "./coalescer.ts";

/** A `run` whose rounds the test releases by hand, recording what each round was given. */
function manualRun(answer: (input: number) => string = (n) => `#${n}`) {
  const rounds: number[][] = [];
  const releases: Array<(fail?: unknown) => void> = [];
  const run = (inputs: readonly number[]) =>
    new Promise<string[]>((resolve, reject) => {
      rounds.push([...inputs]);
      releases.push((fail) => (fail === undefined ? resolve(inputs.map(answer)) : reject(fail)));
    });
  const release = async (i: number, fail?: unknown) => {
    releases[i]!(fail);
    // Let the round's answers and the next round's start run.
    for (let k = 0; k < 5; k++) await Promise.resolve();
  };
  return { run, rounds, release };
}

describe("createCoalescer", () => {
  it("runs a lone call at once, alone", async () => {
    const { run, rounds, release } = manualRun();
    const call = createCoalescer(run);
    const answer = call(7);
    expect(rounds).toEqual([[7]]);
    await release(0);
    expect(await answer).toBe("#7");
  });

  it("runs the calls made while one runs together, each caller getting its own answer", async () => {
    const { run, rounds, release } = manualRun();
    const call = createCoalescer(run, { maxBatch: 3 });
    const answers = [1, 2, 3, 4, 5, 6].map(call);
    expect(rounds).toEqual([[1]]);
    await release(0);
    expect(rounds).toEqual([[1], [2, 3, 4]]);
    await release(1);
    expect(rounds).toEqual([[1], [2, 3, 4], [5, 6]]);
    await release(2);
    expect(await Promise.all(answers)).toEqual(["#1", "#2", "#3", "#4", "#5", "#6"]);
  });

  it("retries a failed round one input at a time, so only the input that fails is refused", async () => {
    const rounds: number[][] = [];
    const call = createCoalescer(async (inputs: readonly number[]) => {
      rounds.push([...inputs]);
      if (inputs.includes(13)) throw new Error("unlucky");
      return inputs.map((n) => n * 2);
    });
    const answers = await Promise.all([1, 13, 2].map((n) => call(n).catch((e: Error) => e.message)));
    expect(answers).toEqual([2, "unlucky", 4]);
    // The first call ran alone, the two behind it together, then each of those alone after the failure.
    expect(rounds).toEqual([[1], [13, 2], [13], [2]]);
  });

  it("retries each input of a round whose run answers the wrong number of outputs", async () => {
    const rounds: number[][] = [];
    const call = createCoalescer(async (inputs: readonly number[]) => {
      rounds.push([...inputs]);
      return inputs.length > 1 ? [0] : inputs;
    });
    expect(await Promise.all([4, 5, 6].map(call))).toEqual([4, 5, 6]);
    expect(rounds).toEqual([[4], [5, 6], [5], [6]]);
  });

  it("keeps serving after a round fails", async () => {
    const { run, rounds, release } = manualRun();
    const call = createCoalescer(run);
    const failed = call(1).catch((e: Error) => e.message);
    await release(0, new Error("store unreachable"));
    expect(await failed).toBe("store unreachable");
    const next = call(2);
    expect(rounds).toEqual([[1], [2]]);
    await release(1);
    expect(await next).toBe("#2");
  });
});
