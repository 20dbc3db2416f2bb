/** `tollgate/store`: the store (PGlite or PostgreSQL) and the replay guards (docs/operations-storage.md). */

export { createMemoryReplayGuard } from "./createMemoryReplayGuard.ts";
export { createPostgresReplayGuard } from "./createPostgresReplayGuard.ts";
export { createRedisReplayGuard } from "./createRedisReplayGuard.ts";
export { createStore, defaultDataDir } from "./createStore.ts";
export type { MaintenancePass, PgliteMaintenanceOptions } from "./pgliteMaintenance.ts";
export type { ReplayGuard } from "./replayGuard.ts";
export type { Queryable, Store, StoreOptions } from "./store.ts";
