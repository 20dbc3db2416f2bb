/**
 * Module graph rules for src/ (`npm run deps`, also run by `npm run check`): the layers of
 * docs/architecture.md ("The layers"), checked so they cannot drift.
 *
 * Order, lowest first: protocol → store → chain → http → the scheme seam (src/schemes/*.ts) →
 * gate, client → facilitator → market → agent → cli. A layer imports only layers before it, and
 * the scheme folders (src/schemes/<id>/) plug into the cores: a scheme's gate side builds on the
 * gate core, its client side on the client core, its facilitator side on the facilitator core, its
 * agent side on the agent core. The cores name no scheme: only the composition roots (each side's
 * list of built-ins, the entry points' index.ts, the CLI) import scheme folders.
 *
 * Tests are exempt from the layer rules (a test wires whatever it checks), not from the circle rule.
 * Type-only imports count (`tsPreCompilationDeps: true`): a type that closes a circle or crosses a
 * layer still ties the two modules together, and usually sits in the wrong file.
 * @type {import('dependency-cruiser').IConfiguration}
 */

/** Files that may import scheme folders: each side's list of built-ins, entry points, the CLI. */
const ROOTS =
  "^src/(gate/gateSchemes|client/clientSchemes|facilitator/facilitatorSchemes|facilitator/subscriptionsModule|agent/agentSchemes|schemes/builtinSchemes)\\.ts$|/index\\.ts$|^src/cli/";
const TESTS = "\\.test\\.ts$";

/** A layer rule: files matching `from` (tests and `except` aside) import nothing matching `notTo`. */
function layer(name, comment, from, notTo, except) {
  return {
    name,
    severity: "error",
    comment,
    from: { path: from, pathNot: except === undefined ? TESTS : `${TESTS}|${except}` },
    to: { path: notTo },
  };
}

/** An entry point that must not load (even through other modules) what `notTo` matches. */
function neverLoads(name, comment, entry, notTo) {
  return { name, severity: "error", comment, from: { path: entry }, to: { path: notTo, reachable: true } };
}

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
    layer(
      "protocol-alone",
      "protocol/ is the wire: it imports no other layer.",
      "^src/protocol/",
      "^src/(?!protocol/)",
    ),
    layer("store-layer", "store/ builds on the protocol only.", "^src/store/", "^src/(?!protocol/|store/)"),
    layer(
      "chain-layer",
      "chain/ builds on the protocol and the store.",
      "^src/chain/",
      "^src/(?!protocol/|store/|chain/)",
    ),
    layer(
      "http-layer",
      "http/ (the HTTP core) builds on the protocol and the store.",
      "^src/http/",
      "^src/(?!protocol/|store/|http/)",
    ),
    layer(
      "seam-layer",
      "The scheme seam (src/schemes/*.ts) builds on the layers below it, never on a core or a scheme.",
      "^src/schemes/[^/]+\\.ts$",
      "^src/(?!protocol/|store/|chain/|http/|schemes/[^/]+\\.ts$)",
      ROOTS,
    ),
    layer(
      "core-names-no-scheme",
      "A core imports no scheme folder; register a scheme in a side's list of built-ins instead.",
      "^src/(protocol|store|chain|http|gate|client|facilitator|market|agent)/",
      "^src/schemes/[^/]+/",
      ROOTS,
    ),
    layer(
      "gate-core",
      "The gate core loads no payer, facilitator, market or agent code.",
      "^src/gate/",
      "^src/(client|facilitator|market|agent|cli)/",
    ),
    layer(
      "client-core",
      "The payer loads no gate, facilitator, market or agent code.",
      "^src/client/",
      "^src/(gate|facilitator|market|agent|cli)/",
    ),
    layer(
      "facilitator-core",
      "The settlement service loads no market, agent or CLI code.",
      "^src/facilitator/",
      "^src/(market|agent|cli)/",
    ),
    layer(
      "market-layer",
      "The market loads no gate, facilitator, agent or CLI code.",
      "^src/market/",
      "^src/(gate|facilitator|agent|cli)/",
    ),
    layer(
      "agent-layer",
      "The agent builds on the gate, the payer and the market; of the facilitator only the dashboard's section types (schemeDashboard.ts), which its operator views implement.",
      "^src/agent/",
      "^src/(cli/|facilitator/(?!dashboard/schemeDashboard\\.ts$))",
    ),
    layer(
      "scheme-client-side",
      "A scheme's client side loads no gate or facilitator code: a payer never does.",
      "^src/schemes/[^/]+/client",
      "^src/(gate|facilitator|market|agent|cli)/|^src/schemes/[^/]+/(gate|facilitator|agent)",
    ),
    layer(
      "scheme-gate-side",
      "A scheme's gate side builds on the gate core (and its scheme's client side for shared calls).",
      "^src/schemes/[^/]+/gate",
      "^src/(client|facilitator|market|agent|cli)/|^src/schemes/[^/]+/(facilitator|agent)",
    ),
    layer(
      "scheme-facilitator-side",
      "A scheme's facilitator side builds on the facilitator core.",
      "^src/schemes/[^/]+/facilitator",
      "^src/(gate|client|market|agent|cli)/|^src/schemes/[^/]+/(gate|client|agent)",
    ),
    layer(
      "scheme-agent-side",
      "A scheme's agent side builds on the agent core and its scheme's client side.",
      "^src/schemes/[^/]+/agent",
      "^src/(facilitator|market|cli)/|^src/schemes/[^/]+/facilitator",
    ),
    {
      name: "scheme-alone",
      severity: "error",
      comment:
        "A scheme imports only its own folder (the variants below aside): core types, viem and itself.",
      from: { path: "^src/schemes/(?!x402Exact/|metered/)([^/]+)/", pathNot: TESTS },
      to: { path: "^src/schemes/[^/]+/", pathNot: "^src/schemes/$1/" },
    },
    layer(
      "x402Exact-on-exact",
      "x402Exact pays exact's offers and builds on exact's folder, no other scheme's.",
      "^src/schemes/x402Exact/",
      "^src/schemes/(?!x402Exact/|exact/)[^/]+/",
    ),
    layer(
      "metered-on-subscription",
      "metered is a subscription plan priced by units: it builds on subscription's folder, no other scheme's.",
      "^src/schemes/metered/",
      "^src/schemes/(?!metered/|subscription/)[^/]+/",
    ),
    neverLoads(
      "payer-loads-no-gate",
      "tollgate/client never loads gate or facilitator code.",
      "^src/client/index\\.ts$",
      "^src/(gate|facilitator)/|^src/schemes/[^/]+/(gate|facilitator)",
    ),
    neverLoads(
      "market-loads-no-facilitator",
      "tollgate/market never loads the facilitator.",
      "^src/market/index\\.ts$",
      "^src/facilitator/|^src/schemes/[^/]+/facilitator",
    ),
    neverLoads(
      "facilitator-loads-no-agent",
      "tollgate/facilitator never loads agent code.",
      "^src/facilitator/index\\.ts$",
      "^src/agent/|^src/schemes/[^/]+/agent",
    ),
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
