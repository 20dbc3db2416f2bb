/**
 * The orchestrator with the rule planner over Tollgate's real offline tools, loaded by name from the
 * bundled tools/ manifests, on the bundled documents; the notary on a real devnet.
 */
import type { Hex } from "viem";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createBriefReseller } from "../agents/createBriefReseller.ts";
import { createNotary, verifyNotarization } from "../agents/createNotary.ts";
import { loadDocuments } from "../agents/loadDocuments.ts";
import { loadLocalTools } from "../agents/research.ts";
import { createOrchestrator } from "../src/agent/orchestrator/createOrchestrator.ts";
import type { OrchestratorEvent } from "../src/agent/orchestrator/orchestratorEvent.ts";
import type { PlannerDocument } from "../src/agent/planner/plannerInputs.ts";
import { capabilityTool } from "../src/agent/tools/capabilityTool.ts";
import { listToolManifests } from "../src/agent/tools/loadTool.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { toolsDir } from "../tools/toolsDir.ts";

let documents: PlannerDocument[];
beforeAll(async () => {
  documents = await loadDocuments();
});

describe("bundled tool manifests", () => {
  it("are all valid: four local tools and two remote capabilities", async () => {
    const manifests = await listToolManifests({ dir: toolsDir });
    expect(manifests.map((manifest) => `${manifest.kind}:${manifest.name}`)).toEqual([
      "remote:brief",
      "local:detect-language",
      "remote:notarize",
      "local:sentiment",
      "local:summarize",
      "local:word-stats",
    ]);
  });
});

describe("orchestrator with the rule planner over the bundled local tools", () => {
  it("detects the language of each bundled document", async () => {
    const tools = await loadLocalTools(["summarize", "sentiment", "detect-language", "word-stats"]);
    const run = await createOrchestrator({ tools }).run("Which language is each document written in?", {
      documents,
    });
    expect(run.planner).toBe("rules");
    expect(run.steps.map((step) => [step.document, step.tool, JSON.parse(step.result).language])).toEqual(
      documents.map((document) => [document.id, "detect-language", document.id.slice(0, 2)]),
    );
  });

  it("works on the one document a task names, with two tools", async () => {
    const tools = await loadLocalTools(["summarize", "sentiment", "detect-language", "word-stats"]);
    const rail = documents.find((document) => document.id === "en-rail-delays")!;
    const run = await createOrchestrator({ tools }).run("Word stats and the mood of en-rail-delays", {
      documents,
    });
    expect(run.steps.map((step) => ({ tool: step.tool, args: step.args, document: step.document }))).toEqual([
      { tool: "word-stats", args: { text: rail.text }, document: "en-rail-delays" },
      { tool: "sentiment", args: { text: rail.text }, document: "en-rail-delays" },
    ]);
    // 114 words as `wc -w` counts them; 7 sentences.
    expect(JSON.parse(run.steps[0]!.result)).toMatchObject({ words: 114, sentences: 7 });
    expect(JSON.parse(run.steps[1]!.result).label).toBe("negative");
  });

  it("resells: the brief capability buys from the summarizer and the sentiment tools it is given", async () => {
    const [summarize, sentiment] = await loadLocalTools(["summarize", "sentiment"]);
    const bought: string[] = [];
    const brief = capabilityTool(
      createBriefReseller({
        summarize: (input) => {
          bought.push("summarize");
          return summarize!.invoke(input);
        },
        sentiment: (input) => {
          bought.push("sentiment");
          return sentiment!.invoke(input);
        },
      }),
    );
    const run = await createOrchestrator({ tools: [brief] }).run(
      "A brief of each of en-harbour-market and en-rail-delays",
      { documents },
    );
    expect(run.steps.map((step) => [step.document, JSON.parse(step.result).mood])).toEqual([
      ["en-harbour-market", "positive"],
      ["en-rail-delays", "negative"],
    ]);
    // The two briefs run in parallel, so their purchases interleave; each buys one of each.
    expect([...bought].sort()).toEqual(["sentiment", "sentiment", "summarize", "summarize"]);
  });
});

describe("orchestrator with the on-chain notary", () => {
  let devnet: Devnet;
  beforeAll(async () => {
    devnet = await startDevnet({ accounts: 2, balance: 0n });
  });
  afterAll(async () => {
    await devnet?.stop();
  });

  it("notarizes each named document on chain, one transaction per document", async () => {
    const notarize = capabilityTool(
      createNotary({
        walletClient: devnet.walletClient(devnet.accounts[1]!),
        publicClient: devnet.publicClient,
      }),
    );
    const [summarize] = await loadLocalTools(["summarize"]);
    const ends: OrchestratorEvent[] = [];
    const run = await createOrchestrator({
      tools: [summarize!, notarize],
      onEvent: (event) => {
        if (event.type === "tool:end") ends.push(event);
      },
    }).run("Notarize each of fr-jardin and nl-molen", { documents });
    expect(run.steps.map((step) => [step.tool, step.document, step.error])).toEqual([
      ["notarize", "fr-jardin", undefined],
      ["notarize", "nl-molen", undefined],
    ]);
    expect(ends).toHaveLength(2);
    for (const step of run.steps) {
      const document = documents.find((candidate) => candidate.id === step.document)!;
      const { transactionHash } = JSON.parse(step.result) as { transactionHash: Hex };
      expect(
        await verifyNotarization(devnet.publicClient, {
          transactionHash,
          text: document.text,
          notary: devnet.accounts[1]!.address,
        }),
      ).toMatchObject({ valid: true });
    }
  });
});
