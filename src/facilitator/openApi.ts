/**
 * The facilitator's OpenAPI 3.1 document, generated from the same zod schemas that validate its
 * requests and responses, so the document cannot drift from what the service accepts.
 */
import { z } from "zod";
import { ErrorBodySchema } from "../protocol/errors.ts";
import {
  AuthorizeResponseSchema,
  HealthSchema,
  JwksSchema,
  PaymentRecordSchema,
  SupportedResponseSchema,
  VerifyRequestSchema,
  VerifyResponseSchema,
} from "../protocol/facilitator.ts";
import { AuthorizeRequestSchema } from "../protocol/signedPayment.ts";
import {
  X402SettleRequestSchema,
  X402SettleResponseSchema,
  X402SupportedResponseSchema,
  X402VerifyRequestSchema,
  X402VerifyResponseSchema,
} from "../protocol/x402.ts";

type Operation = {
  summary: string;
  request?: string;
  /** A schema name for a JSON reply, or `text` for a plain-text one (Prometheus exposition). */
  response: string | { text: string };
  errors?: number[];
  /** Path parameters, by name, with the JSON Schema of each. */
  parameters?: Record<string, Record<string, unknown>>;
  /** Credentials accepted (any one of them), by security scheme name; absent = public. */
  security?: (keyof typeof securitySchemes)[];
};

/** The credentials of docs/facilitator.md, "Who may read what". */
const securitySchemes = {
  providerKey: {
    type: "http",
    scheme: "bearer",
    description: "A provider API key (`POST /providers`): the payee of the payment read",
  },
  payerAuth: {
    type: "apiKey",
    in: "header",
    name: "X-Tollgate-Payer-Auth",
    description:
      "`<unix seconds>.<EIP-191 signature>` by the payer over `Tollgate payer read\\n<METHOD> <path>\\nTime: <t>`, at most 60 s old",
  },
  metricsToken: {
    type: "http",
    scheme: "bearer",
    description: "TOLLGATE_METRICS_TOKEN; without one configured, only loopback peers are answered",
  },
} as const;

const schemas: Record<string, z.ZodType> = {
  AuthorizeRequest: AuthorizeRequestSchema,
  AuthorizeResponse: AuthorizeResponseSchema,
  VerifyRequest: VerifyRequestSchema,
  VerifyResponse: VerifyResponseSchema,
  SupportedResponse: SupportedResponseSchema,
  Jwks: JwksSchema,
  Health: HealthSchema,
  PaymentRecord: PaymentRecordSchema,
  X402VerifyRequest: X402VerifyRequestSchema,
  X402VerifyResponse: X402VerifyResponseSchema,
  X402SettleRequest: X402SettleRequestSchema,
  X402SettleResponse: X402SettleResponseSchema,
  X402SupportedResponse: X402SupportedResponseSchema,
  ErrorBody: ErrorBodySchema,
};

const operations: Record<string, Record<string, Operation>> = {
  "/authorize": {
    post: {
      summary:
        "Settle a signed EIP-3009 payment and return its Ed25519 payment proof (idempotent on the nonce)",
      request: "AuthorizeRequest",
      response: "AuthorizeResponse",
      errors: [400, 402, 409, 413, 422, 429, 503],
    },
  },
  "/verify": {
    post: {
      summary: "Check a payment proof",
      request: "VerifyRequest",
      response: "VerifyResponse",
      errors: [400, 413],
    },
  },
  "/payments/{nonce}": {
    get: {
      summary:
        "A payment's status, transaction and proof, by its EIP-3009 nonce (= keccak256(memo)), for its payer or payee only",
      parameters: { nonce: { type: "string", pattern: "^0x[0-9a-fA-F]{64}$" } },
      response: "PaymentRecord",
      errors: [400, 401, 404],
      security: ["providerKey", "payerAuth"],
    },
  },
  "/x402/verify": {
    post: {
      summary: "x402 v2: check an `exact` EVM payment payload against its requirements without settling",
      request: "X402VerifyRequest",
      response: "X402VerifyResponse",
      errors: [400, 413, 503],
    },
  },
  "/x402/settle": {
    post: {
      summary: "x402 v2: settle an `exact` EVM payment payload on chain (idempotent on the nonce)",
      request: "X402SettleRequest",
      response: "X402SettleResponse",
      errors: [400, 413, 503],
    },
  },
  "/x402/supported": {
    get: { summary: "x402 v2: the scheme and network kinds settled here", response: "X402SupportedResponse" },
  },
  "/metrics": {
    get: {
      summary:
        "Prometheus metrics: settled count and volume, failures, batch sizes, settlement latency (loopback peers or the metrics token)",
      response: { text: "text/plain; version=0.0.4" },
      errors: [401],
      security: ["metricsToken"],
    },
  },
  "/openapi.json": {
    get: { summary: "This document", response: { text: "application/json" } },
  },
  "/supported": {
    get: { summary: "Networks, tokens and schemes this facilitator settles", response: "SupportedResponse" },
  },
  "/.well-known/jwks.json": { get: { summary: "Public keys that sign payment proofs", response: "Jwks" } },
  "/healthz": {
    get: { summary: "Liveness of the chain RPC and the store", response: "Health", errors: [503] },
  },
};

let cached: Record<string, unknown> | undefined;

function jsonSchema(schema: z.ZodType): unknown {
  // `io: "input"` describes what a client sends; transforms (string → bigint) are not representable.
  return z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });
}

export function buildOpenApiDocument(): Record<string, unknown> {
  if (cached !== undefined) return cached;
  const paths: Record<string, unknown> = {};
  for (const [path, methods] of Object.entries(operations)) {
    const entry: Record<string, unknown> = {};
    for (const [method, op] of Object.entries(methods)) {
      const responses: Record<string, unknown> = {
        "200": {
          description: "OK",
          content:
            typeof op.response === "string"
              ? { "application/json": { schema: { $ref: `#/components/schemas/${op.response}` } } }
              : { [op.response.text]: { schema: {} } },
        },
      };
      for (const status of op.errors ?? []) {
        responses[String(status)] = {
          description: "Error",
          content: { "application/json": { schema: { $ref: "#/components/schemas/ErrorBody" } } },
        };
      }
      entry[method] = {
        summary: op.summary,
        ...(op.parameters === undefined
          ? {}
          : {
              parameters: Object.entries(op.parameters).map(([name, schema]) => ({
                name,
                in: "path",
                required: true,
                schema,
              })),
            }),
        ...(op.request === undefined
          ? {}
          : {
              requestBody: {
                required: true,
                content: { "application/json": { schema: { $ref: `#/components/schemas/${op.request}` } } },
              },
            }),
        ...(op.security === undefined ? {} : { security: op.security.map((name) => ({ [name]: [] })) }),
        responses,
      };
    }
    paths[path] = entry;
  }
  cached = {
    openapi: "3.1.0",
    info: { title: "Tollgate facilitator", version: "1" },
    paths,
    components: {
      schemas: Object.fromEntries(Object.entries(schemas).map(([name, s]) => [name, jsonSchema(s)])),
      securitySchemes,
    },
  };
  return cached;
}
