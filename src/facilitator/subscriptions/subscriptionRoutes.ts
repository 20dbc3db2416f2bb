/**
 * HTTP routes of the relayed subscription API (DESIGN.md §4; docs/subscriptions.md):
 * `GET /plans/:id`, `GET /subscriptions/:id`, `GET /subscribers/:address`, `POST /subscriptions`,
 * `POST /subscriptions/approval` (a relayed permit topping up the manager's allowance),
 * `POST /subscriptions/:id/{pause|resume|cancel|overage}`.
 */
import type { Hono } from "hono";
import { AddressSchema } from "../../protocol/address.ts";
import { UintStringSchema } from "../../protocol/amount.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import {
  ApprovalRequestSchema,
  SetMaxOverageRequestSchema,
  SubscribeRequestSchema,
  SubscriptionActionRequestSchema,
  SubscriptionActionSchema,
} from "../../protocol/subscriptions.ts";
import { readJsonBody } from "../httpErrors.ts";
import type { SubscriptionService } from "./subscriptionService.ts";

function idParam(text: string | undefined, what: string): bigint {
  return BigInt(parseWire(UintStringSchema, text, { what }));
}

export function mountSubscriptionRoutes(app: Hono, service: SubscriptionService): void {
  app.get("/plans/:id", async (c) => c.json(await service.getPlan(idParam(c.req.param("id"), "plan id"))));

  app.get("/subscriptions/:id", async (c) =>
    c.json(await service.getSubscription(idParam(c.req.param("id"), "subscription id"))),
  );

  app.get("/subscribers/:address", async (c) => {
    const subscriber = parseWire(AddressSchema, c.req.param("address"), { what: "subscriber address" });
    const tokenText = c.req.query("token");
    const token =
      tokenText === undefined ? undefined : parseWire(AddressSchema, tokenText, { what: "token" });
    return c.json(await service.getSubscriber(subscriber, token));
  });

  app.post("/subscriptions", async (c) => {
    const request = await readJsonBody(c, SubscribeRequestSchema);
    return c.json(await service.subscribe(request), 201);
  });

  app.post("/subscriptions/approval", async (c) => {
    const request = await readJsonBody(c, ApprovalRequestSchema);
    return c.json(await service.approve(request));
  });

  app.post("/subscriptions/:id/:action", async (c) => {
    const subscriptionId = idParam(c.req.param("id"), "subscription id");
    const action = parseWire(SubscriptionActionSchema, c.req.param("action"), { what: "action" });
    const request =
      action === "overage"
        ? await readJsonBody(c, SetMaxOverageRequestSchema)
        : await readJsonBody(c, SubscriptionActionRequestSchema);
    return c.json(await service.act(subscriptionId, action, request));
  });
}
