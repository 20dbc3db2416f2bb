/**
 * The 402 of a route: its offers described by their scheme parts, composed with fresh memos on the
 * gate's terms (`composePaymentRequiredFromEntries`). Every call builds anew; nothing is kept per 402.
 */
import type { GateErrorCode } from "../protocol/errors.ts";
import type { SchemeOfferEntry, SchemeRequest } from "../schemes/types.ts";
import {
  type BuiltPaymentRequired,
  composePaymentRequiredFromEntries,
  paymentRequiredResponse,
} from "./composePaymentRequired.ts";
import { checkFailureResponse } from "./gateResponses.ts";
import type { CompiledRoute } from "./gateRoutes.ts";
import type { GateSetup } from "./gateSetup.ts";

export class RoutePaymentRequired {
  readonly #setup: GateSetup;

  constructor(setup: GateSetup) {
    this.#setup = setup;
  }

  /** The route's 402 entries: each offer described by its scheme's part (which may read a plan). */
  entries(route: CompiledRoute, request: SchemeRequest): Promise<SchemeOfferEntry[]> {
    return Promise.all(route.entries.map((entry) => entry.part.offer(entry.offer, request)));
  }

  /** The 402 answer for a request on `route`; a 5xx when its terms could not be built. */
  async respond(
    error: GateErrorCode,
    message: string,
    request: SchemeRequest,
    route: CompiledRoute,
  ): Promise<{ kind: "respond"; response: Response }> {
    let entries: SchemeOfferEntry[];
    try {
      entries = await this.entries(route, request);
    } catch (fault) {
      return {
        kind: "respond",
        response: checkFailureResponse(
          fault,
          "the route's payment terms could not be built (a plan or channel store did not answer)",
          this.#setup.logger,
        ),
      };
    }
    const built = await this.compose(error, message, request, route, entries);
    return { kind: "respond", response: paymentRequiredResponse(built) };
  }

  /** The 402 of `entries` for the request, with fresh memos binding it. */
  async compose(
    error: GateErrorCode,
    message: string,
    request: SchemeRequest,
    route: CompiledRoute,
    entries: readonly SchemeOfferEntry[],
  ): Promise<BuiltPaymentRequired> {
    const setup = this.#setup;
    return composePaymentRequiredFromEntries({
      error,
      message,
      method: request.method,
      path: request.path,
      query: request.query,
      // The configured origin, never `Host`; without one, the path alone (clients resolve it against
      // the URL they asked).
      resourceUrl: `${setup.config.publicOrigin ?? ""}${request.target}`,
      description: route.description,
      mimeType: route.mimeType,
      entries,
      payTo: setup.config.payTo,
      network: setup.config.network,
      token: setup.token,
      tokenEip712: await setup.tokenDomain.get(),
      facilitator: setup.facilitator.url,
      memoSecret: setup.memoSecret,
      memoTtlSeconds: setup.memoTtlSeconds,
      clock: setup.clock,
      random: setup.random,
    });
  }
}
