import { fileURLToPath } from "node:url";

/** This directory: Tollgate's bundled tool manifests, loadable by name with `loadTool(name, { dir: toolsDir })`. */
export const toolsDir = fileURLToPath(new URL(".", import.meta.url));
