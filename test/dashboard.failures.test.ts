/**
 * What went wrong, on the provider's pages, over a real store (no chain, no sign-in): the section is
 * mounted on an app whose session is already a provider's, and its pages are read through
 * `app.request()`.
 */
import { Hono } from "hono";
import { encodeErrorResult, getAddress, parseAbi } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DashboardEnv } from "../src/facilitator/dashboard/dashboardApp.ts";
import { type ProviderView, providerSection } from "../src/facilitator/dashboard/providerSection.ts";
import { createFixedClock } from "../src/protocol/clock.ts";
import { mountSubscriptionViews } from "../src/schemes/subscription/facilitator/subscriptionViews.ts";
import { createTestStore } from "../src/store/createTestStore.ts";
import type { Store } from "../src/store/store.ts";

const provider = getAddress("0x00000000000000000000000000000000000000aa");
const subscriber = getAddress("0x00000000000000000000000000000000000000bb");
const manager = getAddress("0x00000000000000000000000000000000000000cc");
const token = { decimals: 6, symbol: "USDC" };
const clock = createFixedClock(Date.parse("2026-11-22T12:00:00Z"));
let store: Store;

beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});
afterAll(async () => {
  await store?.close();
});

/** The provider's section on an app whose every request is the provider's signed-in session. */
function providerApp(views: readonly ProviderView[]): Hono<DashboardEnv> {
  const app = new Hono<DashboardEnv>();
  app.use("*", async (c, next) => {
    c.set("session", {
      kind: "provider",
      provider,
      keyId: 1,
      csrfToken: "csrf-token",
      expiresAt: new Date(clock.now() + 3_600_000),
    });
    await next();
  });
  providerSection({ store, clock, token }, views).mount(app);
  return app;
}

async function pageText(app: Hono<DashboardEnv>, path: string): Promise<string> {
  const res = await app.request(`http://dash.test${path}`);
  expect(res.status).toBe(200);
  return res.text();
}

describe("failed renewals", () => {
  it("show the revert decoded to its error and arguments, beside the indexer's message", async () => {
    const reason = encodeErrorResult({
      abi: parseAbi(["error ERC20InsufficientBalance(address sender, uint256 balance, uint256 needed)"]),
      errorName: "ERC20InsufficientBalance",
      args: [subscriber, 5n, 1_000_000n],
    });
    await store.query("INSERT INTO events (type, data) VALUES ('subscription.renewal_failed', $1)", [
      {
        provider: provider.toLowerCase(),
        subscriptionId: "4",
        planId: "2",
        subscriber: subscriber.toLowerCase(),
        amount: "1000000",
        code: "InvalidRequest",
        message: "the chain refused the renewal",
        reason,
      },
    ]);
    const app = providerApp([mountSubscriptionViews({ store, token, scope: { chainId: 31337, manager } })]);
    const text = await pageText(app, "/subscriptions");
    expect(text).toContain(`ERC20InsufficientBalance(${subscriber}, 5, 1000000)`);
    expect(text).toContain("the chain refused the renewal");
    expect(text).not.toContain(reason);
  });
});

