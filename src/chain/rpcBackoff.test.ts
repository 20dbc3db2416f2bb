import { HttpRequestError, RpcRequestError, TimeoutError } from "viem";
import { describe, expect, it } from "vitest";
import { backoffMs, isTransientRpcFault, retryAfterMs } from "./rpcBackoff.ts";

const http = (status: number | undefined, headers?: Record<string, string>) =>
  new HttpRequestError({
    url: "http://node",
    ...(status === undefined ? {} : { status }),
    ...(headers === undefined ? {} : { headers: new Headers(headers) }),
  });

describe("isTransientRpcFault", () => {
  it("takes 429, 5xx, timeouts and unanswered requests as transient, a node's own answer not", () => {
    expect(isTransientRpcFault(http(429))).toBe(true);
    expect(isTransientRpcFault(http(503))).toBe(true);
    expect(isTransientRpcFault(http(undefined))).toBe(true);
    expect(isTransientRpcFault(new TimeoutError({ body: {}, url: "http://node" }))).toBe(true);
    expect(isTransientRpcFault(http(401))).toBe(false);
    expect(
      isTransientRpcFault(
        new RpcRequestError({
          body: {},
          error: { code: -32000, message: "nonce too low" },
          url: "http://node",
        }),
      ),
    ).toBe(false);
  });
});

describe("backoffMs", () => {
  const options = { baseMs: 100, maxMs: 5_000 };
  it("doubles with jitter in the upper half, within the bound", () => {
    expect(backoffMs(0, undefined, { ...options, random: () => 0 })).toBe(50);
    expect(backoffMs(0, undefined, { ...options, random: () => 0.999 })).toBe(100);
    expect(backoffMs(3, undefined, { ...options, random: () => 0 })).toBe(400);
    expect(backoffMs(20, undefined, { ...options, random: () => 0.999 })).toBe(4_998);
  });

  it("honours Retry-After, bounded", () => {
    expect(retryAfterMs(http(429, { "retry-after": "2" }), 0)).toBe(2_000);
    expect(retryAfterMs(http(429, { "retry-after": new Date(10_000).toUTCString() }), 4_000)).toBe(6_000);
    expect(retryAfterMs(http(429), 0)).toBeUndefined();
    expect(backoffMs(0, 2_000, { ...options, random: () => 0 })).toBe(2_000);
    expect(backoffMs(0, 60_000, { ...options, random: () => 0.5 })).toBe(5_000);
  });
});
