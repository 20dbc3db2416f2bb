import { describe, expect, it } from "vitest";
import { parseRpcUrls, redactRpcUrl, redactRpcUrlsIn, redactRpcUrlsInError } from "./rpcUrls.ts";

describe("redactRpcUrl", () => {
  it.each([
    [
      "https://base-mainnet.g.alchemy.com/v2/Zx81kQ2mP9vLr5TtYw3sNc7dHf0aJbEu",
      "https://base-mainnet.g.alchemy.com/v2/***",
    ],
    [
      "https://base-mainnet.infura.io/v3/0123456789abcdef0123456789abcdef",
      "https://base-mainnet.infura.io/v3/***",
    ],
    [
      "https://wild-small-sea.base-mainnet.quiknode.pro/4f1c2b9e8d7a6b5c4d3e2f1a0b9c8d7e6f5a4b3c/",
      "https://wild-small-sea.base-mainnet.quiknode.pro/***/",
    ],
    [
      "https://rpc.ankr.com/base/8f2e4c6a1b3d5f7e9a0c2e4f6a8b0d2f4e6a8c0e2f4a6b8d0f2e4a6c8e0a2c4e",
      "https://rpc.ankr.com/base/***",
    ],
    ["https://base.llamarpc.com?apikey=s3cr3t&x=1", "https://base.llamarpc.com?apikey=***&x=***"],
    ["https://alice:hunter2@rpc.example.com:8545/", "https://***@rpc.example.com:8545"],
    ["http://127.0.0.1:8545", "http://127.0.0.1:8545"],
    ["https://mainnet.base.org/", "https://mainnet.base.org"],
    ["not a url with a key abc", "***"],
  ])("masks the secret parts of %s", (url, shown) => {
    expect(redactRpcUrl(url)).toBe(shown);
  });
});

describe("redactRpcUrlsIn", () => {
  it("masks each URL wherever it appears in a text, also without its credentials", () => {
    const url = "https://bob:pw@base-mainnet.g.alchemy.com/v2/Zx81kQ2mP9vLr5TtYw3sNc7dHf0aJbEu";
    const text = `HTTP request failed. URL: https://base-mainnet.g.alchemy.com/v2/Zx81kQ2mP9vLr5TtYw3sNc7dHf0aJbEu and ${url}`;
    const shown = redactRpcUrlsIn(text, [url]);
    expect(shown).not.toContain("Zx81kQ2mP9vLr5TtYw3sNc7dHf0aJbEu");
    expect(shown).not.toContain("pw@");
  });

  it("masks an error's message, details, meta messages and causes in place", () => {
    const url = "https://base-mainnet.infura.io/v3/0123456789abcdef0123456789abcdef";
    const cause = Object.assign(new Error(`fetch to ${url} failed`), { url });
    const error = Object.assign(new Error(`at ${url}`, { cause }), {
      details: url,
      metaMessages: [`URL: ${url}`],
    });
    redactRpcUrlsInError(error, [url]);
    const printed = JSON.stringify({
      ...error,
      message: error.message,
      stack: error.stack,
      cause: { ...cause, message: cause.message, stack: cause.stack },
    });
    expect(printed).not.toContain("0123456789abcdef0123456789abcdef");
    expect(error.message).toBe("at https://base-mainnet.infura.io/v3/***");
  });
});

describe("parseRpcUrls", () => {
  it("reads one URL or several, comma-separated, in order", () => {
    expect(parseRpcUrls("http://a:8545")).toEqual(["http://a:8545"]);
    expect(parseRpcUrls(" https://a/v2/k1 , https://b/v3/k2,")).toEqual([
      "https://a/v2/k1",
      "https://b/v3/k2",
    ]);
  });

  it("refuses an entry that is not an http(s) URL without printing its key", () => {
    expect(() => parseRpcUrls("https://a/v2/k1,wss://b.example/v3/0123456789abcdef0123456789abcdef")).toThrow(
      "TOLLGATE_RPC_URL: entry 2 (wss://b.example/v3/***) is not an http(s) URL",
    );
    expect(() => parseRpcUrls(" , ")).toThrow("TOLLGATE_RPC_URL holds no URL");
    expect(() => parseRpcUrls("http://a,http://a")).toThrow("TOLLGATE_RPC_URL names a URL twice");
  });
});
