/**
 * The devnet of `tollgate up`: an anvil child of this process whose chain outlives it in
 * `<dir>/devnet-state.json` (anvil's own state dump with the contracts deployed on it). The first start
 * deploys Tollgate and funds the accounts as `tollgate devnet up` does; a later one loads the dump, so
 * the same contracts, balances and blocks come back. While it runs, `<dir>/devnet.json` describes it
 * with this process's id, so every other command finds it as it finds a `devnet up` chain.
 */
import { existsSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { z } from "zod";
import {
  type DevnetFile,
  DevnetFileSchema,
  describeDevnet,
  readDevnetFile,
  writeDevnetFile,
} from "../chain/devnetFile.ts";
import { startAnvil } from "../chain/startAnvil.ts";
import { connectDevnet, setUpDevnet } from "../chain/startDevnet.ts";
import { ensurePrivateDir, tightenPrivateFile, writePrivateFile } from "../store/privateFiles.ts";

/** Dev accounts, as `tollgate devnet up` funds them by default: 10 with 10 000 USDC each. */
const ACCOUNTS = 10;
const BALANCE = 10_000_000_000n;

const SAVE_EVERY_MS = 60_000;

const HexSchema = z.string().regex(/^0x[0-9a-fA-F]*$/);

/** `<dir>/devnet-state.json`: the chain as last saved, and what is deployed on it. */
const SavedDevnetSchema = z.object({
  version: z.literal(1),
  devnet: DevnetFileSchema,
  /** `anvil_dumpState`: every account, its code, storage and balance, and the blocks. */
  state: HexSchema,
});

export type UpDevnet = {
  description: DevnetFile;
  /** True when the chain was loaded from an earlier start rather than deployed now. */
  restored: boolean;
  /** Writes the chain's current state to the data directory. */
  save(): Promise<void>;
  /** Saves, stops anvil and removes `devnet.json`; idempotent. */
  stop(): Promise<void>;
};

/** Thrown before anything starts when another process already serves the data directory's devnet. */
export class DevnetRunningError extends Error {}

/** Starts the devnet on `port`, from `<dir>/devnet-state.json` when an earlier start left one. */
export async function startUpDevnet(dir: string, port: number): Promise<UpDevnet> {
  ensurePrivateDir(dir);
  claimDevnetFile(dir);
  const stateFile = join(dir, "devnet-state.json");
  const saved = readSavedDevnet(stateFile);
  // In its own process group, so that the terminal's Ctrl-C reaches this process only, which saves the
  // chain before it stops anvil; killed with this process if it ends some other way.
  const anvil = await startAnvil({
    port,
    accounts: saved?.devnet.accounts.length ?? ACCOUNTS,
    detachedLogFile: join(dir, "anvil.log"),
  });
  const killOnExit = () => {
    try {
      process.kill(anvil.pid, "SIGKILL");
    } catch {
      // Already gone.
    }
  };
  process.once("exit", killOnExit);
  try {
    // anvil's own pid, as `tollgate devnet up` writes it: should this process die without stopping it,
    // the next start names the anvil left behind, and `tollgate devnet down` stops it.
    const devnet =
      saved === undefined
        ? describeDevnet(await setUpDevnet(anvil.rpcUrl, ACCOUNTS, BALANCE, () => anvil.stop()), anvil.pid)
        : { ...saved.devnet, rpcUrl: anvil.rpcUrl, pid: anvil.pid };
    const rpc = connectDevnet(anvil.rpcUrl, devnet.accounts.length, () => anvil.stop());
    if (saved !== undefined) await restoreState(rpc, saved.state);
    const save = async () => {
      const state = await rpc.publicClient.request({ method: "anvil_dumpState" } as never);
      const record = { version: 1 as const, devnet, state: HexSchema.parse(state) };
      writePrivateFile(stateFile, `${JSON.stringify(record)}\n`);
    };
    // Saved at once: a first start that is killed rather than stopped still keeps its deployment.
    if (saved === undefined) await save();
    writeDevnetFile(join(dir, "devnet.json"), devnet);
    // Saved now and then too, so that a process killed outright loses a minute of chain at most.
    const saving = setInterval(() => save().catch(() => {}), SAVE_EVERY_MS);
    saving.unref();
    let stopping: Promise<void> | undefined;
    const stop = () => {
      clearInterval(saving);
      stopping ??= save()
        .finally(() => stopDetached(anvil))
        .finally(() => {
          process.off("exit", killOnExit);
          rmSync(join(dir, "devnet.json"), { force: true });
        });
      return stopping;
    };
    return { description: devnet, restored: saved !== undefined, save, stop };
  } catch (error) {
    process.off("exit", killOnExit);
    await stopDetached(anvil);
    throw error;
  }
}

/** Refuses a devnet another live process serves from `dir`; forgets one whose process is gone. */
function claimDevnetFile(dir: string): void {
  const running = readDevnetFile(dir);
  if (running === undefined) return;
  if (isAlive(running.pid)) {
    throw new DevnetRunningError(
      `a devnet of ${dir} is already running at ${running.rpcUrl} (pid ${running.pid}): ` +
        `stop it first (Ctrl-C where it runs, or \`tollgate devnet down --dir ${dir}\`)`,
    );
  }
  // Its process died without cleaning up: other commands would reach whatever listens there now.
  rmSync(join(dir, "devnet.json"), { force: true });
}

function readSavedDevnet(file: string): z.infer<typeof SavedDevnetSchema> | undefined {
  if (!existsSync(file)) return undefined;
  tightenPrivateFile(file);
  const parsed = SavedDevnetSchema.safeParse(JSON.parse(readFileSync(file, "utf8")));
  if (!parsed.success) throw new Error(`${file} is not a saved devnet: move it away to start a fresh chain`);
  return parsed.data;
}

/**
 * Loads the dump into the fresh anvil. Its blocks come back with their timestamps; when the chain had
 * been moved ahead of the wall clock (`tollgate devnet advance`), its clock is moved as far again, so
 * that new blocks never go back in time.
 */
async function restoreState(rpc: ReturnType<typeof connectDevnet>, state: string): Promise<void> {
  await rpc.publicClient.request({ method: "anvil_loadState", params: [state] } as never);
  const latest = await rpc.publicClient.getBlock({ blockTag: "latest" });
  const ahead = Number(latest.timestamp) - Math.floor(Date.now() / 1000);
  if (ahead >= 0) await rpc.testClient.increaseTime({ seconds: ahead + 1 });
}

/**
 * Stops the detached anvil and waits for it to exit. The child is unreferenced (it may outlive this
 * process), so without a timer of its own the event loop could end while waiting for its exit.
 */
async function stopDetached(anvil: { stop(): Promise<void> }): Promise<void> {
  const keepAlive = setInterval(() => {}, 1_000);
  try {
    await anvil.stop();
  } finally {
    clearInterval(keepAlive);
  }
}

function isAlive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}
