/**
 * `tollgate webhooks add | list | remove | deliveries | retry | rotate-secret`: a provider's webhook
 * endpoints on the facilitator. Authenticates with the provider's API key.
 */
import { parseArgs } from "node:util";
import {
  type CreateWebhookRequest,
  CreateWebhookResponseSchema,
  DeleteWebhookResponseSchema,
  ListWebhookDeliveriesResponseSchema,
  ListWebhooksResponseSchema,
  RetryWebhookDeliveryResponseSchema,
  RotateWebhookSecretResponseSchema,
  type WebhookDelivery,
} from "../../facilitator/webhooks/webhookApi.ts";
import type { FetchFn } from "../../http/facilitatorClient.ts";
import { WebhookEventTypeSchema } from "../../protocol/webhook.ts";
import { parseDuration } from "../devnet.ts";
import { DEFAULT_FACILITATOR_URL, providerClient } from "./analytics.ts";

export const summary =
  "add | list | remove | deliveries | retry | rotate-secret — a provider's webhook endpoints";

type CommandOutput = { log(line: string): void; error(line: string): void };

export type WebhooksCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
};

const usage = `usage: tollgate webhooks <command> [--facilitator ${DEFAULT_FACILITATOR_URL}] [--api-key tg_…] [--dir .tollgate] [--json]
  add <url> [--events payment.settled,subscription.created,…] [--description text]
                         register an endpoint (all event types unless --events); prints its secret once
  list                   your endpoints
  remove <id>            delete an endpoint; nothing more is sent to it
  deliveries <id> [--status pending|sending|delivered|dead] [--limit 20]
                         recent deliveries and their attempts
  retry <id> <deliveryId>
                         requeue a dead letter now
  rotate-secret <id> [--grace 1d]
                         issue a new secret; the old one keeps signing for the grace period
Event types: ${WebhookEventTypeSchema.options.join(", ")}.
The facilitator defaults to TOLLGATE_FACILITATOR_URL; the API key to TOLLGATE_API_KEY, then to the key
\`tollgate provider register --save\` saved in <dir> for that facilitator.`;

function parseWebhooksArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      events: { type: "string" },
      description: { type: "string" },
      status: { type: "string" },
      limit: { type: "string" },
      grace: { type: "string" },
      facilitator: { type: "string" },
      "api-key": { type: "string" },
      dir: { type: "string" },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

/** What every subcommand works with: the flags, the provider's client and the output helpers. */
interface WebhooksSession {
  values: ReturnType<typeof parseWebhooksArgs>["values"];
  client: ReturnType<typeof providerClient>;
  /** False (with the usage printed) when a positional argument is missing. */
  needs(arg: string | undefined, what: string): arg is string;
  /** JSON under --json, else the lines. */
  print(value: unknown, text: () => string[]): void;
}

type WebhooksSubcommand = (session: WebhooksSession, first?: string, second?: string) => Promise<number>;

const subcommands: Record<string, WebhooksSubcommand> = {
  add: addWebhook,
  list: listWebhooks,
  remove: removeWebhook,
  deliveries: listDeliveries,
  retry: retryDelivery,
  "rotate-secret": rotateSecret,
};

/** Runs `tollgate webhooks …`; returns the exit code. */
export async function webhooksCommand(argv: string[], deps: WebhooksCommandDeps): Promise<number> {
  const { values, positionals } = parseWebhooksArgs(argv);
  const [command, first, second] = positionals;
  if (values.help === true || command === undefined) {
    deps.out.log(usage);
    return values.help === true ? 0 : 2;
  }
  const needs = (arg: string | undefined, what: string): arg is string => {
    if (arg !== undefined) return true;
    deps.out.error(`tollgate webhooks ${command}: missing ${what}\n\n${usage}`);
    return false;
  };
  const client = providerClient(values, deps);
  const print = (value: unknown, text: () => string[]) => {
    if (values.json) deps.out.log(JSON.stringify(value, null, 2));
    else for (const line of text()) deps.out.log(line);
  };
  const subcommand = Object.hasOwn(subcommands, command) ? subcommands[command] : undefined;
  if (subcommand === undefined) {
    deps.out.error(`tollgate webhooks: unknown command "${command}"\n\n${usage}`);
    return 2;
  }
  return subcommand({ values, client, needs, print }, first, second);
}

/** `tollgate webhooks add <url>` */
async function addWebhook(
  { values, client, needs, print }: WebhooksSession,
  first?: string,
): Promise<number> {
  if (!needs(first, "<url>")) return 2;
  const request: Record<string, unknown> = { url: first };
  if (values.events !== undefined) {
    request.events = values.events
      .split(",")
      .map((s) => s.trim())
      .filter((s) => s !== "") as CreateWebhookRequest["events"];
  }
  if (values.description !== undefined) request.description = values.description;
  const created = await client.request("POST", "/webhooks", CreateWebhookResponseSchema, {
    body: request,
  });
  print(created, () => [
    `endpoint ${created.id} → ${created.url}`,
    `events   ${created.events?.join(", ") ?? "all"}`,
    `secret   ${created.secret}`,
    "Keep the secret: it is shown only now. Check each delivery with verifyWebhook(secret, headers, rawBody).",
  ]);
  return 0;
}

/** `tollgate webhooks list` */
async function listWebhooks({ client, print }: WebhooksSession): Promise<number> {
  const { webhooks } = await client.request("GET", "/webhooks", ListWebhooksResponseSchema);
  print({ webhooks }, () =>
    webhooks.length === 0
      ? ["no webhook endpoints"]
      : table([
          ["id", "url", "events", "created"],
          ...webhooks.map((w) => [w.id, w.url, w.events?.join(",") ?? "all", w.createdAt]),
        ]),
  );
  return 0;
}

/** `tollgate webhooks remove <id>` */
async function removeWebhook({ client, needs, print }: WebhooksSession, first?: string): Promise<number> {
  if (!needs(first, "<id>")) return 2;
  const removed = await client.request(
    "DELETE",
    `/webhooks/${encodeURIComponent(first)}`,
    DeleteWebhookResponseSchema,
  );
  print(removed, () => [`removed ${removed.id}`]);
  return 0;
}

/** `tollgate webhooks deliveries <id>` */
async function listDeliveries(
  { values, client, needs, print }: WebhooksSession,
  first?: string,
): Promise<number> {
  if (!needs(first, "<id>")) return 2;
  const query = new URLSearchParams();
  if (values.status !== undefined) query.set("status", values.status);
  if (values.limit !== undefined) query.set("limit", values.limit);
  const path = `/webhooks/${encodeURIComponent(first)}/deliveries${query.size > 0 ? `?${query}` : ""}`;
  const { deliveries } = await client.request("GET", path, ListWebhookDeliveriesResponseSchema);
  print({ deliveries }, () =>
    deliveries.length === 0
      ? ["no deliveries"]
      : table([
          ["delivery", "event", "type", "status", "attempts", "next attempt", "last result"],
          ...deliveries.map(deliveryRow),
        ]),
  );
  return 0;
}

/** `tollgate webhooks retry <id> <deliveryId>` */
async function retryDelivery(
  { client, needs, print }: WebhooksSession,
  first?: string,
  second?: string,
): Promise<number> {
  if (!needs(first, "<id>") || !needs(second, "<deliveryId>")) return 2;
  const { delivery } = await client.request(
    "POST",
    `/webhooks/${encodeURIComponent(first)}/deliveries/${encodeURIComponent(second)}/retry`,
    RetryWebhookDeliveryResponseSchema,
  );
  print({ delivery }, () => [`delivery ${delivery.id} (${delivery.eventId}) is queued again`]);
  return 0;
}

/** `tollgate webhooks rotate-secret <id>` */
async function rotateSecret(
  { values, client, needs, print }: WebhooksSession,
  first?: string,
): Promise<number> {
  if (!needs(first, "<id>")) return 2;
  const body = values.grace === undefined ? {} : { graceSeconds: parseDuration(values.grace) };
  const rotated = await client.request(
    "POST",
    `/webhooks/${encodeURIComponent(first)}/rotate-secret`,
    RotateWebhookSecretResponseSchema,
    { body },
  );
  print(rotated, () => [
    `secret   ${rotated.secret}`,
    rotated.previousSecretExpiresAt === null
      ? "the old secret no longer signs deliveries"
      : `the old secret also signs deliveries until ${rotated.previousSecretExpiresAt}`,
  ]);
  return 0;
}

function deliveryRow(d: WebhookDelivery): string[] {
  const last = d.history[0];
  const result =
    last === undefined ? "" : last.error === null ? String(last.statusCode ?? "") : last.error.slice(0, 60);
  return [d.id, d.eventId, d.eventType, d.status, String(d.attempts), d.nextAttemptAt ?? "", result];
}

function table(rows: string[][]): string[] {
  const widths = rows[0]!.map((_, column) => Math.max(...rows.map((row) => row[column]?.length ?? 0)));
  return rows.map((row) =>
    row
      .map((cell, column) => cell.padEnd(widths[column]!))
      .join("  ")
      .trimEnd(),
  );
}

export async function run(argv: string[]): Promise<number> {
  return webhooksCommand(argv, { env: process.env, out: console, fetch });
}
