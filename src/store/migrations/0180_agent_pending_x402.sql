-- A pending payment made to a standard x402 server (src/agent/budget/pendingPayments.ts): the seller
-- answered an error after the agent signed, and its own facilitator, not ours, may still settle the
-- authorization until it expires. `token` is the authorization's asset: such a payment is read back
-- from the chain (EIP-3009 `authorizationState(payer, nonce)` on that token), not from Tollgate's
-- facilitator. NULL for payments sent to `/authorize`.
ALTER TABLE agent_pending_payments ADD COLUMN token text CHECK (token IS NULL OR token ~ '^0x[0-9a-f]{40}$');
