/**
 * The renewal keeper's lease in `worker_leases`, one per chain and manager: one facilitator instance
 * at a time runs renewals. Time is the database's (`now()`), so instances with drifting clocks agree.
 * Its holder renews it while a run lasts; the lease of an instance that died expires `leaseMs` after
 * its last renewal and is taken then.
 */
import type { Address } from "viem";
import type { Store } from "../../../store/store.ts";

const LEASE_NAME = "renewal-keeper";

export type RenewalLease = {
  /** Takes the lease if it is free, expired or this holder's already. */
  take(): Promise<boolean>;
  /** Extends this holder's lease by `leaseMs` from now; false when it is no longer this holder's. */
  renew(): Promise<boolean>;
  release(): Promise<void>;
  /**
   * Renews the lease every third of `leaseMs` until `stop()`; `lost()` turns true (and `onLost` is
   * called once) when a renewal finds it taken by another holder.
   */
  keepAlive(onLost: () => void): { lost(): boolean; stop(): void };
};

export function createRenewalLease(
  store: Store,
  scope: { chainId: number; manager: Address; holder: string; leaseMs: number },
): RenewalLease {
  const { holder, leaseMs } = scope;
  const name = `${LEASE_NAME}:${scope.chainId}:${scope.manager.toLowerCase()}`;

  const renew = async () => {
    const rows = await store.query(
      `UPDATE worker_leases SET lease_until = now() + $3 * interval '1 millisecond'
       WHERE name = $1 AND holder = $2 RETURNING holder`,
      [name, holder, leaseMs],
    );
    return rows.length === 1;
  };

  return {
    async take() {
      const rows = await store.query(
        `INSERT INTO worker_leases (name, holder, lease_until) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
         ON CONFLICT (name) DO UPDATE SET holder = EXCLUDED.holder, lease_until = EXCLUDED.lease_until
         WHERE worker_leases.lease_until < now() OR worker_leases.holder = EXCLUDED.holder
         RETURNING holder`,
        [name, holder, leaseMs],
      );
      return rows.length === 1;
    },

    renew,

    async release() {
      await store.query("DELETE FROM worker_leases WHERE name = $1 AND holder = $2", [name, holder]);
    },

    keepAlive(onLost) {
      let lost = false;
      const heartbeat = setInterval(
        () => {
          renew().then(
            (held) => {
              if (!held && !lost) {
                lost = true;
                onLost();
              }
            },
            () => undefined,
          );
        },
        Math.max(1, Math.floor(leaseMs / 3)),
      );
      heartbeat.unref();
      return { lost: () => lost, stop: () => clearInterval(heartbeat) };
    },
  };
}
