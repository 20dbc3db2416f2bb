/**
 * Approvals per agent, from the command line: `tollgate budget set … --approve-above` stores the
 * threshold with the budget, and a spawned `tollgate run` asks for a spend above it on its answer
 * source (`--approvals ask`, answers piped to stdin as a person would type them), or refuses it when
 * nobody can answer (stdin is not a terminal and no answer source was named). Both the rule planner
 * (the ledger's approval hook asks) and a model run (the orchestrator's interrupt asks, then resumes)
 * are covered; the model run's tokens stream to stdout.
 */
import { spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Address } from "viem";
import { generatePrivateKey, privateKeyToAccount } from "viem/accounts";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { budgetCommand } from "../src/cli/commands/budget.ts";
import { systemClock } from "../src/protocol/clock.ts";
import { type AgentStack, startAgentStack } from "./support/agentStack.ts";
import { type OpenAiServer, startOpenAiServer } from "./support/openAiServer.ts";

const TEXT = "The harvest was the best in a decade and the markets will open early this year.";
const FUNDS = 1_000_000n;

let stack: AgentStack;
let dir: string;
let server: OpenAiServer;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "tollgate-approvals-"));
  stack = await startAgentStack();
  server = await startOpenAiServer({
    script: ({ turn, userText }) => {
      if (turn === 1) {
        const { text } = JSON.parse(userText.slice(userText.indexOf("{"))) as { text: string };
        return { toolCalls: [{ name: "detect-language", arguments: { text } }] };
      }
      return { content: "The text is in English." };
    },
  });
}, 180_000);

afterAll(async () => {
  await server?.close();
  await stack?.stop();
  if (dir !== undefined) await rm(dir, { recursive: true, force: true });
});

const balanceOf = (owner: Address) =>
  getTokenBalance(stack.devnet.publicClient, { token: stack.devnet.contracts.usd, owner });

async function agentWithBudget(agent: string) {
  const key = generatePrivateKey();
  const address = privateKeyToAccount(key).address;
  await stack.devnet.fund(address, { usd: FUNDS });
  const lines: string[] = [];
  const out = { log: (l: string) => lines.push(l), error: (l: string) => lines.push(l) };
  const code = await budgetCommand(["set", agent, "--total", "1", "--approve-above", "0.001"], {
    env: { TOLLGATE_DIR: dir },
    out,
    clock: systemClock,
  });
  expect(code).toBe(0);
  expect(lines.join("\n")).toContain("approval needed above 0.001");
  return { key, address };
}

/** `tollgate run` in its own process; `input` is written to its stdin (a pipe, never a terminal). */
function tollgateRun(args: string[], options: { input?: string; env?: Record<string, string> } = {}) {
  const { DATABASE_URL: _unused, OPENAI_API_KEY: _key, ...rest } = process.env;
  const child = spawn(
    process.execPath,
    ["--import", "tsx", join(import.meta.dirname, "../src/cli/main.ts"), "run", ...args],
    {
      cwd: join(import.meta.dirname, ".."),
      env: { ...rest, TOLLGATE_DIR: dir, ...options.env },
      stdio: ["pipe", "pipe", "pipe"],
    },
  );
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => {
    stdout += String(chunk);
  });
  child.stderr.on("data", (chunk) => {
    stderr += String(chunk);
  });
  if (options.input !== undefined) child.stdin.write(options.input);
  child.stdin.end();
  return new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve, reject) => {
    child.on("error", reject);
    child.on("close", (code) => resolve({ code, stdout, stderr }));
  });
}

const common = (agent: string, key: string) => [
  "--agent",
  agent,
  "--text",
  TEXT,
  "--key",
  key,
  "--market",
  stack.market.url,
  "--facilitator",
  stack.tf.url,
];

describe("approvals from tollgate run", { timeout: 240_000 }, () => {
  it("refuses a spend above the threshold when no one can answer, and pays nothing", async () => {
    const { key, address } = await agentWithBudget("unattended");
    const result = await tollgateRun(["Detect the language of the text", ...common("unattended", key)]);
    expect(result.stdout).toContain("detect-language → refused by the budget: nothing paid (ApprovalDenied)");
    expect(result.code).toBe(1);
    expect(await balanceOf(address)).toBe(FUNDS);
  });

  it("asks on its answer source with --approvals ask: a yes pays (rule planner)", async () => {
    const { key, address } = await agentWithBudget("attended");
    const result = await tollgateRun(
      ["Detect the language of the text", ...common("attended", key), "--approvals", "ask"],
      { input: "y\n" },
    );
    expect(result.stderr).toMatch(
      /Approve spending 0\.005 USDC with 0x[0-9a-fA-F]{40} \(one-time\)\? \[y\/N\]/,
    );
    expect(result.stdout).toContain("bought detect-language → one-time 0.005 USDC");
    expect(result.code).toBe(0);
    expect(FUNDS - (await balanceOf(address))).toBe(5_000n);
  });

  it("asks through the model run's interrupt and resumes with the answer, streaming the model's tokens", async () => {
    const model = { OPENAI_API_KEY: "test", OPENAI_BASE_URL: server.baseURL };
    const { key, address } = await agentWithBudget("model-attended");
    const yes = await tollgateRun(
      ["Which language is this?", ...common("model-attended", key), "--approvals", "ask"],
      { input: "yes\n", env: model },
    );
    expect(yes.stderr).toMatch(
      /Approve detect-language from 0x[0-9a-fA-F]{40}: Price: 0\.005 USDC per call, paid once per call; or subscription 0\.1 USDC every 30 days, calls included; or 0\.004 USDC per call from a prepaid channel \(a refundable deposit, then no wait per call\)\. \(up to 0\.1 USDC\)\? \[y\/N\]/,
    );
    expect(yes.stdout).toContain("detect-language: spend approved");
    // The model streamed (tokens printed as they came) and its answer is printed once more at the end.
    expect(server.requests.every((request) => request.stream === true)).toBe(true);
    expect(yes.stdout.split("The text is in English.").length - 1).toBe(2);
    expect(yes.code).toBe(0);
    expect(FUNDS - (await balanceOf(address))).toBe(5_000n);

    const no = await tollgateRun(
      ["Which language is this?", ...common("model-attended", key), "--approvals", "ask"],
      {
        input: "n\n",
        env: model,
      },
    );
    expect(no.stdout).toContain("detect-language: spend not approved");
    expect(no.code).toBe(1);
    expect(FUNDS - (await balanceOf(address))).toBe(5_000n);
  });
});
