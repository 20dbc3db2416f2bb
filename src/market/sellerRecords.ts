/**
 * The market's seller rows (`market_sellers`, `market_capabilities`): registrations saved under the
 * seller's row lock, refresh claims, removals' tombstones and the seller read back.
 *
 * Invariants (see marketRegistry.ts): a seller's `issued_at` only grows, and a removal leaves a
 * tombstone carrying the removal's `issuedAt`.
 */
import type { Address, Hex } from "viem";
import { z } from "zod";
import { AddressSchema, SignatureSchema } from "../protocol/address.ts";
import type { Clock } from "../protocol/clock.ts";
import { TollgateError } from "../protocol/errors.ts";
import { cheapestPerCallPrice, type Manifest } from "../protocol/manifest.ts";
import { SafeIntColumnSchema, TimestampColumnSchema } from "../store/columnSchemas.ts";
import { queryOneParsed } from "../store/queryParsed.ts";
import type { Queryable, SqlParam, Store } from "../store/store.ts";
import type { RegistrationResult, RemovalResult, SellerRecord, SellerRemoval } from "./marketApi.ts";
import { type LivenessColumns, livenessStatusOf, type SellerLivenessStatus } from "./sellerLiveness.ts";

const SellerRowSchema = z.object({
  address: z.string(),
  issued_at: SafeIntColumnSchema,
  manifest: z.string().nullable(),
  signature: z.string().nullable(),
  base_url: z.string().nullable(),
  registered_at: TimestampColumnSchema,
  updated_at: TimestampColumnSchema,
  refreshed_at: TimestampColumnSchema.nullable(),
  removed_at: TimestampColumnSchema.nullable(),
  check_failures: SafeIntColumnSchema,
  checked_at: TimestampColumnSchema.nullable(),
  unreachable_since: TimestampColumnSchema.nullable(),
  last_check_error: z.string().nullable(),
});
type SellerRow = z.infer<typeof SellerRowSchema>;

export const seconds = (date: Date) => Math.floor(date.getTime() / 1000);

async function selectSeller(db: Queryable, address: string, lock: boolean): Promise<SellerRow | undefined> {
  return queryOneParsed(
    db,
    SellerRowSchema,
    `SELECT address, issued_at, manifest, signature, base_url, registered_at, updated_at, refreshed_at,
            removed_at, check_failures, checked_at, unreachable_since, last_check_error
       FROM market_sellers WHERE address = $1${lock ? " FOR UPDATE" : ""}`,
    [address],
  );
}

/** Stores a checked registration unless the stored one is as new or newer (then says so). */
export async function saveRegistration(
  store: Store,
  clock: Clock,
  manifest: Manifest,
  text: string,
  signature: Hex,
): Promise<RegistrationResult> {
  const address = manifest.seller.payTo.toLowerCase();
  const now = new Date(clock.now());
  const sellerParams: SqlParam[] = [
    address,
    manifest.issuedAt,
    text,
    signature,
    manifest.name,
    manifest.description,
    manifest.baseUrl,
    manifest.facilitator,
    manifest.network,
    manifest.token.toLowerCase(),
    now,
  ];
  return store.transaction(async (tx) => {
    let existing = await selectSeller(tx, address, true);
    if (existing === undefined) {
      const inserted = await tx.query(
        `INSERT INTO market_sellers (address, issued_at, manifest, signature, name, description, base_url,
                                     facilitator, network, token, registered_at, updated_at, next_check_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $11, $11)
         ON CONFLICT (address) DO NOTHING RETURNING address`,
        sellerParams,
      );
      if (inserted.length === 1) {
        await writeCapabilities(tx, manifest);
        return { status: "created" as const, address: manifest.seller.payTo, issuedAt: manifest.issuedAt };
      }
      // Another registration of this seller committed first: decide against it like any other.
      existing = await selectSeller(tx, address, true);
      if (existing === undefined) throw new TollgateError("Internal", "seller row vanished under its lock");
    }
    if (manifest.issuedAt <= existing.issued_at) {
      const same = existing.issued_at === manifest.issuedAt && existing.manifest === text;
      return {
        status: same ? ("unchanged" as const) : ("superseded" as const),
        address: manifest.seller.payTo,
        issuedAt: existing.issued_at,
      };
    }
    await replaceRegistration(tx, manifest, sellerParams);
    return {
      status: existing.removed_at === null ? ("updated" as const) : ("created" as const),
      address: manifest.seller.payTo,
      issuedAt: manifest.issuedAt,
    };
  });
}

/** Overwrites a stored (or removed) seller with a newer manifest, `sellerParams` as saveRegistration binds them. */
async function replaceRegistration(
  tx: Queryable,
  manifest: Manifest,
  sellerParams: SqlParam[],
): Promise<void> {
  await tx.query(
    `UPDATE market_sellers
        SET issued_at = $2, manifest = $3, signature = $4, name = $5, description = $6, base_url = $7,
            facilitator = $8, network = $9, token = $10, updated_at = $11, removed_at = NULL,
            registered_at = CASE WHEN removed_at IS NULL THEN registered_at ELSE $11 END,
            -- A newly signed manifest starts liveness afresh, checked on the next sweep.
            next_check_at = $11, check_failures = 0, unreachable_since = NULL, last_check_error = NULL
      WHERE address = $1`,
    sellerParams,
  );
  await writeCapabilities(tx, manifest);
}

async function writeCapabilities(tx: Queryable, manifest: Manifest): Promise<void> {
  const address = manifest.seller.payTo.toLowerCase();
  await tx.query("DELETE FROM market_capabilities WHERE seller = $1", [address]);
  const sellerText = [manifest.name, manifest.seller.name ?? "", manifest.description].join("\n");
  const params: SqlParam[] = [address, sellerText];
  const rows = manifest.capabilities.map((capability, position) => {
    const base = params.length;
    params.push(
      position,
      capability.name,
      JSON.stringify(capability),
      cheapestPerCallPrice(capability),
      [...new Set(capability.pricing.map((entry) => entry.type))],
      searchableName(capability.name),
      capability.description,
    );
    const p = (i: number) => `$${base + i}`;
    return `($1, ${p(1)}, ${p(2)}, ${p(3)}, ${p(4)}, ${p(5)}::text[],
      setweight(to_tsvector('english', ${p(6)}), 'A') ||
      setweight(to_tsvector('english', ${p(7)}), 'B') ||
      setweight(to_tsvector('english', $2), 'C'))`;
  });
  await tx.query(
    `INSERT INTO market_capabilities (seller, position, name, capability, min_price, schemes, search_vector)
     VALUES ${rows.join(",\n")}`,
    params,
  );
}

/** `get_weather` and `getWeather` → "get weather": tool names read as words by the text search. */
function searchableName(name: string): string {
  return `${name} ${name.replace(/([a-z0-9])([A-Z])/g, "$1 $2").replace(/[_-]+/g, " ")}`;
}

/**
 * Claims a refresh of a registered seller and returns its `baseUrl`, or undefined when none is
 * registered; refused with RateLimited within `refreshInterval` seconds of the last claim.
 */
export async function claimRefresh(
  store: Store,
  key: string,
  now: Date,
  refreshInterval: number,
): Promise<string | undefined> {
  return store.transaction(async (tx) => {
    const row = await selectSeller(tx, key, true);
    if (row === undefined || row.removed_at !== null || row.base_url === null) return undefined;
    const last = row.refreshed_at === null ? undefined : seconds(row.refreshed_at);
    const wait = last === undefined ? 0 : last + refreshInterval - seconds(now);
    if (wait > 0) {
      throw new TollgateError("RateLimited", `this seller was refreshed less than ${refreshInterval} s ago`, {
        retryAfter: wait,
        details: { retryAfter: wait },
      });
    }
    await tx.query("UPDATE market_sellers SET refreshed_at = $2 WHERE address = $1", [key, now]);
    return row.base_url;
  });
}

/** Records a passed liveness check of the seller still registered at `baseUrl`. */
export async function recordAnswered(store: Store, key: string, now: Date, baseUrl: string): Promise<void> {
  await store.query(
    `UPDATE market_sellers
        SET checked_at = $2, check_failures = 0, unreachable_since = NULL, last_check_error = NULL
      WHERE address = $1 AND base_url = $3 AND removed_at IS NULL`,
    [key, now, baseUrl],
  );
}

/** Applies a checked removal: the seller's row becomes a tombstone carrying the removal's `issuedAt`. */
export async function removeSeller(
  store: Store,
  address: Address,
  removal: SellerRemoval,
  now: Date,
): Promise<RemovalResult> {
  const key = address.toLowerCase();
  return store.transaction(async (tx) => {
    const row = await selectSeller(tx, key, true);
    if (row === undefined || row.removed_at !== null) {
      throw new TollgateError("NotFound", "no seller registered at that address");
    }
    // Ties go to the removal: a seller who registers and removes within one second is removed.
    if (removal.issuedAt < row.issued_at) {
      return { status: "superseded" as const, address, issuedAt: row.issued_at };
    }
    await tx.query("DELETE FROM market_capabilities WHERE seller = $1", [key]);
    await tx.query(
      `UPDATE market_sellers
          SET issued_at = $2, manifest = NULL, signature = NULL, name = NULL, description = NULL,
              base_url = NULL, facilitator = NULL, network = NULL, token = NULL, removed_at = $3,
              updated_at = $3
        WHERE address = $1`,
      [key, removal.issuedAt, now],
    );
    return { status: "removed" as const, address, issuedAt: removal.issuedAt };
  });
}

/** A registered seller's signed manifest and liveness, or undefined when none is registered. */
export async function readSeller(store: Store, address: Address): Promise<SellerRecord | undefined> {
  const row = await selectSeller(store, address.toLowerCase(), false);
  if (row === undefined || row.manifest === null || row.signature === null) return undefined;
  return {
    address: AddressSchema.parse(row.address),
    manifest: JSON.parse(row.manifest) as unknown,
    signature: SignatureSchema.parse(row.signature),
    registeredAt: seconds(row.registered_at),
    updatedAt: seconds(row.updated_at),
    liveness: livenessOf(row),
  };
}

/** The wire form of a seller's liveness (`GET /sellers`, `GET /sellers/:address`). */
export function livenessOf(row: LivenessColumns): Omit<SellerLivenessStatus, "address"> {
  const { address: _address, ...status } = livenessStatusOf(row);
  return status;
}
