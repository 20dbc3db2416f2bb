/**
 * One wallet's signed subscription actions, one at a time. Each relayed action (subscribe with its
 * permit, an approval top-up, pause, cancel, a cap change) signs the wallet's current manager nonce, or
 * the token's permit nonce, read from the facilitator just before: two at once read the same nonce and
 * one reverts on chain. And a permit sets the manager's allowance to what the budget holds for the
 * wallet's subscriptions, read from the store: two subscribes at once each miss the other's hold, and
 * the later permit leaves the earlier subscription's renewal unapproved.
 *
 * In a process, every keeper (one per agent, or per tool) shares these turns, keyed by network and
 * address. Given the agent's store, a turn is also a row of `agent_wallet_turns` (migration 0170), so
 * processes sharing the store (PostgreSQL) take turns too: the row is taken with the database's clock
 * and lapses after `leaseMs` if its holder died; a process waits for it up to `waitMs`, then goes on
 * without it, as before (a collision reverts; nothing moves).
 */
import { randomUUID } from "node:crypto";
import type { Store } from "../../../store/store.ts";

const tails = new Map<string, Promise<void>>();
/** This process's name as a turn holder (a row it left behind is its own to delete). */
const PROCESS = randomUUID();

export type WalletTurnOptions = {
  /** The agent's store: processes sharing it take the wallet's turns one at a time. */
  store?: Store | undefined;
  /** How long a taken turn lasts if its holder never returns it (default 120 s: a relayed action's wait). */
  leaseMs?: number | undefined;
  /** How long to wait for another process's turn before going on without it (default 60 s). */
  waitMs?: number | undefined;
  /** The holder's name (default one per process); tests give two to play two processes. */
  holder?: string | undefined;
  sleep?: ((ms: number) => Promise<void>) | undefined;
};

/**
 * Runs `task` once every earlier task of the same wallet has settled, and settles with it. A task
 * must not wait for another turn of its own wallet (it would wait forever).
 * @example
 * const id = await walletTurn(`${payer.network}:${payer.address}`, () => payer.subscribe(request), { store });
 */
export function walletTurn<T>(
  wallet: string,
  task: () => Promise<T>,
  options: WalletTurnOptions = {},
): Promise<T> {
  const key = wallet.toLowerCase();
  const holder = options.holder ?? PROCESS;
  const tailKey = `${holder}|${key}`;
  const run = (tails.get(tailKey) ?? Promise.resolve()).then(() =>
    options.store === undefined ? task() : acrossProcesses(options.store, key, holder, task, options),
  );
  const tail = run.then(
    () => undefined,
    () => undefined,
  );
  tails.set(tailKey, tail);
  void tail.then(() => {
    if (tails.get(tailKey) === tail) tails.delete(tailKey);
  });
  return run;
}

async function acrossProcesses<T>(
  store: Store,
  wallet: string,
  holder: string,
  task: () => Promise<T>,
  options: WalletTurnOptions,
): Promise<T> {
  const leaseMs = options.leaseMs ?? 120_000;
  const sleep = options.sleep ?? ((ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)));
  const giveUpAt = Date.now() + (options.waitMs ?? 60_000);
  let taken = false;
  for (let pause = 50; ; pause = Math.min(pause * 2, 500)) {
    const rows = await store.query(
      `INSERT INTO agent_wallet_turns (wallet, holder, expires_at)
       VALUES ($1, $2, now() + make_interval(secs => $3))
       ON CONFLICT (wallet) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
        WHERE agent_wallet_turns.expires_at < now() OR agent_wallet_turns.holder = excluded.holder
       RETURNING holder`,
      [wallet, holder, leaseMs / 1000],
    );
    if (rows.length > 0) {
      taken = true;
      break;
    }
    if (Date.now() >= giveUpAt) break;
    await sleep(pause + Math.floor(Math.random() * pause));
  }
  try {
    return await task();
  } finally {
    if (taken) {
      await store
        .query("DELETE FROM agent_wallet_turns WHERE wallet = $1 AND holder = $2", [wallet, holder])
        .catch(() => undefined);
    }
  }
}
