/**
 * The pino logger Tollgate's services use: payment headers, signatures and keys are redacted, so a log
 * shipped to a third party never carries a usable proof or credential. Memos and proofs too: a proof
 * is a bearer credential until a gate consumes it, and a memo with the (public) authorization is
 * enough to have `/authorize` hand the proof out again (docs/facilitator.md, "Who may read what").
 */
import pino, { type Logger } from "pino";

export const redactedPaths = [
  "req.headers.authorization",
  'req.headers["x-payment"]',
  'req.headers["payment-signature"]',
  'req.headers["x-tollgate-sub-auth"]',
  "*.signature",
  "*.sig",
  "*.privateKey",
  "*.apiKey",
  "*.secret",
  "signedPayment.signature",
  "memo",
  "*.memo",
  "proof",
  "*.proof",
];

export function createLogger(options: { level?: string; name?: string } = {}): Logger {
  return pino({
    name: options.name ?? "tollgate",
    level: options.level ?? "info",
    redact: { paths: redactedPaths, censor: "[redacted]" },
  });
}
