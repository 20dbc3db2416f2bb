/**
 * The NOTIFY channel of work notification `name` for a store in `schema`, as the triggers of migration
 * 0120 name it: `tollgate_<schema>_<name>`, so stores in different schemas of one database do not hear
 * each other.
 */
export function notificationChannel(schema: string | undefined, name: string): string {
  if (!/^[a-z][a-z0-9_]{0,30}$/.test(name)) throw new TypeError(`bad notification name "${name}"`);
  return `tollgate_${schema ?? "public"}_${name}`;
}
