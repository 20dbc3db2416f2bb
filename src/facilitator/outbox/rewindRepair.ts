/**
 * Repairing a chain whose view went backwards: a node restarted from an older snapshot or state file, a
 * deep reorg, or a node that dropped its mempool. Transactions the outbox recorded — broadcast, or even
 * mined and delivered as `confirmed` — are then unknown to the node, the account's nonce on chain is
 * below nonces the outbox has signed, and every later transaction waits behind the gap for ever.
 *
 * Invariants:
 * 1. Only recorded bytes are broadcast, never a new signature for a nonce that has bytes of its own: a
 *    nonce held by a final row (`confirmed` or `reverted`) gets that row's bytes again, so an outcome
 *    already delivered stays true (the same call at the same nonce), and a nonce held by an open row
 *    gets its latest bytes. A payment is never made twice: one nonce, one of the row's transactions.
 * 2. A nonce no row holds any more (only `dropped` rows, or none) gets a zero-value transfer to self
 *    (kind `nonce-filler`), recorded before it is broadcast, as when the node refuses a row for good.
 * 3. The repair reads and records under the key's `tx_senders` lock (signQueuedRows.ts takes it too),
 *    so two instances repairing at once record one filler per nonce and new rows sign above the gap.
 * 4. It costs two `eth_getTransactionCount` calls when it finds nothing: the outbox runs it only when a
 *    row waits for its receipt for long, or the chain comes back after being unreachable.
 */
import type { Logger } from "pino";
import type { Address, Hex, PublicClient } from "viem";
import { transactionHashOf } from "../../chain/signers/eip1559Encoding.ts";
import type { Store } from "../../store/store.ts";
import { broadcastRaw } from "./broadcastRaw.ts";
import type { GasKey } from "./gasKey.ts";
import {
  findOutboxRow,
  insertSignedRow,
  lockNextNonce,
  type OutboxRow,
  rowsInNonceRange,
} from "./outboxRecords.ts";
import { FILLER_KIND } from "./rowDriver.ts";

export type RewindClient = Pick<PublicClient, "getTransactionCount" | "sendRawTransaction">;

/** What a repair did: `undefined` when the node knew every transaction the outbox recorded. */
export type RewindRepair = {
  /** The account's mined nonce count the node reported. */
  chainNonce: number;
  /** The store's next nonce: every nonce below it was signed by the outbox. */
  storeNonce: number;
  /** Recorded transactions broadcast again (final rows' and open rows'). */
  rebroadcast: number;
  /** Filler rows recorded for nonces no row holds any more; the caller drives them. */
  fillers: OutboxRow[];
};

/** At most this many nonces are repaired per call; a longer gap is repaired over several calls. */
const MAX_NONCES = 512;

/**
 * Looks for a gap between the chain's view of the gas account and the outbox's records, and refills it
 * from the recorded bytes. Resolves `undefined` when the node has (mined or pending) every nonce the
 * store handed out.
 */
export async function repairRewind(deps: {
  store: Store;
  client: RewindClient;
  key: GasKey;
  scope: { chainId: number; sender: Address };
  logger: Logger;
}): Promise<RewindRepair | undefined> {
  const { store, client, key, scope } = deps;
  const [mined, pending] = await Promise.all([
    client.getTransactionCount({ address: key.address, blockTag: "latest" }),
    client.getTransactionCount({ address: key.address, blockTag: "pending" }),
  ]);
  const known = await store.query<{ next_nonce: string; lowest_open: string | null }>(
    `SELECT next_nonce, (SELECT min(nonce) FROM tx_outbox WHERE status IN ('signed', 'broadcast')
       AND chain_id = $1 AND sender = $2) AS lowest_open
     FROM tx_senders WHERE chain_id = $1 AND sender = $2`,
    [scope.chainId, scope.sender.toLowerCase()],
  );
  if (known.length === 0) return undefined;
  const storeNext = Number(known[0]!.next_nonce);
  const lowestOpen = known[0]!.lowest_open === null ? storeNext : Number(known[0]!.lowest_open);
  // Nothing lost when the chain mined every nonce below the open rows and the node's pending count
  // reaches every nonce handed out (a slow row then waits for a block or a fee, which rowDriver.ts
  // bumps). Both, since a node may count transactions it holds behind a gap as pending.
  if (mined >= lowestOpen && pending >= storeNext) return undefined;
  const fees = await key.fees();
  const plan = await store.transaction(async (tx) => {
    const storeNonce = await lockNextNonce(tx, scope, mined);
    const until = Math.min(storeNonce, mined + MAX_NONCES);
    const rows = await rowsInNonceRange(tx, scope, mined, until);
    const sends: { nonce: number; raw: Hex; id: number; status: OutboxRow["status"] }[] = [];
    const fillerIds: number[] = [];
    for (let nonce = mined; nonce < until; nonce++) {
      const holders = rows.filter((r) => r.nonce === nonce && r.status !== "dropped" && r.raw_tx !== null);
      if (holders.length > 0) {
        for (const row of holders) sends.push({ nonce, raw: row.raw_tx!, id: row.id, status: row.status });
        continue;
      }
      const raw = await key.sign({ to: key.address, data: "0x", gas: 21_000n, nonce }, fees);
      const id = await insertSignedRow(tx, scope, {
        kind: FILLER_KIND,
        owner: `rewind:${nonce}`,
        to: key.address,
        data: "0x",
        gas: 21_000n,
        nonce,
        hash: transactionHashOf(raw),
        raw,
        fromBlock: null,
      });
      fillerIds.push(id);
      sends.push({ nonce, raw, id, status: "signed" });
    }
    return { storeNonce, sends, fillerIds };
  });
  const lostFinal = plan.sends.filter((s) => s.status !== "signed" && s.status !== "broadcast");
  deps.logger.warn(
    {
      chainNonce: mined,
      pendingNonce: pending,
      storeNonce: plan.storeNonce,
      lostFinal: lostFinal.map((s) => s.id),
      fillers: plan.fillerIds,
    },
    "the node lacks transactions the outbox recorded (a rewound chain or a lost mempool); broadcasting them again",
  );
  // In nonce order, so the node can mine each as soon as it has it.
  for (const send of plan.sends) {
    const sent = await broadcastRaw(client, send.raw);
    if (sent.kind === "refused") {
      deps.logger.error(
        { id: send.id, nonce: send.nonce, status: send.status, reason: sent.message },
        "the node refused a recorded transaction broadcast again after a rewind",
      );
    }
  }
  // The chain's count read before the rewind was noticed is stale.
  key.nonces.resync();
  const fillers: OutboxRow[] = [];
  for (const id of plan.fillerIds) {
    const row = await findOutboxRow(store, id);
    if (row !== undefined) fillers.push(row);
  }
  return { chainNonce: mined, storeNonce: plan.storeNonce, rebroadcast: plan.sends.length, fillers };
}
