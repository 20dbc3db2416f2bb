-- The policy's learned demand remembers what demand was when it was high, so that when it comes back
-- after a lull or a cancel the agent subscribes again on that rate instead of relearning it from
-- zero (src/agent/policy/demandEstimate.ts, docs/policy.md "Learning"): `recent` and
-- `recent_exposure` are the calls and seconds observed decayed by a fast half-life (what demand does
-- now, the evidence that it came back), `recall` the highest rate seen without a forecast (calls per
-- second), slowly forgotten. 0 for rows written before these columns: they fill in as calls come.
ALTER TABLE agent_call_demand
  ADD COLUMN recent double precision NOT NULL DEFAULT 0 CHECK (recent >= 0),
  ADD COLUMN recent_exposure double precision NOT NULL DEFAULT 0 CHECK (recent_exposure >= 0),
  ADD COLUMN recall double precision NOT NULL DEFAULT 0 CHECK (recall >= 0);
