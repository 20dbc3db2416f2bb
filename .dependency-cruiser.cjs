/**
 * Module graph rules for src/ (`npm run deps`, also run by `npm run check`).
 *
 * No import circles. Type-only imports count too (`tsPreCompilationDeps: true`): they vanish at run
 * time, but a type that closes a circle still ties the two modules together — neither can be read,
 * tested or moved alone — and it usually sits in the wrong file (it belongs to the module that owns
 * the concept, which its users then import one way).
 * @type {import('dependency-cruiser').IConfiguration}
 */
module.exports = {
  forbidden: [
    {
      name: "no-circular",
      severity: "error",
      comment:
        "An import circle in src/: move the type or function that closes it to the module that owns it.",
      from: { path: "^src/" },
      to: { circular: true },
    },
  ],
  options: {
    doNotFollow: { path: "node_modules" },
    exclude: { path: "^src/chain/contracts/artifacts" },
    tsPreCompilationDeps: true,
    tsConfig: { fileName: "tsconfig.json" },
    enhancedResolveOptions: {
      exportsFields: ["exports"],
      conditionNames: ["import", "require", "node", "default", "types"],
      extensions: [".ts", ".js", ".json"],
    },
  },
};
