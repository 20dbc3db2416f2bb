import type { Clock } from "../../protocol/clock.ts";
import type { Store } from "../../store/store.ts";
import type { LedgerLogger } from "./budgetLedgerTypes.ts";
import type { BudgetReader } from "./budgetReader.ts";
import type { LedgerApproval } from "./ledgerApproval.ts";
import type { LimitCheck } from "./limitCheck.ts";
import type { SaleReservations } from "./saleReservations.ts";

/**
 * What the ledger's books (reservations, spends, standing holds) are built from: the store and clock,
 * and the shared parts that read the report, check the limits, ask for approval and draw from sales.
 */
export type LedgerParts = {
  store: Store;
  clock: Clock;
  logger: LedgerLogger | undefined;
  /** Source of spend ids. */
  createId: () => string;
  reader: BudgetReader;
  limits: LimitCheck;
  approval: LedgerApproval;
  sales: SaleReservations;
};
