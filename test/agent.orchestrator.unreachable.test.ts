/**
 * An orchestrator whose model cannot be reached fails at once, saying where it looked and what to do:
 * against a local port nothing listens on (connection refused) and a local server that never answers
 * (a short request timeout). Without this a run sat silent for about 100 s of retries.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import { DEFAULT_OPENAI_MODEL, modelFromEnv } from "../src/agent/orchestrator/modelFromEnv.ts";
import { isTollgateError } from "../src/protocol/errors.ts";

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => resolve((server.address() as AddressInfo).port)),
  );

const closeServer = (server: Server) =>
  new Promise<void>((resolve) => {
    server.closeAllConnections();
    server.close(() => resolve());
  });

/** A port that was just free: connecting to it is refused. */
async function refusingPort(): Promise<number> {
  const server = createServer();
  const port = await listen(server);
  await closeServer(server);
  return port;
}

/** Runs a task and returns what it failed with, and after how long. */
async function failureOf(env: Record<string, string>, timeoutMs?: number) {
  const debug: { object: object; message: string | undefined }[] = [];
  const logger = { debug: (object: object, message?: string) => debug.push({ object, message }) };
  const orchestrator = createOrchestrator({ tools: [], model: modelFromEnv(env, { timeoutMs, logger }) });
  const started = performance.now();
  const error = await orchestrator.run("Say hello").then(
    () => undefined,
    (e: unknown) => e,
  );
  return { error, elapsedMs: performance.now() - started, debug };
}

describe("orchestrator with an unreachable model", () => {
  let hanging: Server | undefined;
  afterEach(async () => {
    if (hanging !== undefined) await closeServer(hanging);
    hanging = undefined;
  });

  it("fails at once on a refused connection, naming the URL, the model and the fixes", async () => {
    const baseURL = `http://127.0.0.1:${await refusingPort()}/v1`;
    const { error, elapsedMs, debug } = await failureOf({ OPENAI_API_KEY: "k", OPENAI_BASE_URL: baseURL });
    expect(isTollgateError(error)).toBe(true);
    const message = (error as Error).message;
    expect(message).toContain(baseURL);
    expect(message).toContain(DEFAULT_OPENAI_MODEL);
    expect(message).toContain("connection was refused");
    for (const hint of ["OPENAI_BASE_URL", "OPENAI_API_KEY", "TOLLGATE_PLANNER=rules"]) {
      expect(message).toContain(hint);
    }
    // No retries: one request, well under LangChain's first backoff.
    expect(debug.filter((d) => d.message === "model request")).toHaveLength(1);
    expect(debug.some((d) => d.message === "model unreachable")).toBe(true);
    expect(elapsedMs).toBeLessThan(3_000);
  });

  it("fails after its request timeout when the server never answers", async () => {
    hanging = createServer(() => {
      // Takes the request and never answers.
    });
    const baseURL = `http://127.0.0.1:${await listen(hanging)}/v1`;
    const { error, elapsedMs, debug } = await failureOf(
      { OPENAI_API_KEY: "k", OPENAI_BASE_URL: baseURL, OPENAI_MODEL: "local-llama" },
      300,
    );
    const message = (error as Error).message;
    expect(message).toContain(baseURL);
    expect(message).toContain("local-llama");
    expect(message).toContain("did not answer within 300 ms");
    expect(message).toContain("TOLLGATE_PLANNER=rules");
    expect(debug.filter((d) => d.message === "model request")).toHaveLength(1);
    expect(elapsedMs).toBeLessThan(5_000);
  });

  it("reads the timeout from TOLLGATE_MODEL_TIMEOUT_MS", async () => {
    hanging = createServer(() => {});
    const baseURL = `http://127.0.0.1:${await listen(hanging)}/v1`;
    const { error } = await failureOf({
      OPENAI_API_KEY: "k",
      OPENAI_BASE_URL: baseURL,
      TOLLGATE_MODEL_TIMEOUT_MS: "250",
    });
    expect((error as Error).message).toContain("did not answer within 250 ms");
  });
});
