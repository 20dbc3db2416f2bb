import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { isTollgateError } from "../../protocol/errors.ts";
import { createTestStore } from "../../store/createTestStore.ts";
import { loadMigrations, migrate } from "../../store/migrate.ts";
import type { Store } from "../../store/store.ts";
import { createWebhookRepository } from "./createWebhookRepository.ts";
import {
  createWebhookSecretBox,
  generateWebhookSecretKey,
  parseWebhookSecretKey,
} from "./webhookSecretBox.ts";

const keyA = new Uint8Array(32).fill(1);
const keyB = new Uint8Array(32).fill(2);
const secret = "whsec_AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA";

describe("createWebhookSecretBox", () => {
  it("seals a secret so that only the same endpoint's row opens it", () => {
    const box = createWebhookSecretBox([keyA]);
    const sealed = box.seal(secret, "we_aaaaaaaaaaaaaaaa");
    expect(sealed).toMatch(/^tgs1\.[0-9a-f]{8}\.[A-Za-z0-9_-]+$/);
    expect(sealed).not.toContain(secret.slice(6));
    expect(box.seal(secret, "we_aaaaaaaaaaaaaaaa")).not.toBe(sealed);
    expect(box.open(sealed, "we_aaaaaaaaaaaaaaaa")).toBe(secret);
    // Copied onto another endpoint's row, it does not open.
    expect(() => box.open(sealed, "we_bbbbbbbbbbbbbbbb")).toThrow(/does not open/);
  });

  it("opens with any configured key, seals with the first, and names a missing key", () => {
    const old = createWebhookSecretBox([keyA]);
    const sealedByA = old.seal(secret, "we_x");
    const rotated = createWebhookSecretBox([keyB, keyA]);
    expect(rotated.open(sealedByA, "we_x")).toBe(secret);
    expect(rotated.needsReseal(sealedByA)).toBe(true);
    expect(rotated.needsReseal(rotated.seal(secret, "we_x"))).toBe(false);
    let error: unknown;
    try {
      createWebhookSecretBox([keyB]).open(sealedByA, "we_x");
    } catch (e) {
      error = e;
    }
    expect(isTollgateError(error) && error.details).toMatchObject({
      reason: "unknown_secret_key",
      kid: old.kid,
    });
  });

  it("reads keys as base64url or 0x-hex of 32 bytes and refuses anything else", () => {
    const text = generateWebhookSecretKey(() => keyA);
    expect(parseWebhookSecretKey(text)).toEqual(keyA);
    expect(parseWebhookSecretKey(`0x${"01".repeat(32)}`)).toEqual(keyA);
    for (const bad of ["", "short", `0x${"01".repeat(31)}`, "whsec_x"]) {
      expect(() => parseWebhookSecretKey(bad)).toThrow(/32 bytes/);
    }
  });
});

describe("migration 0064: webhook secrets stored before sealing", () => {
  let store: Store;

  beforeAll(async () => {
    store = await createTestStore({ databaseUrl: process.env.DATABASE_URL, migrate: false });
  });

  afterAll(async () => {
    await store?.close();
  });

  it("seals the plaintext rows of an older version at start and refuses plaintext writes after", async () => {
    const all = await loadMigrations();
    await migrate(store, { migrations: all.filter((m) => m.version < 64) });
    await store.query(
      `INSERT INTO webhook_endpoints (id, provider, url, secret, previous_secret, previous_secret_expires_at)
       VALUES ('we_legacylegacylegacy', '0x00000000000000000000000000000000000000aa', 'https://a.example/h', $1, $2, now() + interval '1 hour')`,
      [secret, "whsec_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB"],
    );
    await migrate(store, { migrations: all });

    const box = createWebhookSecretBox([keyA]);
    const repository = createWebhookRepository({
      store,
      randomBytes: (n) => new Uint8Array(n),
      secrets: box,
    });
    expect(await repository.resealSecrets()).toBe(1);
    const [row] = await store.query<{ secret: string; previous_secret: string }>(
      "SELECT secret, previous_secret FROM webhook_endpoints WHERE id = 'we_legacylegacylegacy'",
    );
    expect(row!.secret).toMatch(/^tgs1\./);
    expect(box.open(row!.secret, "we_legacylegacylegacy")).toBe(secret);
    expect(box.open(row!.previous_secret, "we_legacylegacylegacy")).toBe(
      "whsec_BBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB",
    );
    // Nothing left to do on the next start; the constraint now holds for every row.
    expect(await repository.resealSecrets()).toBe(0);
    const [constraint] = await store.query<{ convalidated: boolean }>(
      `SELECT convalidated FROM pg_constraint
       WHERE conname = 'webhook_endpoints_secret_sealed' AND conrelid = 'webhook_endpoints'::regclass`,
    );
    expect(constraint?.convalidated).toBe(true);
    await expect(
      store.query("UPDATE webhook_endpoints SET secret = $1 WHERE id = 'we_legacylegacylegacy'", [secret]),
    ).rejects.toThrow(/webhook_endpoints_secret_sealed/);
  });

  it("seals again with the new key after a key rotation", async () => {
    const rotated = createWebhookSecretBox([keyB, keyA]);
    const repository = createWebhookRepository({
      store,
      randomBytes: (n) => new Uint8Array(n),
      secrets: rotated,
    });
    expect(await repository.resealSecrets()).toBe(1);
    const [row] = await store.query<{ secret: string }>(
      "SELECT secret FROM webhook_endpoints WHERE id = 'we_legacylegacylegacy'",
    );
    expect(createWebhookSecretBox([keyB]).open(row!.secret, "we_legacylegacylegacy")).toBe(secret);
  });
});
