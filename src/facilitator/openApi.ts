/**
 * The facilitator's OpenAPI 3.1 document, built from the routes its Hono app serves and the
 * documentation each route's registration carries (routeDocs.ts), with the zod schemas that validate
 * the requests and replies: a served route is always listed, with the credentials that admit a caller,
 * and nothing is listed that is not served.
 */
import type { Hono } from "hono";
import { z } from "zod";
import {
  openApiPath,
  pathParams,
  type RouteAuth,
  type ServedRoute,
  servedRoutes,
} from "../http/routeDocs.ts";
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

/** The credentials of docs/facilitator.md, "Who may read what". */
const securitySchemes = {
  providerKey: {
    type: "http",
    scheme: "bearer",
    description: "A provider API key (`POST /providers`), as `Authorization: Bearer tg_…`",
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
  dashboardSession: {
    type: "apiKey",
    in: "cookie",
    name: "tollgate_session",
    description:
      "A dashboard session (`POST /dashboard/login` with a provider API key or the agent token); form posts also carry its CSRF token",
  },
} as const satisfies Record<RouteAuth, unknown>;

/** Schemas published by name under `components.schemas`; others are written in place. */
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

let cachedComponents: Record<string, unknown> | undefined;
const documents = new WeakMap<object, Record<string, unknown>>();

function jsonSchema(schema: z.ZodType): unknown {
  // `io: "input"` describes what a client sends; transforms (string → bigint) are not representable.
  return z.toJSONSchema(schema, { io: "input", unrepresentable: "any" });
}

function components(): Record<string, unknown> {
  cachedComponents ??= {
    schemas: Object.fromEntries(Object.entries(schemas).map(([name, s]) => [name, jsonSchema(s)])),
    securitySchemes,
  };
  return cachedComponents;
}

const schemaNames = new Map<z.ZodType, string>(Object.entries(schemas).map(([name, s]) => [s, name]));

function schemaRef(schema: z.ZodType): unknown {
  const name = schemaNames.get(schema);
  return name === undefined ? jsonSchema(schema) : { $ref: `#/components/schemas/${name}` };
}

const errorContent = {
  "application/json": { schema: { $ref: "#/components/schemas/ErrorBody" } },
};

/** The OpenAPI operation of one served route. */
function operationOf(route: ServedRoute): Record<string, unknown> {
  const doc = route.doc;
  const status = doc?.status ?? 200;
  const response = doc?.response;
  const success =
    response === undefined
      ? { description: status >= 300 && status < 400 ? "Redirect" : "OK" }
      : {
          description: "OK",
          content:
            "media" in response
              ? { [response.media]: { schema: {} } }
              : { "application/json": { schema: schemaRef(response) } },
        };
  const responses: Record<string, unknown> = { [String(status)]: success };
  for (const error of doc?.errors ?? []) {
    responses[String(error)] = { description: "Error", content: errorContent };
  }
  if (route.auth.length > 0 && responses["401"] === undefined) {
    responses["401"] = { description: "No valid credential", content: errorContent };
  }
  const parameters = [
    ...pathParams(route.path).map((name) => {
      const schema = doc?.params?.[name];
      return {
        name,
        in: "path",
        required: true,
        schema: schema === undefined ? { type: "string" } : jsonSchema(schema),
      };
    }),
    ...Object.entries(doc?.query?.shape ?? {}).map(([name, field]) => ({
      name,
      in: "query",
      required: !(field as z.ZodType).safeParse(undefined).success,
      schema: jsonSchema(field as z.ZodType),
    })),
  ];
  const request = doc?.request;
  return {
    summary: doc?.summary ?? "Undocumented",
    ...(parameters.length === 0 ? {} : { parameters }),
    ...(request === undefined
      ? {}
      : {
          requestBody: {
            required: true,
            content:
              request === "form"
                ? { "application/x-www-form-urlencoded": { schema: { type: "object" } } }
                : { "application/json": { schema: schemaRef(request) } },
          },
        }),
    // OpenAPI: any one entry of `security` admits; an empty list would say "public".
    ...(route.auth.length === 0 ? {} : { security: route.auth.map((name) => ({ [name]: [] })) }),
    responses,
  };
}

/** The OpenAPI document of `routes`. */
export function buildOpenApiDocument(routes: readonly ServedRoute[]): Record<string, unknown> {
  const paths: Record<string, Record<string, unknown>> = {};
  for (const route of routes) {
    const path = openApiPath(route.path);
    paths[path] ??= {};
    paths[path][route.method.toLowerCase()] = operationOf(route);
  }
  return {
    openapi: "3.1.0",
    info: { title: "Tollgate facilitator", version: "1" },
    paths,
    components: components(),
  };
}

/**
 * The OpenAPI document of the routes `app` serves, built once per app (on the first request for it,
 * when every module has mounted its routes).
 */
export function openApiDocumentOf(app: Pick<Hono, "routes">): Record<string, unknown> {
  let document = documents.get(app);
  if (document === undefined) {
    document = buildOpenApiDocument(servedRoutes(app));
    documents.set(app, document);
  }
  return document;
}
