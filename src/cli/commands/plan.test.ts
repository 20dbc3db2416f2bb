import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { getIsOperator } from "../../chain/actions/subscriptions/getIsOperator.ts";
import { getPlan } from "../../chain/actions/subscriptions/getPlan.ts";
import { type DevnetFile, describeDevnet } from "../../chain/devnetFile.ts";
import { type Devnet, startDevnet } from "../../chain/startDevnet.ts";
import { planCommand } from "./plan.ts";

let devnet: Devnet;
let cwd: string;

beforeAll(async () => {
  devnet = await startDevnet({ accounts: 3 });
  cwd = mkdtempSync(join(tmpdir(), "tollgate-plan-"));
  const file: DevnetFile = describeDevnet(devnet);
  writeFileSync(join(cwd, "devnet.json"), JSON.stringify(file));
});

afterAll(async () => {
  await devnet?.stop();
  if (cwd !== undefined) rmSync(cwd, { recursive: true, force: true });
});

async function plan(...argv: string[]) {
  const lines: string[] = [];
  const errors: string[] = [];
  const code = await planCommand([...argv, "--dir", cwd], {
    env: {},
    out: { log: (line) => lines.push(line), error: (line) => errors.push(line) },
  });
  return { code, lines, errors, json: () => JSON.parse(lines.join("\n")) as Record<string, unknown> };
}

describe("tollgate plan", () => {
  it("creates a plan from USDC text converted exactly, paid to the chosen devnet account", async () => {
    const created = await plan(
      "create",
      "--amount",
      "9",
      "--interval",
      "30d",
      "--included",
      "1000",
      "--overage",
      "0.001",
      "--account",
      "1",
      "--json",
    );
    expect(created.errors).toEqual([]);
    expect(created.code).toBe(0);
    const body = created.json();
    expect(body).toMatchObject({
      amount: "9000000",
      interval: 2_592_000,
      includedUnits: "1000",
      overageUnitPrice: "1000",
      provider: devnet.accounts[1]!.address,
      deprecated: false,
    });
    const onChain = await getPlan(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      planId: BigInt(String(body.planId)),
    });
    expect(onChain.amount).toBe(9_000_000n);
    expect(onChain.overageUnitPrice).toBe(1_000n);

    const shown = await plan("show", String(body.planId));
    expect(shown.lines[0]).toBe(
      `plan ${body.planId}: 9 USDC every 30d, paid to ${devnet.accounts[1]!.address}`,
    );
    expect(shown.lines).toContain("  overage: 0.001 USDC per unit");
  });

  it("deprecates a plan naming its successor", async () => {
    const a = (await plan("create", "--amount", "1", "--interval", "7d", "--account", "1", "--json")).json();
    const b = (await plan("create", "--amount", "2", "--interval", "7d", "--account", "1", "--json")).json();
    const result = await plan(
      "deprecate",
      String(a.planId),
      "--successor",
      String(b.planId),
      "--account",
      "1",
    );
    expect(result.code).toBe(0);
    const onChain = await getPlan(devnet.publicClient, {
      manager: devnet.contracts.subscriptionManager,
      planId: BigInt(String(a.planId)),
    });
    expect(onChain.deprecated).toBe(true);
    expect(onChain.successorPlanId).toBe(BigInt(String(b.planId)));
    expect((await plan("show", String(a.planId))).lines).toContain(
      `  deprecated; successor plan ${b.planId}`,
    );
  });

  it("names a facilitator as operator and revokes it", async () => {
    const facilitator = devnet.accounts[2]!.address;
    expect((await plan("operator", facilitator, "--account", "1")).code).toBe(0);
    const params = {
      manager: devnet.contracts.subscriptionManager,
      provider: devnet.accounts[1]!.address,
      operator: facilitator,
    };
    expect(await getIsOperator(devnet.publicClient, params)).toBe(true);
    expect((await plan("operator", facilitator, "--revoke", "--account", "1")).code).toBe(0);
    expect(await getIsOperator(devnet.publicClient, params)).toBe(false);
  });

  it("refuses inexact amounts, missing keys and unknown plans", async () => {
    await expect(
      plan("create", "--amount", "0.0000001", "--interval", "30d", "--account", "1"),
    ).rejects.toMatchObject({
      code: "InvalidAmount",
    });
    await expect(plan("create", "--amount", "1", "--interval", "30d")).rejects.toMatchObject({
      code: "InvalidRequest",
    });
    await expect(plan("show", "424242")).rejects.toMatchObject({ code: "NotFound" });
    expect((await plan("create", "--amount", "1")).code).toBe(2);
    expect((await plan("explode")).code).toBe(2);
  });
});
