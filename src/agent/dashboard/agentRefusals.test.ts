import { Hono } from "hono";
import { getAddress } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { DashboardEnv } from "../../facilitator/dashboard/dashboardApp.ts";
import { createFixedClock } from "../../protocol/clock.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import type { Store } from "../../store/store.ts";
import { createBudgetLedger } from "../budget/createBudgetLedger.ts";
import { agentSection } from "./agentSection.ts";
import { startRunRecording } from "./runSpendRecords.ts";

const seller = getAddress("0x00000000000000000000000000000000000000aa");
const clock = createFixedClock(Date.parse("2026-11-22T12:00:00Z"));
let store: Store;
beforeAll(async () => {
  store = await createTestStore({ databaseUrl: process.env.DATABASE_URL });
});
afterAll(async () => {
  await store?.close();
});

/** The agent section on an app whose every request is the agent operator's session. */
function agentApp(): Hono<DashboardEnv> {
  const app = new Hono<DashboardEnv>();
  app.use("*", async (c, next) => {
    c.set("session", { kind: "agent", csrfToken: "csrf", expiresAt: new Date(clock.now() + 3_600_000) });
    await next();
  });
  agentSection({ store: (work) => work(store), clock, token: { decimals: 6, symbol: "USDC" } }).mount(app);
  return app;
}

describe("the agent's refusals", () => {
  it("lists refused and failed calls with their codes, and counts denied calls as refused in the policy's reasons", async () => {
    await createBudgetLedger({ store, clock }).setLimits("researcher", { total: 2_000_000n });
    const run = startRunRecording(store, {
      agent: "researcher",
      clock: createFixedClock(clock.now() - 60_000),
    });
    const subscribe = "100 calls expected; subscribe.";
    run.record({
      tool: "summarize",
      provider: seller,
      mode: "subscription",
      amount: 50_000n,
      ok: true,
      reason: subscribe,
    });
    run.record({
      tool: "summarize",
      provider: seller,
      mode: "subscription",
      amount: 0n,
      ok: false,
      reason: subscribe,
      error: "ApprovalDenied",
    });
    run.record({
      tool: "translate",
      provider: seller,
      mode: "one-time",
      amount: 0n,
      ok: false,
      reason: "one call; pay once.",
      error: "BudgetExceeded",
    });
    run.record({
      tool: "translate",
      provider: seller,
      mode: "one-time",
      amount: 0n,
      ok: false,
      error: "SellerUnreachable",
    });
    await run.finish();

    const res = await agentApp().request("http://dash.test/researcher");
    expect(res.status).toBe(200);
    const text = await res.text();
    const panel = (id: string) => {
      const start = text.indexOf(`id="${id}"`);
      return text.slice(start, text.indexOf("</section>", start));
    };
    const refusals = panel("refusals");
    expect([...refusals.matchAll(/data-refusal="([A-Za-z]+)"/g)].map((m) => m[1])).toEqual([
      "SellerUnreachable",
      "BudgetExceeded",
      "ApprovalDenied",
    ]);
    expect(refusals).toContain("the spend is above the approval threshold and was not approved");
    expect(refusals).toContain("the budget&#39;s limits do not allow this spend");
    const reasons = [
      ...panel("policy-reasons").matchAll(
        /<tr><td>(.*?)<\/td><td>(.*?)<\/td><td class="num">(\d+)<\/td><td>(.*?)<\/td>/g,
      ),
    ]
      .map((m) => m.slice(1, 5))
      .sort();
    expect(reasons).toEqual(
      [
        ["summarize", "subscription", "1", subscribe],
        ["summarize", "refused", "1", subscribe],
        ["translate", "refused", "1", "one call; pay once."],
      ].sort(),
    );
  });
});
