-- Spend approval per agent (docs/budgets.md "Approval", docs/agents.md "Approvals"): a spend strictly
-- above `approve_above` (smallest unit) needs someone's yes before it is reserved. It is part of the
-- agent's budget, so `tollgate run` applies the threshold `tollgate budget set … --approve-above`
-- stored, asking on the terminal when it can and refusing when it cannot. NULL means "no approval
-- needed". Written by src/agent/budget/approvalThreshold.ts; `setLimits` leaves it as it is.
ALTER TABLE agent_budgets ADD COLUMN approve_above uint256;
