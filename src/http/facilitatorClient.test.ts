import { describe, expect, it } from "vitest";
import { isTollgateError, TollgateError } from "../protocol/errors.ts";
import { createFacilitatorClient, type FetchFn, parseRetryAfter } from "./facilitatorClient.ts";

const JWK = {
  kty: "OKP",
  crv: "Ed25519",
  x: "11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo",
  kid: "k1",
} as const;

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(JSON.stringify(body), {
    status,
    headers: { "content-type": "application/json", ...headers },
  });
}

/** A fetch that records what it was asked and answers with `reply`. */
function recordingFetch(reply: (url: string, init: RequestInit | undefined) => Response | Promise<Response>) {
  const calls: { url: string; init: RequestInit | undefined }[] = [];
  const fetch: FetchFn = async (input, init) => {
    const url = String(input);
    calls.push({ url, init });
    return reply(url, init);
  };
  return { fetch, calls };
}

async function caught(promise: Promise<unknown>): Promise<TollgateError> {
  try {
    await promise;
  } catch (error) {
    if (error instanceof TollgateError) return error;
    throw error;
  }
  throw new Error("expected a TollgateError");
}

describe("createFacilitatorClient", () => {
  it("gets and parses the JWKS from the well-known path, keeping a base path", async () => {
    const { fetch, calls } = recordingFetch(() => json(200, { keys: [JWK] }));
    const client = createFacilitatorClient({ url: "http://fac.test/base/", fetch });
    expect(client.url).toBe("http://fac.test/base");
    await expect(client.jwks()).resolves.toEqual({ keys: [JWK] });
    expect(calls[0]?.url).toBe("http://fac.test/base/.well-known/jwks.json");
    expect(calls[0]?.init?.method).toBe("GET");
  });

  it("posts the proof to /verify as JSON and returns the verdict", async () => {
    const { fetch, calls } = recordingFetch(() => json(200, { valid: false, reason: "expired" }));
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const proof = { memo: "x" } as never;
    await expect(client.verify(proof)).resolves.toEqual({ valid: false, reason: "expired" });
    expect(calls[0]?.url).toBe("http://fac.test/verify");
    expect(calls[0]?.init?.method).toBe("POST");
    expect(JSON.parse(String(calls[0]?.init?.body))).toEqual({ proof: { memo: "x" } });
    expect(new Headers(calls[0]?.init?.headers).get("content-type")).toBe("application/json");
  });

  it("turns an error body into a TollgateError with the server's code, details and Retry-After", async () => {
    const { fetch } = recordingFetch(() =>
      json(
        429,
        { error: { code: "RateLimited", message: "slow down", details: { limit: 5 } } },
        { "retry-after": "7" },
      ),
    );
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const error = await caught(client.supported());
    expect(error.code).toBe("RateLimited");
    expect(error.message).toBe("slow down");
    expect(error.details).toEqual({ limit: 5 });
    expect(error.retryAfter).toBe(7);
  });

  it("surfaces InsufficientFunds from /authorize as a typed error", async () => {
    const { fetch } = recordingFetch(() =>
      json(402, { error: { code: "InsufficientFunds", message: "balance is 0" } }),
    );
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const error = await caught(client.authorize({} as never));
    expect(isTollgateError(error, "InsufficientFunds")).toBe(true);
  });

  it("maps a non-2xx reply without an error body to the code of its status", async () => {
    const { fetch } = recordingFetch(() => new Response("<html>bad gateway</html>", { status: 502 }));
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const error = await caught(client.jwks());
    expect(error.code).toBe("ChainUnavailable");
    expect(error.details?.status).toBe(502);
    expect(error.message).toBe("facilitator answered 502 to GET http://fac.test/.well-known/jwks.json");
  });

  it("reports an unreachable facilitator as ChainUnavailable with reason facilitator_unreachable", async () => {
    const fetch: FetchFn = async () => {
      throw new TypeError("fetch failed");
    };
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const error = await caught(client.jwks());
    expect(error.code).toBe("ChainUnavailable");
    expect(error.details?.reason).toBe("facilitator_unreachable");
    expect(error.cause).toBeInstanceOf(TypeError);
  });

  it("reports a facilitator that never answers as ChainUnavailable with reason facilitator_timeout", async () => {
    const fetch: FetchFn = (_input, init) =>
      new Promise((_resolve, reject) => {
        init?.signal?.addEventListener("abort", () => reject(init.signal?.reason));
      });
    const client = createFacilitatorClient({ url: "http://fac.test", fetch, timeoutMs: 20 });
    const error = await caught(client.jwks());
    expect(error.code).toBe("ChainUnavailable");
    expect(error.details?.reason).toBe("facilitator_timeout");
    expect(error.message).toBe(
      "facilitator at http://fac.test/.well-known/jwks.json did not answer within 20 ms",
    );
  });

  it("names the URL it tried and why it failed when the facilitator is unreachable", async () => {
    const refused = Object.assign(new Error("connect ECONNREFUSED 127.0.0.1:4020"), { code: "ECONNREFUSED" });
    const fetch: FetchFn = async () => {
      throw new TypeError("fetch failed", { cause: refused });
    };
    const client = createFacilitatorClient({ url: "http://user:secret@127.0.0.1:4020", fetch });
    const error = await caught(client.authorize({} as never));
    expect(error.message).toBe(
      "facilitator at http://127.0.0.1:4020/authorize is unreachable (connection refused)",
    );
    expect(error.details).toMatchObject({
      reason: "facilitator_unreachable",
      url: "http://user:secret@127.0.0.1:4020/authorize",
      notSent: true,
    });
  });

  it("lets the caller's own abort through unchanged", async () => {
    const controller = new AbortController();
    const fetch: FetchFn = (_input, init) =>
      new Promise((_resolve, reject) => {
        init?.signal?.addEventListener("abort", () => reject(new DOMException("aborted", "AbortError")));
      });
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const pending = client.jwks({ signal: controller.signal });
    controller.abort();
    await expect(pending).rejects.toMatchObject({ name: "AbortError" });
  });

  it("refuses a 2xx reply that fails its schema as Internal facilitator_bad_reply", async () => {
    const { fetch } = recordingFetch(() => json(200, { keys: [{ kty: "RSA" }] }));
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const error = await caught(client.jwks());
    expect(error.code).toBe("Internal");
    expect(error.details?.reason).toBe("facilitator_bad_reply");
    expect(error.message).toBe(
      "facilitator sent a malformed reply to GET http://fac.test/.well-known/jwks.json",
    );
  });

  it("refuses a reply body over 1 MiB without reading it whole", async () => {
    const { fetch } = recordingFetch(() => new Response("x".repeat(1024 * 1024 + 1), { status: 200 }));
    const client = createFacilitatorClient({ url: "http://fac.test", fetch });
    const error = await caught(client.jwks());
    expect(error.details?.reason).toBe("facilitator_bad_reply");
    expect(error.message).toBe(
      `facilitator reply from http://fac.test/.well-known/jwks.json is over ${1024 * 1024} bytes`,
    );
  });

  it("sends other endpoints through request() with the client's default headers", async () => {
    const { fetch, calls } = recordingFetch(() => json(200, { keys: [] }));
    const client = createFacilitatorClient({
      url: "http://fac.test",
      fetch,
      headers: { authorization: "Bearer k" },
    });
    const { JwksSchema } = await import("../protocol/facilitator.ts");
    await client.request("POST", "subscriptions/1/pause", JwksSchema, { body: { a: 1 } });
    expect(calls[0]?.url).toBe("http://fac.test/subscriptions/1/pause");
    expect(new Headers(calls[0]?.init?.headers).get("authorization")).toBe("Bearer k");
  });

  it("refuses a configuration without a usable URL or fetch", () => {
    const fetch: FetchFn = async () => json(200, {});
    expect(() => createFacilitatorClient({ url: "not a url", fetch })).toThrow(/not a URL/);
    expect(() => createFacilitatorClient({ url: "ftp://fac.test", fetch })).toThrow(/http/);
    expect(() => createFacilitatorClient({ url: "http://fac.test", fetch: undefined as never })).toThrow(
      /fetch/,
    );
  });
});

describe("parseRetryAfter", () => {
  it("reads delta-seconds and ignores other forms", () => {
    expect(parseRetryAfter("5")).toBe(5);
    expect(parseRetryAfter(" 12 ")).toBe(12);
    expect(parseRetryAfter("Wed, 21 Oct 2015 07:28:00 GMT")).toBeUndefined();
    expect(parseRetryAfter("-1")).toBeUndefined();
    expect(parseRetryAfter(null)).toBeUndefined();
  });
});
