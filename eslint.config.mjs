import nx from "@nx/eslint-plugin";
import tseslint from "typescript-eslint";
import prettier from "eslint-config-prettier";
import { createNodeResolver, importX } from "eslint-plugin-import-x";

// Layers of ARCHITECTURE.md: dependencies point down only.
const layers = [
  { sourceTag: "layer:config", onlyDependOnLibsWithTags: [] },
  { sourceTag: "layer:vm", onlyDependOnLibsWithTags: ["layer:config"] },
  { sourceTag: "layer:image", onlyDependOnLibsWithTags: ["layer:config"] },
  { sourceTag: "layer:service", onlyDependOnLibsWithTags: ["layer:vm", "layer:config"] },
  {
    sourceTag: "layer:controller",
    onlyDependOnLibsWithTags: ["layer:service", "layer:vm", "layer:image", "layer:config"],
  },
  { sourceTag: "layer:app", onlyDependOnLibsWithTags: ["layer:controller", "layer:config"] },
  { sourceTag: "layer:e2e", onlyDependOnLibsWithTags: ["*"] },
];

const bannedImports = (allowGondolin, allowPi) => {
  const paths = [];
  if (!allowGondolin) paths.push("@earendil-works/gondolin");
  const patterns = [];
  if (!allowGondolin)
    patterns.push({ group: ["@earendil-works/gondolin/*"], message: "Only packages/vm imports Gondolin." });
  if (!allowPi) patterns.push({ group: ["@earendil-works/pi-*"], message: "Only packages/pi-extension imports Pi." });
  return ["error", { paths: paths.map((name) => ({ name, message: "Only packages/vm imports Gondolin." })), patterns }];
};

// The controller's folders stand in a stack (CONTRIBUTING.md "Structure"): program entries on top
// (`index.ts`, `testing*.ts`, each folder's `main.ts`); `cli` over `client`; `client` and `daemon`
// side by side on the action contract (`actions`, with `actions/kit`), neither importing the
// other; under it `dashboard`, then `state`; the shared leaves (`src/*.ts`) at the bottom.
const controller = (path) => `packages/controller/src/${path}`;
const controllerFloors = [
  { target: controller("cli"), from: ["daemon"] },
  { target: controller("client"), from: ["cli", "daemon", "waker"] },
  { target: controller("daemon"), from: ["cli", "client", "dashboard", "waker"] },
  // The waker (one small process per state root holding parked instances' previews) stands on
  // `state` and the shared leaves only, beside the dashboard.
  { target: controller("waker"), from: ["cli", "client", "daemon", "actions", "dashboard"] },
  // `remote` (contexts: another machine over ssh) stands under `client`, which routes to it, and
  // over `actions` and `state`.
  { target: controller("remote"), from: ["cli", "client", "daemon", "dashboard", "waker"] },
  { target: controller("actions"), from: ["cli", "client", "daemon", "remote"] },
  { target: controller("dashboard/!(main).ts"), from: ["cli", "client", "daemon", "actions"] },
  { target: controller("state"), from: ["cli", "client", "daemon", "actions", "dashboard", "waker", "remote"] },
  {
    target: controller("!(index|testing|testing-runtime).ts"),
    from: ["cli", "client", "daemon", "actions", "dashboard", "state", "waker", "remote"],
  },
].map(({ target, from }) => ({
  target,
  from: from.map(controller),
  message: 'The controller\'s folders import only the floors below them (CONTRIBUTING.md "Structure").',
}));

// vm's folders stand in a stack too (CONTRIBUTING.md "Structure"): the entries on top (`index.ts`,
// `host.ts`, `testing.ts`), then `testing` (parts of the `./testing` entry), `boot`, `disk`; under disk
// `host`, `image`, `guest` and `egress` side by side, none importing another; the shared leaves
// (`src/*.ts`: errors, file names, fs and process helpers, the two Gondolin seams) at the bottom.
const vm = (path) => `packages/vm/src/${path}`;
const vmEntries = ["index.ts", "host.ts", "testing.ts"];
const vmFloors = [
  { target: vm("testing"), from: [] },
  { target: vm("boot"), from: ["testing"] },
  { target: vm("disk"), from: ["testing", "boot", "guest", "egress"] },
  { target: vm("host"), from: ["testing", "boot", "disk", "image", "guest", "egress"] },
  { target: vm("image"), from: ["testing", "boot", "disk", "host", "guest", "egress"] },
  { target: vm("guest"), from: ["testing", "boot", "disk", "host", "image", "egress"] },
  { target: vm("egress"), from: ["testing", "boot", "disk", "host", "image", "guest"] },
  {
    target: vm("!(index|host|testing).ts"),
    from: ["testing", "boot", "disk", "host", "image", "guest", "egress"],
  },
].map(({ target, from }) => ({
  target,
  from: [...from, ...vmEntries].map(vm),
  message: 'vm\'s folders import only the floors below them (CONTRIBUTING.md "Structure").',
}));

export default tseslint.config(
  { ignores: ["**/dist/**", "**/node_modules/**", "**/coverage/**", "**/.nx/**", "**/.work/**"] },
  ...tseslint.configs.recommended,
  prettier,
  {
    files: ["**/*.ts", "**/*.mts", "**/*.js", "**/*.mjs"],
    plugins: { "@nx": nx },
    rules: {
      "@nx/enforce-module-boundaries": ["error", { enforceBuildableLibDependency: false, depConstraints: layers }],
      "@typescript-eslint/no-unused-vars": ["error", { argsIgnorePattern: "^_", varsIgnorePattern: "^_" }],
      "no-restricted-imports": bannedImports(false, false),
    },
  },
  // No import cycles inside a package (CONTRIBUTING.md "Structure"); between packages the layers
  // above already forbid them. `.js` specifiers resolve to the `.ts` sources.
  {
    files: ["**/*.ts", "**/*.mts"],
    plugins: { "import-x": importX },
    settings: {
      "import-x/extensions": [".ts", ".mts", ".js", ".mjs"],
      "import-x/resolver-next": [createNodeResolver({ extensionAlias: { ".js": [".ts", ".js"] } })],
    },
    rules: { "import-x/no-cycle": ["error", { ignoreExternal: true }] },
  },
  {
    files: ["packages/controller/src/**/*.ts"],
    rules: { "import-x/no-restricted-paths": ["error", { basePath: import.meta.dirname, zones: controllerFloors }] },
  },
  {
    files: ["packages/vm/src/**/*.ts"],
    rules: { "import-x/no-restricted-paths": ["error", { basePath: import.meta.dirname, zones: vmFloors }] },
  },
  { files: ["packages/vm/**", "e2e/**"], rules: { "no-restricted-imports": bannedImports(true, false) } },
  { files: ["packages/pi-extension/**"], rules: { "no-restricted-imports": bannedImports(false, true) } },
  // review-setup refreshes the host's Pi login through Pi's SDK, in this one file only.
  { files: ["packages/review-setup/src/pi-login.ts"], rules: { "no-restricted-imports": bannedImports(false, true) } },
  // Its live provider table and shaped placeholders are checked against Pi's own providers.
  {
    files: ["packages/review-setup/test/providers.test.ts", "packages/review-setup/test/placeholder-shape.test.ts"],
    rules: { "no-restricted-imports": bannedImports(false, true) },
  },
  // The Pi extension review-setup installs in a guest's agent dir (--model-server) is written against Pi's types.
  { files: ["packages/review-setup/guest/*.ts"], rules: { "no-restricted-imports": bannedImports(false, true) } },
  {
    files: ["**/*.cjs"],
    languageOptions: { sourceType: "commonjs", globals: { module: "writable", require: "readonly" } },
    rules: { "@typescript-eslint/no-require-imports": "off" },
  },
);
