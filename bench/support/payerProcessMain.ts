/** The payer process of payerProcess.ts: builds paying fetches and runs payers on request. */
import type { FetchFn } from "../../src/http/facilitatorClient.ts";
import { runPayers } from "./payerLoop.ts";
import type { PayerReply, PayerRequest } from "./payerProcess.ts";
import { payingFetchOf } from "./payingFetch.ts";

const stacks = new Map<string, FetchFn[]>();

process.on("message", async (request: PayerRequest) => {
  let reply: PayerReply;
  try {
    if (request.type === "setUp") {
      stacks.set(
        request.stack,
        request.keys.map((key) => payingFetchOf(request.spec, key)),
      );
      reply = { id: request.id, ok: true };
    } else {
      const paying = stacks.get(request.stack);
      if (paying === undefined) throw new Error(`no stack ${request.stack} set up`);
      reply = { id: request.id, ok: true, run: await runPayers((i) => paying[i]!, request.options) };
    }
  } catch (error) {
    reply = { id: request.id, ok: false, error: (error as Error).message };
  }
  process.send?.(reply);
});
// The parent closing the channel ends the process.
process.on("disconnect", () => process.exit(0));
