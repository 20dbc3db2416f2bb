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
  SupportedResponseSchema,
  VerifyRequestSchema,
  VerifyResponseSchema,
} from "../protocol/facilitator.ts";
import { AuthorizeRequestSchema } from "../protocol/signedPayment.ts";

type Operation = {
  summary: string;
  request?: string;
  response: string;
  errors?: number[];
};

const schemas: Record<string, z.ZodType> = {
  AuthorizeRequest: AuthorizeRequestSchema,
  AuthorizeResponse: AuthorizeResponseSchema,
  VerifyRequest: VerifyRequestSchema,
  VerifyResponse: VerifyResponseSchema,
  SupportedResponse: SupportedResponseSchema,
  Jwks: JwksSchema,
  Health: HealthSchema,
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
      errors: [400],
    },
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
          content: { "application/json": { schema: { $ref: `#/components/schemas/${op.response}` } } },
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
        ...(op.request === undefined
          ? {}
          : {
              requestBody: {
                required: true,
                content: { "application/json": { schema: { $ref: `#/components/schemas/${op.request}` } } },
              },
            }),
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
    },
  };
  return cached;
}
