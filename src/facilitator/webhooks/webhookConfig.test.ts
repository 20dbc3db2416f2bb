import { lstatSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { loadWebhookConfig, WEBHOOK_KEY_FILE, WebhookEnvSchema } from "./webhookConfig.ts";

let root: string;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), "tollgate-webhook-config-"));
});
afterAll(async () => {
  await rm(root, { recursive: true, force: true });
});

describe("loadWebhookConfig", () => {
  it("generates the sealing key once into a 0600 file in a 0700 directory, and reads it back after", () => {
    const dir = join(root, "a", ".tollgate");
    const first = loadWebhookConfig(WebhookEnvSchema.parse({}), dir);
    expect(first).toMatchObject({ allowTargets: [] });
    expect(first.secretKeys).toHaveLength(1);
    expect(lstatSync(dir).mode & 0o777).toBe(0o700);
    expect(lstatSync(join(dir, WEBHOOK_KEY_FILE)).mode & 0o777).toBe(0o600);
    const text = readFileSync(join(dir, WEBHOOK_KEY_FILE), "utf8");
    expect(loadWebhookConfig(WebhookEnvSchema.parse({}), dir).secretKeys).toEqual(first.secretKeys);
    expect(readFileSync(join(dir, WEBHOOK_KEY_FILE), "utf8")).toBe(text);
  });

  it("takes the keys and the allowed targets from the environment, the first key sealing", () => {
    const env = WebhookEnvSchema.parse({
      TOLLGATE_WEBHOOK_KEYS: `0x${"02".repeat(32)}, 0x${"01".repeat(32)}`,
      TOLLGATE_WEBHOOK_ALLOW_TARGETS: "127.0.0.0/8, ::1",
    });
    const config = loadWebhookConfig(env, join(root, "unused"));
    expect(config.secretKeys).toEqual([new Uint8Array(32).fill(2), new Uint8Array(32).fill(1)]);
    expect(config.allowTargets).toEqual(["127.0.0.0/8", "::1"]);
  });

  it("refuses allowed targets that are not addresses or CIDRs", () => {
    expect(WebhookEnvSchema.safeParse({ TOLLGATE_WEBHOOK_ALLOW_TARGETS: "localhost" }).success).toBe(false);
    expect(WebhookEnvSchema.safeParse({ TOLLGATE_WEBHOOK_ALLOW_TARGETS: "10.0.0.0/40" }).success).toBe(false);
  });
});
