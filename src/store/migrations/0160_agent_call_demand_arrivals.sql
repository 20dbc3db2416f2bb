-- The policy's learned demand counts arrivals beside the recent calls: calls seconds apart (a model
-- turn's parallel calls, a loop's burst) are one arrival, so that a rise the fast estimate shows is
-- taken only when it rests on enough separate arrivals, not on one burst (src/agent/policy/
-- demandEstimate.ts, docs/policy.md "Learning"). Decayed like `recent`; 0 for rows written before
-- this column: it fills in as calls come.
ALTER TABLE agent_call_demand
  ADD COLUMN recent_arrivals double precision NOT NULL DEFAULT 0 CHECK (recent_arrivals >= 0);
