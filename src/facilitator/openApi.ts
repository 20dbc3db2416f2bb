/**
 * The facilitator's OpenAPI 3.1 document, generated from the same zod schemas that validate its
 * requests and responses, so the document cannot drift from what the service accepts.
 */
import { z } from "zod";
import {
  ChannelCloseRequestResponseSchema,
  ChannelCloseRequestSchema,
  ChannelCloseResponseSchema,
  ChannelOpenRequestSchema,
  ChannelOpenResponseSchema,
  ChannelStateSchema,
  ChannelTopUpRequestSchema,
  ChannelTopUpResponseSchema,
  ChannelVouchersResponseSchema,
  ChannelWithdrawResponseSchema,
} from "../protocol/channels.ts";
import { ChannelVouchersRequestSchema } from "../protocol/channelVoucher.ts";
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
  ChannelOpenRequest: ChannelOpenRequestSchema,
  ChannelOpenResponse: ChannelOpenResponseSchema,
  ChannelState: ChannelStateSchema,
  ChannelCloseRequest: ChannelCloseRequestSchema,
  ChannelCloseRequestResponse: ChannelCloseRequestResponseSchema,
  ChannelTopUpRequest: ChannelTopUpRequestSchema,
  ChannelTopUpResponse: ChannelTopUpResponseSchema,
  ChannelWithdrawResponse: ChannelWithdrawResponseSchema,
  ChannelCloseResponse: ChannelCloseResponseSchema,
  ChannelVouchersRequest: ChannelVouchersRequestSchema,
  ChannelVouchersResponse: ChannelVouchersResponseSchema,
};

const channelIdParameter = { id: { type: "string", pattern: "^0x[0-9a-fA-F]{64}$" } };

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
  "/channels": {
    post: {
      summary:
        "Relay a payer's gasless channel open (EIP-3009 ReceiveWithAuthorization binding the terms; idempotent on its nonce)",
      request: "ChannelOpenRequest",
      response: "ChannelOpenResponse",
      errors: [400, 402, 409, 413, 422, 429, 503],
    },
  },
  "/channels/vouchers": {
    post: {
      summary: "Hand over a gate's latest channel vouchers for batched claims (the payee's provider key)",
      request: "ChannelVouchersRequest",
      response: "ChannelVouchersResponse",
      errors: [400, 401, 413, 429, 503],
      security: ["providerKey"],
    },
  },
  "/channels/{id}": {
    get: {
      summary:
        "A channel's public chain state: payer, payee, token, deposit, claimed, session key, close state",
      parameters: channelIdParameter,
      response: "ChannelState",
      errors: [400, 404, 503],
    },
  },
  "/channels/{id}/close-request": {
    post: {
      summary: "Relay the payer's EIP-712 RequestClose; the payer may withdraw after the close delay",
      parameters: channelIdParameter,
      request: "ChannelCloseRequest",
      response: "ChannelCloseRequestResponse",
      errors: [400, 404, 413, 422, 429, 503],
    },
  },
  "/channels/{id}/top-up": {
    post: {
      summary:
        "Relay the payer's EIP-3009 top-up of its channel (nonce topUpNonce(channelId, salt)); 201, or 200 for a repeat",
      parameters: channelIdParameter,
      request: "ChannelTopUpRequest",
      response: "ChannelTopUpResponse",
      errors: [400, 402, 404, 413, 422, 429, 503],
    },
  },
  "/channels/{id}/withdraw": {
    post: {
      summary:
        "Relay the payer's withdrawal of the unclaimed deposit once the close delay is over (anyone may ask; it pays the payer only)",
      parameters: channelIdParameter,
      response: "ChannelWithdrawResponse",
      errors: [400, 404, 429, 503],
    },
  },
  "/channels/{id}/close": {
    post: {
      summary:
        "Cooperative close by the payee with its latest voucher: claims it and refunds the rest to the payer (202 while on its way)",
      parameters: channelIdParameter,
      response: "ChannelCloseResponse",
      errors: [400, 401, 404, 429, 503],
      security: ["providerKey"],
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
