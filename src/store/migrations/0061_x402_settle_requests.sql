-- Which x402 request an x402 payment was settled for (docs/x402.md "Settling twice", DESIGN.md §2.4):
-- `/x402/settle` answers success only to the request that settled the authorization, and to identical
-- retries of it. A request is identified by `request_hash`, the sha256 of the canonical JSON of its
-- body `{ x402Version, paymentPayload, paymentRequirements }`.
--
-- The row is written (first writer wins, on `nonce` as `payments` is) after the facilitator's preflight
-- accepted the authorization and before the settlement engine records the payment, so that of two
-- different requests carrying one authorization exactly one can own it. An x402 payment without a row
-- here (settled before this migration) is answered to no request.
--
-- `answered_at`: when `success` was first answered to a request from a standard x402 resource server.
-- Such a server keeps no replay guard (x402's `upfront` flow settles without verifying), so a replay of
-- its request must not be answered `success` again; a Tollgate gate names itself in the requirements
-- (`extra.tollgateGate`), consumes the payment in its own replay guard, and may retry after a lost reply.
CREATE TABLE x402_settle_requests (
  nonce text PRIMARY KEY CHECK (nonce ~ '^0x[0-9a-f]{64}$'),
  request_hash text NOT NULL CHECK (request_hash ~ '^[0-9a-f]{64}$'),
  created_at timestamptz NOT NULL DEFAULT now(),
  answered_at timestamptz
);
