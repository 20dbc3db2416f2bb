-- A reseller's sale reservations (docs/budgets.md, "Sales a reseller admits").
--
-- A reseller reserves in its own budget what serving a sale may cost its suppliers before the gate
-- honours the buyer's payment; each supplier purchase for that sale then draws its reservation from
-- the sale's (`parent_id`): the parent shrinks by what the child holds, so the total and daily limits
-- see the same amount, and a child released or committed for less gives the rest back to its parent
-- while the parent is still open. Both expire like any reservation, so a crash frees them.
ALTER TABLE agent_spends ADD COLUMN parent_id text;
-- A sale whose purchases drew all of it holds 0 until they give some back or it is closed.
ALTER TABLE agent_spends DROP CONSTRAINT agent_spends_reserved_check;
ALTER TABLE agent_spends ADD CONSTRAINT agent_spends_reserved_check CHECK (reserved > 0 OR (parent_id IS NULL AND ref LIKE 'sale:%'));
