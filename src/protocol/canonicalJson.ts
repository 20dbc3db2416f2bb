/**
 * Canonical JSON: the one text of a JSON value that signers and verifiers agree on (payment proofs,
 * memos, sub-auth claims). Object keys are sorted by UTF-16 code unit at every depth, there is no
 * whitespace, and strings and numbers are written as `JSON.stringify` writes them.
 */
import { TollgateError } from "./errors.ts";

/** Nesting deeper than this is refused: nothing Tollgate signs is close, and it bounds recursion. */
const MAX_DEPTH = 64;

/**
 * The canonical JSON text of a value.
 *
 * Refuses (with `InvalidEncoding`) what has no single JSON text: non-finite numbers, bigint,
 * functions, symbols, `undefined` outside an object property, cycles, and objects other than plain
 * objects and arrays (a `Date` or `Map` would depend on `toJSON` or serialize to `{}`). Object
 * properties whose value is `undefined` are dropped, as `JSON.stringify` drops them.
 *
 * @example
 * canonicalJson({ b: 1, a: [true, null] }) // '{"a":[true,null],"b":1}'
 */
export function canonicalJson(value: unknown): string {
  return write(value, 0, []);
}

function refuse(reason: string): never {
  throw new TollgateError("InvalidEncoding", `value has no canonical JSON form: ${reason}`);
}

function write(value: unknown, depth: number, ancestors: object[]): string {
  switch (typeof value) {
    case "string":
      return JSON.stringify(value);
    case "boolean":
      return value ? "true" : "false";
    case "number":
      // JSON.stringify writes -0 as 0 and uses the shortest round-tripping form for the rest.
      return Number.isFinite(value) ? JSON.stringify(value) : refuse("non-finite number");
    case "object":
      break;
    default:
      return refuse(typeof value);
  }
  if (value === null) return "null";
  if (depth >= MAX_DEPTH) return refuse(`nested deeper than ${MAX_DEPTH}`);
  if (ancestors.includes(value)) return refuse("cycle");
  ancestors.push(value);
  let text: string;
  if (Array.isArray(value)) {
    text = `[${value.map((item) => (item === undefined ? refuse("undefined array item") : write(item, depth + 1, ancestors))).join(",")}]`;
  } else {
    const prototype = Object.getPrototypeOf(value);
    if (prototype !== Object.prototype && prototype !== null) return refuse("not a plain object");
    const record = value as Record<string, unknown>;
    // Default sort compares UTF-16 code units, which is the order this format promises.
    const keys = Object.keys(record).sort();
    const members: string[] = [];
    for (const key of keys) {
      const member = record[key];
      if (member === undefined) continue;
      members.push(`${JSON.stringify(key)}:${write(member, depth + 1, ancestors)}`);
    }
    text = `{${members.join(",")}}`;
  }
  ancestors.pop();
  return text;
}
