-- The policy's learned demand keeps, beside the decayed calls, the decayed calls the planner's
-- forecasts in force expected over the same time (src/agent/policy/demandEstimate.ts): their ratio is
-- the forecaster's bias, which scales the next forecast (docs/policy.md "Learning"). 0 for a key
-- recorded without a forecast, and for rows written before this column.
ALTER TABLE agent_call_demand
  ADD COLUMN expected double precision NOT NULL DEFAULT 0 CHECK (expected >= 0);
