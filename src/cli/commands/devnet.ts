import { devnetCommand } from "../devnet.ts";

export const summary =
  "up | advance <30d|12h|seconds> | status | down — a local chain with Tollgate deployed";

export function run(argv: string[]): Promise<number> {
  return devnetCommand(argv);
}
