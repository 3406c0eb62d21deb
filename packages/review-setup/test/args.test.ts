// `sandbox:setup`'s command line: every option parsed, --help first, each mistake a
// REVIEW_SETUP_USAGE error with a hint, help on stdout and usage errors on stderr with exit 2.
import { DEFAULT_PI_COMMAND, parseCommandLine, parseModel, USAGE } from "../src/args.js";
import { ReviewSetupError } from "../src/errors.js";
import { main } from "../src/main.js";

test("parses every option", () => {
  expect(
    parseCommandLine([
      "--name",
      "review",
      "--config",
      "sandbox.yaml",
      "--live-model",
      "openai-codex/gpt-5.4",
      "--repo",
      "/src/x",
      "--pi-command",
      "node launch.js",
      "--scope",
      "pi",
    ]),
  ).toEqual({
    help: false,
    name: "review",
    config: "sandbox.yaml",
    liveModel: { provider: "openai-codex", model: "gpt-5.4" },
    repo: "/src/x",
    piCommand: "node launch.js",
    scope: "pi",
  });
});

test("defaults: no config, offline, the real Pi launch program", () => {
  expect(parseCommandLine(["--name=review"])).toEqual({ help: false, name: "review", piCommand: DEFAULT_PI_COMMAND });
});

test("--help wins and needs no name", () => {
  expect(parseCommandLine(["-h"])).toEqual({ help: true });
  expect(parseCommandLine(["--name", "x", "--help"])).toEqual({ help: true });
});

test.each([
  [[], "--name <instance> is required"],
  [["--name", "x", "--bogus"], "Unknown option '--bogus'"],
  [["--name", "x", "--scope", "some"], '--scope must be full or pi; got "some"'],
  [["--name", "x", "extra"], "positional"],
  [["--name"], "argument missing"],
  [["--name", "x", "--live-model", "gpt-5"], "is not provider/model"],
  [["--name", "x", "--live-model", "/gpt"], "is not provider/model"],
  [["--name", "x", "--live-model", "openai/"], "is not provider/model"],
  [["--name", "x", "--pi-command", " "], "must not be empty"],
])("rejects %j with REVIEW_SETUP_USAGE", (argv, message) => {
  let caught: unknown;
  try {
    parseCommandLine(argv);
  } catch (error) {
    caught = error;
  }
  expect(caught).toBeInstanceOf(ReviewSetupError);
  expect(caught).toMatchObject({ code: "REVIEW_SETUP_USAGE" });
  expect((caught as Error).message).toContain(message);
  expect((caught as ReviewSetupError).hint).toBeTruthy();
});

test("model ids may contain slashes; the provider is before the first", () => {
  expect(parseModel("openrouter/anthropic/claude")).toEqual({ provider: "openrouter", model: "anthropic/claude" });
});

test("the CLI prints help on stdout and usage errors on stderr with exit 2", async () => {
  const out: string[] = [];
  const err: string[] = [];
  const io = { stdout: (t: string) => out.push(t), stderr: (t: string) => err.push(t), env: {}, cwd: "/" };
  expect(await main(["--help"], io)).toBe(0);
  expect(out.join("")).toBe(USAGE);
  expect(USAGE).toContain("--live-model <provider/model>");
  expect(await main(["--config", "x.yaml"], io)).toBe(2);
  expect(err.join("")).toContain("error REVIEW_SETUP_USAGE: --name <instance> is required");
  expect(err.join("")).toContain("hint: Example: bun run sandbox:setup --name review");
});
