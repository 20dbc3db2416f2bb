/**
 * A voucher store shared by several gate instances of one seller through PostgreSQL (or PGlite):
 * table `gate_channel_tallies` (migration 0095). A charge is one conditional `UPDATE … RETURNING`, so
 * of concurrent charges across instances each sees the tally the last one committed; it resolves after
 * the commit, so a served request's voucher is durable before the answer leaves. A sealed channel
 * (`sealed`, migration 0165: a cooperative close) fails that `UPDATE`'s condition, so no instance
 * charges it after the seal committed. The store's tag is one row of `gate_channel_store` (migration
 * 0191), made by the first instance that asks.
 */
import type { Hex } from "viem";
import { z } from "zod";
import { BigintColumnSchema } from "../../../store/columnSchemas.ts";
import type { Queryable } from "../../../store/store.ts";
import {
  type ChannelTally,
  type ChargeInput,
  type ChargeOutcome,
  newChannelTag,
  type VoucherStore,
} from "./voucherStore.ts";

const TallyRowSchema = z.object({ highest: BigintColumnSchema, spent: BigintColumnSchema });
const SealedRowSchema = z.object({ sealed: z.boolean() });
const TagRowSchema = z.object({ tag: z.string().regex(/^0x[0-9a-f]{16}$/) });
const VoucherRowSchema = z.object({
  channel_id: z.string().regex(/^0x[0-9a-f]{64}$/),
  highest: BigintColumnSchema,
  signature: z.instanceof(Uint8Array),
});

function tallyOf(row: unknown): ChannelTally {
  return TallyRowSchema.parse(row);
}

/**
 * One charge: the channel's row made once per process (`known`), then the one conditional `UPDATE`;
 * when it matched no row, the row as it is (refused, or sealed).
 */
async function chargeRow(db: Queryable, known: Set<string>, input: ChargeInput): Promise<ChargeOutcome> {
  if (!known.has(input.channelId)) {
    await db.query(
      `INSERT INTO gate_channel_tallies (channel_id, highest, spent, forwarded, floor, signature)
           VALUES ($1, $2, $2, $2, $2, '\\x'::bytea) ON CONFLICT (channel_id) DO NOTHING`,
      [input.channelId, input.floor],
    );
    known.add(input.channelId);
  }
  // SET expressions read the row as it was: highest and signature move together.
  const rows = await db.query(
    `UPDATE gate_channel_tallies
            SET highest = GREATEST(highest, $2::numeric),
                signature = CASE WHEN $2::numeric > highest THEN $3::bytea ELSE signature END,
                spent = spent + $4::numeric,
                updated_at = now()
          WHERE channel_id = $1 AND NOT sealed AND spent + $4::numeric <= GREATEST(highest, $2::numeric)
          RETURNING highest, spent`,
    [input.channelId, input.cumulativeAmount, input.signature, input.price],
  );
  if (rows.length === 1) return { charged: true, tally: tallyOf(rows[0]) };
  const current = await db.query(
    "SELECT highest, spent, sealed FROM gate_channel_tallies WHERE channel_id = $1",
    [input.channelId],
  );
  const sealed = SealedRowSchema.parse(current[0]).sealed;
  return { charged: false, tally: tallyOf(current[0]), ...(sealed ? { sealed } : {}) };
}

/**
 * @example
 * const store = createPostgresVoucherStore(await createStore({ databaseUrl: env.DATABASE_URL }));
 */
export function createPostgresVoucherStore(db: Queryable): VoucherStore {
  // Channels this process has made sure have a row: the insert runs once per channel per process.
  const known = new Set<string>();
  let tag: Hex | undefined;
  return {
    charge: (input) => chargeRow(db, known, input),
    async refund(channelId, price) {
      await db.query(
        `UPDATE gate_channel_tallies SET spent = GREATEST(floor, spent - $2::numeric), updated_at = now()
          WHERE channel_id = $1`,
        [channelId, price],
      );
    },
    async tally(channelId) {
      const rows = await db.query("SELECT highest, spent FROM gate_channel_tallies WHERE channel_id = $1", [
        channelId,
      ]);
      return rows.length === 0 ? undefined : tallyOf(rows[0]);
    },
    async unforwarded(limit) {
      const rows = await db.query(
        `SELECT channel_id, highest, signature FROM gate_channel_tallies
          WHERE highest > forwarded ORDER BY updated_at LIMIT $1`,
        [limit],
      );
      return rows.map((row) => {
        const r = VoucherRowSchema.parse(row);
        return {
          channelId: r.channel_id as Hex,
          cumulativeAmount: r.highest,
          signature: new Uint8Array(r.signature),
        };
      });
    },
    async markForwarded(channelId, cumulativeAmount) {
      await db.query(
        `UPDATE gate_channel_tallies SET forwarded = $2::numeric
          WHERE channel_id = $1 AND forwarded < $2::numeric AND $2::numeric <= highest`,
        [channelId, cumulativeAmount],
      );
    },
    async seal(channelId, floor) {
      await db.query(
        `INSERT INTO gate_channel_tallies (channel_id, highest, spent, forwarded, floor, signature)
         VALUES ($1, $2, $2, $2, $2, '\\x'::bytea) ON CONFLICT (channel_id) DO NOTHING`,
        [channelId, floor],
      );
      known.add(channelId);
      // Row-locked like a charge: a charge committed before it is in the tally it returns.
      const rows = await db.query(
        `UPDATE gate_channel_tallies SET sealed = true, updated_at = now()
          WHERE channel_id = $1 RETURNING highest, spent`,
        [channelId],
      );
      return tallyOf(rows[0]);
    },
    async tag() {
      if (tag !== undefined) return tag;
      // Of concurrent first instances one insert wins; the others wait for its commit and read its tag.
      await db.query("INSERT INTO gate_channel_store (id, tag) VALUES (1, $1) ON CONFLICT (id) DO NOTHING", [
        newChannelTag(),
      ]);
      const rows = await db.query("SELECT tag FROM gate_channel_store WHERE id = 1");
      tag = TagRowSchema.parse(rows[0]).tag as Hex;
      return tag;
    },
    async close() {},
  };
}
