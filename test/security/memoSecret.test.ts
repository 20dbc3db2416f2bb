/**
 * The memo secret once printed in the README and two examples was accepted by the
 * gate. Anyone who had read the README forged a memo for 1 micro-USDC, paid that through the
 * facilitator (which cannot check a gate's HMAC) and got the 0.50 report.
 *
 * Now: no secret is printed (a scan of README, docs and examples keeps it so), the gate refuses short,
 * low-entropy and published secrets, and a gate built as the README shows it — secret from the
 * environment, unset on a newcomer's machine — signs with a random secret nobody else knows. The
 * forgery is replayed for real: a devnet, a facilitator, a payment settled on chain.
 */
import { randomBytes } from "node:crypto";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { Hono } from "hono";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { Devnet } from "../../src/chain/startDevnet.ts";
import { startDevnet } from "../../src/chain/startDevnet.ts";
import { createPayer } from "../../src/client/createPayer.ts";
import { type RunningServer, serveApp } from "../../src/facilitator/createFacilitator.ts";
import { honoPaymentGate, type PaymentGateEnv } from "../../src/gate/honoPaymentGate.ts";
import { PUBLISHED_MEMO_SECRETS, sealMemo } from "../../src/gate/memo.ts";
import { type PaymentGate, paymentGate } from "../../src/gate/paymentGate.ts";
import type { PaymentGateOptions } from "../../src/gate/paymentGateOptions.ts";
import { base64UrlEncode } from "../../src/protocol/base64.ts";
import { TollgateError } from "../../src/protocol/errors.ts";
import { type PaymentOption, PaymentRequiredSchema } from "../../src/protocol/paymentRequired.ts";
import { startTestFacilitator, type TestFacilitator } from "../support/facilitatorHarness.ts";

const ROOT = join(import.meta.dirname, "..", "..");
/** The secret README.md, examples/subscription.ts and examples/meteredAllowance.ts once printed. */
const README_SECRET = "a secret of at least thirty-two bytes, shared by the API's instances";

const base: PaymentGateOptions = {
  payTo: "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  network: "eip155:31337",
  token: { address: "0x5FbDB2315678afecb367f032d93F642f64180aa3", name: "USD Coin", version: "2" },
  facilitator: "http://facilitator.test",
  routes: { "GET /api/reports/:id": { price: "0.50" } },
  logger: { debug() {}, warn() {}, error() {} },
};

function refusal(build: () => unknown): TollgateError {
  try {
    build();
  } catch (error) {
    if (error instanceof TollgateError) return error;
    throw error;
  }
  throw new Error("expected paymentGate to refuse its options");
}

describe("memo secrets the gate refuses", () => {
  it("refuses the secret the README printed, in any letter case or spacing around it", () => {
    expect(PUBLISHED_MEMO_SECRETS).toContain(README_SECRET);
    for (const secret of [README_SECRET, ` ${README_SECRET.toUpperCase()}\n`, Buffer.from(README_SECRET)]) {
      const error = refusal(() => paymentGate({ ...base, memoSecret: secret }));
      expect(error.code).toBe("InvalidRequest");
      expect(error.message).toMatch(/memoSecret: memo secret is one published in Tollgate's documentation/);
    }
  });

  it.each([
    ["32 equal bytes (the test harness's old fill(7))", new Uint8Array(32).fill(7)],
    ["32 equal letters", "a".repeat(32)],
    ["a counting sequence", Uint8Array.from({ length: 40 }, (_, i) => i)],
    ["a repeated word", "password".repeat(5)],
    ["a repeated hex block", "0123456789abcdef".repeat(2)],
    ["the alphabet", "abcdefghijklmnopqrstuvwxyz0123456789"],
  ])("refuses a low-entropy secret: %s", (_label, secret) => {
    expect(refusal(() => paymentGate({ ...base, memoSecret: secret })).message).toMatch(
      /memoSecret: memo secret has too little entropy/,
    );
  });

  it("refuses a secret under 32 bytes", () => {
    expect(refusal(() => paymentGate({ ...base, memoSecret: randomBytes(31) })).message).toMatch(
      /memoSecret: memo secret must be at least 32 bytes, got 31/,
    );
    expect(refusal(() => paymentGate({ ...base, memoSecret: "" })).message).toMatch(/at least 32 bytes/);
  });

  it("accepts generated secrets: 32 random bytes, and their hex and base64url text", () => {
    for (let i = 0; i < 200; i++) {
      const bytes = randomBytes(32);
      for (const secret of [bytes, bytes.toString("hex"), bytes.toString("base64url")]) {
        expect(typeof paymentGate({ ...base, memoSecret: secret })).toBe("function");
      }
    }
  });

  it("generates a random secret per gate when none is given, and says so", async () => {
    const notes: string[] = [];
    const logger = {
      debug() {},
      warn: (_: object, message?: string) => notes.push(message ?? ""),
      error() {},
    };
    const first = paymentGate({ ...base, memoSecret: undefined, logger });
    const second = paymentGate({ ...base, logger });
    expect(notes).toHaveLength(2);
    expect(notes[0]).toMatch(/no memoSecret given.*random one.*Several instances.*share one secret/);
    const offer = async (gate: PaymentGate) => {
      const result = await gate({ method: "GET", url: "/api/reports/1", headers: new Headers() });
      if (result.kind !== "respond") throw new Error("expected a 402");
      return PaymentRequiredSchema.parse(await result.response.json()).accepts[0]!.memo;
    };
    // The MACs differ: each gate signs with its own secret.
    const [a, b] = [await offer(first), await offer(second)];
    expect(a.split(".")[1]).not.toBe(b.split(".")[1]);
  });
});

/** Files a newcomer copies from: README.md, docs/ and examples/. */
function publishedFiles(): string[] {
  const files = [join(ROOT, "README.md")];
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const path = join(dir, name);
      if (statSync(path).isDirectory()) walk(path);
      else if (/\.(md|ts|js|mjs|json|sh|ya?ml|env)$/.test(name)) files.push(path);
    }
  };
  walk(join(ROOT, "docs"));
  walk(join(ROOT, "examples"));
  return files;
}

/** The code of a file: the whole of a script, the fenced blocks of Markdown. */
function codeOf(path: string, text: string): string {
  if (!path.endsWith(".md")) return text;
  return [...text.matchAll(/^```[^\n]*\n([\s\S]*?)^```/gm)].map((match) => match[1]).join("\n");
}

/** Places where a memo secret is written out literally, as `file:line: text`. */
function literalSecrets(path: string, text: string): string[] {
  const found: string[] = [];
  const code = codeOf(path, text);
  const lines = code.split("\n");
  const literal = /(["'`])(?:(?!\1).){8,}\1|new Uint8Array|Uint8Array\.from|Buffer\.from|\.fill\(/;
  for (const line of lines) {
    const where = `${relative(ROOT, path)}: ${line.trim()}`;
    if (/memoSecret\s*[:=]/.test(line) && literal.test(line.replace(/\/\/.*$/, ""))) found.push(where);
    // A shell or .env assignment with a value that is not generated on the spot.
    if (/TOLLGATE_MEMO_SECRET\s*=\s*(?!\$\(|"\$\()\S/.test(line)) found.push(where);
    // `memoSecret: SECRET` where SECRET is a literal written elsewhere in the file.
    const name = /memoSecret\s*:\s*([A-Za-z_$][\w$]*)\s*[,}\n]/.exec(`${line}\n`)?.[1];
    if (name !== undefined && name !== "undefined") {
      const assignment = new RegExp(`(?:const|let|var)\\s+${name}\\b[^=]*=\\s*(.*)$`, "m").exec(code)?.[1];
      if (assignment !== undefined && literal.test(assignment))
        found.push(`${where} (${name} = ${assignment})`);
    }
  }
  for (const secret of PUBLISHED_MEMO_SECRETS) {
    if (text.toLowerCase().includes(secret.toLowerCase()))
      found.push(`${relative(ROOT, path)}: prints "${secret}"`);
  }
  return found;
}

describe("README, docs and examples print no memo secret", () => {
  it("finds none written out literally, and none of the published ones", () => {
    const files = publishedFiles();
    expect(files.length).toBeGreaterThan(10);
    expect(files.flatMap((path) => literalSecrets(path, readFileSync(path, "utf8")))).toEqual([]);
  });

  it("would catch a literal secret creeping back in each of the forms checked", () => {
    const samples = [
      'const gate = paymentGate({ memoSecret: "0f1e2d3c4b5a69788796a5b4c3d2e1f0" });',
      "  memoSecret: new Uint8Array(32).fill(1),",
      "  memoSecret: process.env.TOLLGATE_MEMO_SECRET ?? 'fallback-secret-for-dev-only',",
      'const SECRET = "copied-from-the-readme-secret-1234";\npaymentGate({ memoSecret: SECRET, payTo });',
      "export TOLLGATE_MEMO_SECRET=9f8e7d6c5b4a39281706f5e4d3c2b1a0",
      `Use "${README_SECRET}" in development.`,
    ];
    for (const sample of samples) expect(literalSecrets(join(ROOT, "x.ts"), sample), sample).not.toEqual([]);
    for (const fine of [
      "  memoSecret: process.env.TOLLGATE_MEMO_SECRET, // shared by every instance",
      "  memoSecret: randomBytes(32),",
      "export TOLLGATE_MEMO_SECRET=$(openssl rand -hex 32)",
    ]) {
      expect(literalSecrets(join(ROOT, "x.ts"), fine), fine).toEqual([]);
    }
  });
});

describe("a memo forged with the README's secret, paid on chain", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;
  let server: RunningServer;
  const served: string[] = [];

  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 3 });
    tf = await startTestFacilitator(devnet);
    // The README's server, as it reads now: the secret comes from the environment, which a newcomer
    // has not set.
    const env: Record<string, string | undefined> = {};
    const gate = paymentGate({
      payTo: devnet.accounts[1]!.address,
      network: devnet.network,
      token: devnet.contracts.usd,
      facilitator: tf.url,
      memoSecret: env.TOLLGATE_MEMO_SECRET,
      routes: { "GET /api/reports/:id": { price: "0.50", description: "one report" } },
      logger: { debug() {}, warn() {}, error() {} },
    });
    const app = new Hono<PaymentGateEnv>();
    app.use("/api/*", honoPaymentGate(gate));
    app.get("/api/reports/:id", (c) => {
      served.push(c.req.param("id"));
      return c.json({ id: c.req.param("id") });
    });
    server = await serveApp(app);
  });

  afterAll(async () => {
    await server?.close();
    await tf?.stop();
    await devnet?.stop();
  });

  it("does not buy the 0.50 report for 0.01: the gate refuses the memo it did not issue", async () => {
    const unpaid = await fetch(`${server.url}/api/reports/1`);
    const genuine = PaymentRequiredSchema.parse(await unpaid.json()).accepts[0]!;
    const forged: PaymentOption = {
      ...genuine,
      amount: "10000",
      memo: sealMemo(Buffer.from(README_SECRET), {
        m: "GET",
        p: "/api/reports/1",
        a: "10000",
        t: genuine.payTo,
        n: genuine.network,
        k: genuine.token,
        e: Math.floor(Date.now() / 1000) + 300,
        r: base64UrlEncode(randomBytes(12)),
      }),
    };
    const payer = createPayer({
      account: devnet.accounts[2]!.account,
      network: devnet.network,
      facilitator: tf.url,
      fetch,
    });
    // The facilitator cannot check a gate's HMAC: it settles the forged memo and signs a proof.
    const receipt = await payer.pay(forged, { maxAmount: "0.01" });
    expect(receipt.proof.amount).toBe("10000");

    const attempt = await fetch(`${server.url}/api/reports/1`, { headers: { "X-PAYMENT": receipt.header } });
    expect(attempt.status).toBe(402);
    const body = PaymentRequiredSchema.parse(await attempt.json());
    expect(body).toMatchObject({ error: "InvalidPaymentProof" });
    expect(body.message).toMatch(/memo was not issued by this gate/);
    expect(served).toEqual([]);
  });
});
