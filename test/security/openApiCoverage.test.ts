/**
 * The OpenAPI document once listed 18 of the facilitator's routes; `/providers`,
 * `/subscriptions`, `/events`, `/usage`, `/webhooks`, `/analytics`, the dashboard and others were
 * missing, and what it said about credentials was typed by hand. The document is now built from the
 * routes the app serves (src/http/routeDocs.ts), credentials included.
 *
 * Over a facilitator with every module and scheme part (channels, subscriptions, usage, dashboard with
 * the agent views) that is never started: its routes are enumerated from `app.routes`, and each is
 * asked without credentials (a documented credential must be demanded, an undocumented one must not)
 * and with a provider key and with a payer's signed read (each must be enough where it is documented,
 * and refused where it is not). Nothing here reaches a chain past a refused connection.
 */
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { agentDashboard } from "../../src/agent/dashboard/agentSection.ts";
import { payerReadHeaders } from "../../src/client/payerReadHeaders.ts";
import { createFacilitator, type Facilitator } from "../../src/facilitator/createFacilitator.ts";
import { generateProofKey } from "../../src/facilitator/proofKeys.ts";
import { hashApiKey } from "../../src/facilitator/providers/requireProvider.ts";
import { createTestStore } from "../../src/store/createTestStore.ts";
import type { Store } from "../../src/store/store.ts";

type Operation = { summary?: string; security?: Record<string, unknown>[] };
type Document = {
  paths: Record<string, Record<string, Operation>>;
  components: { securitySchemes: Record<string, unknown> };
};

let store: Store;
let facilitator: Facilitator;
let doc: Document;
const apiKey = `tg_${"A".repeat(32)}`;
const payer = privateKeyToAccount(generatePrivateKey());

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
  const address = (n: number) => `0x${n.toString(16).padStart(40, "0")}` as const;
  facilitator = createFacilitator({
    store,
    // Nothing listens there: a route that reads the chain fails fast, which is all this file needs.
    rpcUrl: "http://127.0.0.1:9",
    network: "eip155:31337",
    gasAccount: privateKeyToAccount(generatePrivateKey()),
    proofKeys: [generateProofKey().key],
    batchSettler: address(1),
    subscriptionManager: address(2),
    channels: address(3),
    tokens: [{ address: address(4), name: "USD Coin", version: "2", symbol: "USDC", decimals: 6 }],
    dashboard: { agents: agentDashboard({ store, token: "an-agent-operator-token-of-some-length" }) },
  });
  const provider = privateKeyToAccount(generatePrivateKey()).address.toLowerCase();
  await store.query("INSERT INTO providers (address) VALUES ($1)", [provider]);
  await store.query("INSERT INTO provider_api_keys (provider, key_hash, prefix) VALUES ($1, $2, $3)", [
    provider,
    hashApiKey(apiKey),
    apiKey.slice(0, 8),
  ]);
  const response = await facilitator.app.request("/openapi.json");
  expect(response.status).toBe(200);
  doc = (await response.json()) as Document;
}, 60_000);

afterAll(async () => {
  await store?.close();
});

/** The (method, path) pairs the app serves, straight from Hono: `use` middleware is method ALL. */
function served(): { method: string; path: string }[] {
  const seen = new Map<string, { method: string; path: string }>();
  for (const r of facilitator.app.routes) {
    if (r.method !== "ALL") seen.set(`${r.method} ${r.path}`, { method: r.method, path: r.path });
  }
  return [...seen.values()];
}

const toOpenApi = (path: string) => path.replace(/:(\w+)/g, "{$1}");

function operationOf(method: string, path: string): Operation | undefined {
  return doc.paths[toOpenApi(path)]?.[method.toLowerCase()];
}

/** Credentials the document names for a route (any one admits); empty = public. */
function securityOf(method: string, path: string): string[] {
  return (operationOf(method, path)?.security ?? []).flatMap((s) => Object.keys(s));
}

/**
 * A concrete URL for a Hono path, with parameter values of a plausible shape (ids that name nothing:
 * `DELETE /providers/keys/:id` must not revoke the key the next probes use).
 */
function concrete(path: string): string {
  return path.replace(/:(\w+)/g, (_, name: string) => (name === "nonce" ? `0x${"ab".repeat(32)}` : "987654"));
}

function ask(method: string, path: string, headers: Record<string, string> = {}): Promise<Response> {
  const hasBody = method !== "GET" && method !== "HEAD" && method !== "DELETE";
  return Promise.resolve(
    facilitator.app.request(concrete(path), {
      method,
      headers: hasBody ? { "content-type": "application/json", ...headers } : headers,
      ...(hasBody ? { body: "{}" } : {}),
    }),
  );
}

/** Refused for want of a credential: a 401, or (dashboard pages) a redirect to the sign-in form. */
function refusedForCredentials(response: Response): boolean {
  return (
    response.status === 401 ||
    (response.status === 303 && response.headers.get("location") === "/dashboard/login")
  );
}

describe("the facilitator's OpenAPI document", () => {
  it("lists every route the facilitator serves, and nothing it does not serve", () => {
    const routes = served();
    const servedKeys = routes.map((r) => `${r.method.toLowerCase()} ${toOpenApi(r.path)}`).sort();
    const documentedKeys = Object.entries(doc.paths)
      .flatMap(([path, methods]) => Object.keys(methods).map((m) => `${m} ${path}`))
      .sort();
    expect(documentedKeys).toEqual(servedKeys);
    // The routes the old, hand-written document left out are among them.
    for (const key of [
      "post /providers",
      "post /providers/challenge",
      "get /providers/me",
      "post /subscriptions",
      "post /subscriptions/{id}/{action}",
      "get /plans/{id}",
      "get /events",
      "post /usage",
      "get /usage",
      "post /webhooks",
      "get /analytics/volume",
      "get /dashboard/provider/plans",
      "get /dashboard/agents/{agent}",
    ]) {
      expect(servedKeys).toContain(key);
    }
  });

  it("describes each route it lists, with credentials the document defines", () => {
    const undocumented = served().filter((r) => {
      const summary = operationOf(r.method, r.path)?.summary;
      return summary === undefined || summary === "Undocumented";
    });
    expect(undocumented).toEqual([]);
    const schemes = Object.keys(doc.components.securitySchemes);
    for (const r of served()) {
      for (const name of securityOf(r.method, r.path)) expect(schemes).toContain(name);
    }
  });

  it("names a credential for exactly the routes that refuse a caller without one", async () => {
    const wrong: string[] = [];
    for (const { method, path } of served()) {
      const response = await ask(method, path);
      const demanded = refusedForCredentials(response);
      const documented = securityOf(method, path).length > 0;
      if (demanded !== documented) {
        wrong.push(`${method} ${path}: answered ${response.status}, documented ${securityOf(method, path)}`);
      }
    }
    expect(wrong).toEqual([]);
  }, 60_000);

  it("admits a caller of a guarded route with exactly the credentials it names", async () => {
    const wrong: string[] = [];
    let admitted = 0;
    for (const { method, path } of served()) {
      const documented = securityOf(method, path);
      // Public routes admit anyone; the metrics token and dashboard sessions have suites of their own.
      if (
        documented.length === 0 ||
        documented.every((s) => s === "metricsToken" || s === "dashboardSession")
      ) {
        continue;
      }
      for (const scheme of ["providerKey", "payerAuth"]) {
        const headers =
          scheme === "providerKey"
            ? { authorization: `Bearer ${apiKey}` }
            : await payerReadHeaders(payer, { method, path: concrete(path) });
        const response = await ask(method, path, headers);
        const admits = !refusedForCredentials(response);
        if (admits) admitted++;
        if (admits !== documented.includes(scheme)) {
          wrong.push(
            `${method} ${path} with ${scheme}: answered ${response.status}, documented ${documented}`,
          );
        }
      }
    }
    expect(wrong).toEqual([]);
    expect(admitted).toBeGreaterThan(15);
  }, 60_000);
});
