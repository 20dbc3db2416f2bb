/**
 * `tollgate channel list | close | withdraw`: an agent's prepaid channels as `tollgate run` keeps them
 * (`<dir>/channels-<agent>.journal`, docs/channels.md "Agents"). `close` asks every open channel to
 * close, asks the seller's gate to close it cooperatively (the rest back in the wallet at once), and
 * releases its budget hold; `withdraw` takes back the unspent deposit of closed channels once
 * their close delay is over — alone, also when the seller vanished (relayed gasless by the facilitator;
 * without one, `withdrawChannel` on chain needs nobody either).
 */
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { z } from "zod";
import { createBudgetLedger } from "../../agent/budget/createBudgetLedger.ts";
import { readDevnetFile } from "../../chain/devnetFile.ts";
import { createFacilitatorClient, type FetchFn } from "../../http/facilitatorClient.ts";
import { Hex32Schema } from "../../protocol/address.ts";
import { formatUnitsExact } from "../../protocol/amount.ts";
import { type Clock, systemClock } from "../../protocol/clock.ts";
import { isTollgateError, TollgateError } from "../../protocol/errors.ts";
import { NetworkSchema } from "../../protocol/network.ts";
import { parseWire } from "../../protocol/parseWire.ts";
import { createAgentChannels } from "../../schemes/channel/agent/channelCommitments.ts";
import { createFileChannelWalletStore } from "../../schemes/channel/client/channelWalletStore.ts";
import { openAgentStore } from "../openAgentStore.ts";
import { DEFAULT_FACILITATOR_URL } from "./analytics.ts";
import type { CommandOutput } from "./budget.ts";

export const summary = "list | close | withdraw [--agent researcher] — an agent's prepaid channels";

const usage = `usage: tollgate channel <command> [--agent researcher] [--facilitator ${DEFAULT_FACILITATOR_URL}]
                        [--key 0x… | --account <devnet index>] [--dir .tollgate] [--json]
                        [--no-cooperative]
  list                 the agent's channels: payee, deposit, signed so far, status (read again from
                       the facilitator where not final)
  close                ask every open channel to close (gasless) and its seller's gate to close it
                       cooperatively: the seller's last voucher is claimed and the rest is back in the
                       wallet at once; a gate that does not answer leaves it to \`withdraw\` after the
                       close delay. The budget hold is released at once either way.
                       --no-cooperative: do not ask the gates (the seller claims its last voucher
                       during the close delay; the rest is withdrawn after it)
  withdraw [<channelId>]
                       take back the unspent deposit of channels asked to close whose close delay is
                       over (all of them, or one); needs nobody else, also when the seller vanished
The channels are those \`tollgate run --agent <agent>\` opened (<dir>/channels-<agent>.journal).
key: --key, TOLLGATE_AGENT_KEY, or a devnet account (--account, default 4: the agent) from <dir>/devnet.json`;

const PrivateKeySchema = z
  .string()
  .regex(/^0x[0-9a-fA-F]{64}$/, { error: "expected a 0x-prefixed 32-byte private key" })
  .transform((key) => key as `0x${string}`);

export type ChannelCommandDeps = {
  env: Record<string, string | undefined>;
  out: CommandOutput;
  fetch: FetchFn;
  clock: Clock;
  cwd: string;
};

const usdc = (amount: bigint) => `${formatUnitsExact(amount)} USDC`;
const json = (value: unknown) =>
  JSON.stringify(value, (_k, v: unknown) => (typeof v === "bigint" ? v.toString() : v), 2);

function parseChannelArgs(argv: string[]) {
  return parseArgs({
    args: argv,
    allowPositionals: true,
    options: {
      agent: { type: "string", default: "researcher" },
      facilitator: { type: "string" },
      key: { type: "string" },
      account: { type: "string" },
      network: { type: "string" },
      dir: { type: "string" },
      json: { type: "boolean", default: false },
      "no-cooperative": { type: "boolean", default: false },
      help: { type: "boolean", short: "h" },
    },
  });
}

type ChannelFlags = ReturnType<typeof parseChannelArgs>["values"];

/** What every subcommand works with: the agent's channels, its journal and the flags. */
interface ChannelSession {
  deps: ChannelCommandDeps;
  values: ChannelFlags;
  agent: string;
  journal: Awaited<ReturnType<typeof createFileChannelWalletStore>>;
  channels: ReturnType<typeof createAgentChannels>;
  /** The journal's channels on this network paid by this key. */
  mine(): ReturnType<ChannelSession["journal"]["load"]>;
}

/** Runs `tollgate channel …`; returns the exit code. */
export async function channelCommand(argv: string[], deps: ChannelCommandDeps): Promise<number> {
  const { values, positionals } = parseChannelArgs(argv);
  if (values.help === true) {
    deps.out.log(usage);
    return 0;
  }
  const [command, ...rest] = positionals;
  if (command !== "list" && command !== "close" && command !== "withdraw") {
    deps.out.error(usage);
    return 2;
  }
  const only =
    rest[0] === undefined ? undefined : parseWire(Hex32Schema, rest[0].toLowerCase(), { what: "channel id" });
  const dir = resolve(deps.cwd, values.dir ?? deps.env.TOLLGATE_DIR ?? ".tollgate");
  const agent = values.agent;
  const account = privateKeyToAccount(
    parseWire(PrivateKeySchema, agentKey(values, deps, dir), { what: "key" }),
  );
  const facilitator = createFacilitatorClient({
    url: values.facilitator ?? deps.env.TOLLGATE_FACILITATOR_URL ?? DEFAULT_FACILITATOR_URL,
    fetch: deps.fetch,
  });
  const network = parseWire(
    NetworkSchema,
    values.network ?? (await facilitator.supported()).networks[0]?.network,
    { what: "network" },
  );
  const store = await openAgentStore({ databaseUrl: deps.env.DATABASE_URL, dir });
  const journal = await createFileChannelWalletStore({
    path: join(dir, `channels-${encodeURIComponent(agent)}.journal`),
  }).catch(async (error: unknown) => {
    await store.close();
    throw error;
  });
  try {
    const channels = createAgentChannels({
      agent,
      budget: createBudgetLedger({ store, clock: deps.clock }),
      account,
      network,
      facilitator,
      store: journal,
      clock: deps.clock,
      fetch: deps.fetch,
    });
    const mine = () => journal.load().filter((c) => c.network === network && c.payer === account.address);
    const session: ChannelSession = { deps, values, agent, journal, channels, mine };
    if (command === "list" || command === "withdraw") await refreshUnsettled(session);
    if (command === "list") return listChannels(session);
    if (command === "close") return await closeChannels(session);
    if (only !== undefined) return await withdrawChannel(session, only);
    return await withdrawDueChannels(session);
  } finally {
    await journal.close();
    await store.close();
  }
}

/** --key, TOLLGATE_AGENT_KEY, or a devnet account from <dir>/devnet.json. */
function agentKey(values: ChannelFlags, deps: ChannelCommandDeps, dir: string): string {
  const key =
    values.key ??
    (values.account === undefined ? deps.env.TOLLGATE_AGENT_KEY : undefined) ??
    readDevnetFile(dir)?.accounts[values.account === undefined ? 4 : Number(values.account)]?.privateKey;
  if (key === undefined) {
    throw new TollgateError(
      "InvalidRequest",
      `no key for agent "${values.agent}": pass --key or set TOLLGATE_AGENT_KEY`,
    );
  }
  return key;
}

/**
 * The journal can be behind the chain (a cooperative close that landed after the gate answered
 * "closing"): what is not final is read again from the facilitator; unreachable, the journal stands.
 */
async function refreshUnsettled({ channels, mine }: ChannelSession): Promise<void> {
  for (const c of mine()) {
    if (c.status !== "closed") await channels.wallet.refresh(c.channelId).catch(() => undefined);
  }
}

/** `tollgate channel list` */
function listChannels({ deps, values, agent, mine }: ChannelSession): number {
  const list = mine();
  if (values.json) {
    deps.out.log(json(list.map(({ sessionKey: _secret, ...c }) => c)));
    return 0;
  }
  if (list.length === 0) deps.out.log(`agent ${agent} holds no channels`);
  for (const c of list) {
    deps.out.log(
      `${c.channelId}  ${c.status.padEnd(7)}  payee ${c.payee}  deposit ${usdc(c.deposit)}  signed ${usdc(c.signed)}`,
    );
  }
  return 0;
}

/** `tollgate channel close` */
async function closeChannels({ deps, values, journal, channels }: ChannelSession): Promise<number> {
  const settled = await channels.close({ cooperative: !values["no-cooperative"] });
  const statusOf = (id: string) => journal.load().find((r) => r.channelId === id)?.status;
  if (values.json) deps.out.log(json(settled.map((c) => ({ ...c, status: statusOf(c.channelId) }))));
  else {
    if (settled.length === 0) deps.out.log("no open channel to close");
    for (const c of settled) {
      deps.out.log(
        statusOf(c.channelId) === "closed"
          ? `${c.channelId} closed with the seller: ${usdc(c.spent)} spent, ${usdc(c.returned)} back to the budget and the rest in the wallet now`
          : `${c.channelId} closing: ${usdc(c.spent)} spent, ${usdc(c.returned)} back to the budget (in the wallet after the close delay: \`tollgate channel withdraw\`)`,
      );
    }
  }
  return 0;
}

/** `tollgate channel withdraw <channelId>` */
async function withdrawChannel({ deps, values, channels }: ChannelSession, only: Hex): Promise<number> {
  try {
    const reply = await channels.wallet.withdraw(only);
    deps.out.log(values.json ? json(reply) : `${only}: ${usdc(BigInt(reply.refunded))} back in the wallet`);
    return 0;
  } catch (error) {
    if (isTollgateError(error, "InvalidRequest") && error.retryAfter !== undefined) {
      deps.out.error(`${only}: its close delay is not over; try again in ${error.retryAfter} s`);
      return 1;
    }
    throw error;
  }
}

/** `tollgate channel withdraw` */
async function withdrawDueChannels({ deps, values, channels }: ChannelSession): Promise<number> {
  const withdrawn = await channels.withdrawDue();
  const waiting = channels.wallet.channels().filter((c) => c.status === "closing");
  if (values.json) deps.out.log(json({ withdrawn, waiting: waiting.map((c) => c.channelId) }));
  else {
    for (const w of withdrawn) deps.out.log(`${w.channelId}: ${usdc(w.refunded)} back in the wallet`);
    for (const c of waiting) deps.out.log(`${c.channelId}: still in its close delay`);
    if (withdrawn.length + waiting.length === 0) deps.out.log("no channel to withdraw");
  }
  return 0;
}

export async function run(argv: string[]): Promise<number> {
  return channelCommand(argv, {
    env: process.env,
    out: console,
    fetch: globalThis.fetch,
    clock: systemClock,
    cwd: process.cwd(),
  });
}
