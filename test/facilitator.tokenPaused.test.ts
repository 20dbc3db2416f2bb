/**
 * USDC paused by its pauser (FiatToken v2.2's `pause()`), on a devnet running Circle's code: the
 * facilitator holds what it accepted, sends no transaction meanwhile, refuses new payments with
 * `TokenPaused`, says so (/healthz, metric, event), and settles everything exactly once by itself after
 * the unpause. The pause lands between a batch's signing and its broadcast, so the batch's item is
 * refused on chain "Pausable: paused" — and is held, not failed.
 */
import type { Address } from "viem";
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { getTokenBalance } from "../src/chain/actions/usd/getTokenBalance.ts";
import { pauseToken } from "../src/chain/actions/usdc/pauseToken.ts";
import { unpauseToken } from "../src/chain/actions/usdc/unpauseToken.ts";
import { type Devnet, startDevnet } from "../src/chain/startDevnet.ts";
import { PaymentProofSchema } from "../src/protocol/paymentProof.ts";
import type { SignedPayment } from "../src/protocol/signedPayment.ts";
import { signTestPayment, startTestFacilitator, type TestFacilitator } from "./support/facilitatorHarness.ts";

const amount = 250_000n;

describe("facilitator while USDC is paused", () => {
  let devnet: Devnet;
  let tf: TestFacilitator;
  /** Holds the first batch between its signing and its broadcast, until the test lets it go. */
  let releaseFirst: () => void = () => undefined;
  let firstSigned: Promise<void>;

  beforeAll(async () => {
    devnet = await startDevnet({ token: "usdc", accounts: 4 });
    const held = new Promise<void>((resolve) => {
      releaseFirst = resolve;
    });
    let reached: () => void = () => undefined;
    firstSigned = new Promise<void>((resolve) => {
      reached = resolve;
    });
    let first = true;
    tf = await startTestFacilitator(devnet, {
      settlement: {
        // Payments that arrive while the first batch is in flight wait for each other, not for a timer.
        lingerMs: 600_000,
        authorizeTimeoutMs: 600_000,
        faults: {
          async afterRecord() {
            if (!first) return;
            first = false;
            reached();
            await held;
          },
        },
      },
      tokenPause: { intervalMs: 100 },
    });
  }, 60_000);
  afterAll(async () => {
    releaseFirst();
    await tf?.stop();
    await devnet?.stop();
  });

  const gas = () => devnet.accounts[devnet.accounts.length - 1]!.address;
  const nonceOfGasKey = () => devnet.publicClient.getTransactionCount({ address: gas() });
  const balanceOf = (owner: Address) =>
    getTokenBalance(devnet.publicClient, { token: devnet.contracts.usd, owner });
  const rows = (status: string) =>
    tf.store.query<{ nonce: string; attempts: number }>(
      "SELECT nonce, attempts FROM payments WHERE status = $1 ORDER BY id",
      [status],
    );
  const events = (type: string) =>
    tf.store.query<{ data: Record<string, unknown> }>("SELECT data FROM events WHERE type = $1", [type]);
  const authorizeOverHttp = (signedPayment: SignedPayment) =>
    fetch(`${tf.url}/authorize`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ signedPayment }),
    });
  const pausedGauge = async () => {
    const text = await (await fetch(`${tf.url}/metrics`)).text();
    const line = text
      .split("\n")
      .find(
        (l) =>
          l.startsWith("tollgate_token_paused{") &&
          l.toLowerCase().includes(devnet.contracts.usd.toLowerCase()),
      );
    return line?.split(" ").at(-1);
  };

  it("holds payments accepted before the pause, sends nothing while paused, and settles each once after the unpause", async () => {
    const [, payer, payee] = devnet.accounts;
    const token = devnet.contracts.usd;
    const payerBefore = await balanceOf(payer!.address);
    const payeeBefore = await balanceOf(payee!.address);
    const sign = () => signTestPayment(devnet, payer!, { payTo: payee!.address, amount });

    // The first payment's batch is signed and waits to be broadcast; two more join the queue meanwhile.
    const payments = [await sign(), await sign(), await sign()];
    const first = tf.facilitator.engine.authorize(payments[0]!);
    await firstSigned;
    const later = payments.slice(1).map((p) => tf.facilitator.engine.authorize(p));
    await vi.waitFor(async () => expect(await rows("pending")).toHaveLength(2), { timeout: 10_000 });

    // The pauser pauses USDC before the batch reaches the chain.
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await pauseToken(devnet.walletClient(devnet.deployer), { token }),
    });
    const signedNonce = await nonceOfGasKey();
    releaseFirst();

    // The batch is mined and its item refused "Pausable: paused": held in the queue, no attempt counted.
    await vi.waitFor(
      async () => {
        expect(await rows("submitted")).toHaveLength(0);
        expect(await rows("pending")).toHaveLength(3);
      },
      { timeout: 10_000 },
    );
    // The first batch, and at most one more built from the two waiting payments before any refusal
    // came back (nothing can know of the pause before then); once the refusal names the pause, nothing.
    const heldNonce = await nonceOfGasKey();
    expect(heldNonce - signedNonce).toBeGreaterThanOrEqual(1);
    expect(heldNonce - signedNonce).toBeLessThanOrEqual(2);
    expect(await rows("failed")).toEqual([]);
    expect((await rows("pending")).map((r) => r.attempts)).toEqual([0, 0, 0]);

    // It says so: health, metric, one event.
    await tf.facilitator.context.tokenPause?.check();
    const health = await fetch(`${tf.url}/healthz`);
    expect(health.status).toBe(200);
    const body = (await health.json()) as {
      status: string;
      checks: Record<string, { ok: boolean; message?: string; since?: string }>;
    };
    expect(body.status).toBe("degraded");
    expect(body.checks.token).toMatchObject({ ok: false });
    expect(body.checks.token?.message).toContain(token);
    expect(Number.isNaN(Date.parse(body.checks.token?.since ?? ""))).toBe(false);
    expect(await pausedGauge()).toBe("1");
    const pausedEvents = await events("token.paused");
    expect(pausedEvents).toHaveLength(1);
    expect(String(pausedEvents[0]!.data.token).toLowerCase()).toBe(token.toLowerCase());

    // A new payment is refused at once, with a code the payer can act on; nothing is queued for it.
    const refused = await authorizeOverHttp(await sign());
    expect(refused.status).toBe(503);
    expect(refused.headers.get("retry-after")).not.toBeNull();
    expect(((await refused.json()) as { error: { code: string } }).error.code).toBe("TokenPaused");
    expect(await rows("pending")).toHaveLength(3);

    // The watch reads paused() again and again, the engine looks at its queue: still no transaction.
    await tf.facilitator.context.tokenPause?.check();
    await devnet.mine(3);
    await tf.facilitator.context.tokenPause?.check();
    expect(await nonceOfGasKey()).toBe(heldNonce);
    expect(await balanceOf(payee!.address)).toBe(payeeBefore);

    // The pauser unpauses: the facilitator notices by itself and settles the three, once each.
    await devnet.publicClient.waitForTransactionReceipt({
      hash: await unpauseToken(devnet.walletClient(devnet.deployer), { token }),
    });
    const settled = await Promise.all([first, ...later]);
    for (const s of settled) expect(PaymentProofSchema.safeParse(s.proof).success).toBe(true);
    expect(await balanceOf(payee!.address)).toBe(payeeBefore + 3n * amount);
    expect(await balanceOf(payer!.address)).toBe(payerBefore - 3n * amount);
    expect(await rows("settled")).toHaveLength(3);
    expect(await rows("failed")).toEqual([]);

    // Asking again returns the same settlement and sends nothing.
    const nonceAfter = await nonceOfGasKey();
    const again = await tf.facilitator.engine.authorize(payments[0]!);
    expect(again.row.tx_hash).toBe(settled[0]!.row.tx_hash);
    expect(await nonceOfGasKey()).toBe(nonceAfter);
    expect(await balanceOf(payee!.address)).toBe(payeeBefore + 3n * amount);

    const unpaused = await events("token.unpaused");
    expect(unpaused).toHaveLength(1);
    expect(unpaused[0]!.data.pausedSince).toBe(pausedEvents[0]!.data.since);
    expect(await pausedGauge()).toBe("0");
    const healthy = (await (await fetch(`${tf.url}/healthz`)).json()) as { status: string };
    expect(healthy.status).toBe("ok");
  }, 60_000);
});
