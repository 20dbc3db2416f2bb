/**
 * HTTP routes of the relayed subscription API (docs/subscriptions.md):
 * `GET /plans/:id`, `GET /subscriptions/:id`, `GET /subscribers/:address`, `POST /subscriptions`,
 * `POST /subscriptions/approval` (a relayed permit topping up the manager's allowance),
 * `POST /subscriptions/:id/{pause|resume|cancel|overage|limit}`.
 */
import type { Hono } from "hono";
import { z } from "zod";
import { readJsonBody } from "../../../http/httpErrors.ts";
import { routeDoc } from "../../../http/routeDocs.ts";
import { AddressSchema } from "../../../protocol/address.ts";
import { UintStringSchema } from "../../../protocol/amount.ts";
import { parseWire } from "../../../protocol/parseWire.ts";
import {
  ApprovalRequestSchema,
  ApprovalResponseSchema,
  PlanInfoSchema,
  SetMaxOverageRequestSchema,
  SetSpendLimitRequestSchema,
  SubscribeRequestSchema,
  SubscribeResponseSchema,
  SubscriberInfoSchema,
  SubscriptionActionRequestSchema,
  SubscriptionActionResponseSchema,
  SubscriptionActionSchema,
  SubscriptionInfoSchema,
} from "../../../protocol/subscriptions.ts";
import type { SubscriptionService } from "./subscriptionService.ts";

function idParam(text: string | undefined, what: string): bigint {
  return BigInt(parseWire(UintStringSchema, text, { what }));
}

/** The subscription routes, documented for the OpenAPI document (routeDocs.ts). */
const docs = {
  plan: routeDoc({
    summary: "A plan's terms as the SubscriptionManager holds them",
    params: { id: UintStringSchema },
    response: PlanInfoSchema,
    errors: [400, 404, 503],
  }),
  subscription: routeDoc({
    summary: "A subscription's state as the SubscriptionManager holds it",
    params: { id: UintStringSchema },
    response: SubscriptionInfoSchema,
    errors: [400, 404, 503],
  }),
  subscriber: routeDoc({
    summary:
      "What a subscriber needs to sign its next intent (intent nonce, chain time, a token's permit nonce, allowance and balance), and its indexed subscriptions",
    params: { address: AddressSchema },
    query: z.object({ token: AddressSchema.optional() }),
    response: SubscriberInfoSchema,
    errors: [400, 503],
  }),
  subscribe: routeDoc({
    summary: "Relay a subscriber's signed subscription to a plan (with an optional permit)",
    request: SubscribeRequestSchema,
    response: SubscribeResponseSchema,
    status: 201,
    errors: [400, 402, 409, 413, 422, 429, 503],
  }),
  approval: routeDoc({
    summary: "Relay a permit topping up the manager's allowance",
    request: ApprovalRequestSchema,
    response: ApprovalResponseSchema,
    errors: [400, 413, 422, 429, 503],
  }),
  action: routeDoc({
    summary:
      "Relay the subscriber's signed pause, resume, cancel, overage cap or spend limit of a subscription (the body per action)",
    params: { id: UintStringSchema, action: SubscriptionActionSchema },
    response: SubscriptionActionResponseSchema,
    errors: [400, 404, 413, 422, 429, 503],
  }),
};

export function mountSubscriptionRoutes(app: Hono, service: SubscriptionService): void {
  app.get("/plans/:id", docs.plan, async (c) =>
    c.json(await service.getPlan(idParam(c.req.param("id"), "plan id"))),
  );

  app.get("/subscriptions/:id", docs.subscription, async (c) =>
    c.json(await service.getSubscription(idParam(c.req.param("id"), "subscription id"))),
  );

  app.get("/subscribers/:address", docs.subscriber, async (c) => {
    const subscriber = parseWire(AddressSchema, c.req.param("address"), { what: "subscriber address" });
    const tokenText = c.req.query("token");
    const token =
      tokenText === undefined ? undefined : parseWire(AddressSchema, tokenText, { what: "token" });
    return c.json(await service.getSubscriber(subscriber, token));
  });

  app.post("/subscriptions", docs.subscribe, async (c) => {
    const request = await readJsonBody(c, SubscribeRequestSchema);
    return c.json(await service.subscribe(request), 201);
  });

  app.post("/subscriptions/approval", docs.approval, async (c) => {
    const request = await readJsonBody(c, ApprovalRequestSchema);
    return c.json(await service.approve(request));
  });

  app.post("/subscriptions/:id/:action", docs.action, async (c) => {
    const subscriptionId = idParam(c.req.param("id"), "subscription id");
    const action = parseWire(SubscriptionActionSchema, c.req.param("action"), { what: "action" });
    const request =
      action === "overage"
        ? await readJsonBody(c, SetMaxOverageRequestSchema)
        : action === "limit"
          ? await readJsonBody(c, SetSpendLimitRequestSchema)
          : await readJsonBody(c, SubscriptionActionRequestSchema);
    return c.json(await service.act(subscriptionId, action, request));
  });
}
