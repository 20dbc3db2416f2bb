/**
 * The pino logger Tollgate's services use: payment headers, signatures and keys are redacted, so a log
 * shipped to a third party never carries a usable proof or credential. Memos and proofs too: a proof
 * is a bearer credential until a gate consumes it, and a memo with the (public) authorization is
 * enough to have `/authorize` hand the proof out again (docs/facilitator.md, "Who may read what").
 */
import pino, { type DestinationStream, type Logger } from "pino";

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

/**
 * The services' logger: one JSON object per line, with one `name` (the service's). Give child loggers
 * other keys (`component`, `service`), never `name` again: pino would write the key twice in a line.
 * `destination` defaults to stdout; tests pass a stream to read the lines back.
 */
export function createLogger(
  options: { level?: string; name?: string; destination?: DestinationStream } = {},
): Logger {
  const settings = {
    name: options.name ?? "tollgate",
    level: options.level ?? "info",
    redact: { paths: redactedPaths, censor: "[redacted]" },
  };
  return options.destination === undefined ? pino(settings) : pino(settings, options.destination);
}
