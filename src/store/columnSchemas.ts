/**
 * zod schemas for column values as the store returns them (see the value mapping in store.ts), to
 * compose into row schemas: `z.object({ id: SafeIntColumnSchema, amount: BigintColumnSchema, … })`.
 */
import { z } from "zod";

/** `numeric` / `int8` column (a decimal string) → `bigint`, exactly. For amounts up to uint256. */
export const BigintColumnSchema = z
  .union([z.string().regex(/^-?\d+$/), z.bigint(), z.number().int()])
  .transform((value) => BigInt(value));

/** `int8` column holding an id or a count (a decimal string) → `number`; refuses values past 2^53. */
export const SafeIntColumnSchema = z
  .union([z.string().regex(/^-?\d+$/), z.number().int()])
  .transform((value) => Number(value))
  .pipe(z.number().int().min(Number.MIN_SAFE_INTEGER).max(Number.MAX_SAFE_INTEGER));

/** `timestamptz` column → `Date`. */
export const TimestampColumnSchema = z.union([z.date(), z.string()]).pipe(z.coerce.date());
