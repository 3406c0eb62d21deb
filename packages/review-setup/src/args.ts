// The `sandbox:setup` command line: its options, usage and parsing.
import { parseArgs } from "node:util";
import { ReviewSetupError } from "./errors.js";
import { parseModelServer, parseModelServerKey, type ModelServer } from "./model-server.js";
import { INSTALL_SCOPES, type InstallScope } from "./scope.js";

/** Default program part of the launch command: this checkout's Pi with the sandbox extension. */
export const DEFAULT_PI_COMMAND = "node_modules/.bin/pi -e ./packages/pi-extension";

/** What `sandbox:setup` was asked to do. */
export interface ReviewSetupArgs {
  /** Instance name. */
  name: string;
  /** Host path of a sandbox.yaml: create the instance from it first. */
  config?: string;
  /** `provider/model` for the live check; omitted = offline snapshot. */
  liveModel?: { provider: string; model: string };
  /** A model server on the host for the guest's Pi (`--model-server`); excludes `liveModel`. */
  modelServer?: ModelServer;
  /** A directory inside the checkout to snapshot; default the cwd. */
  repo?: string;
  /** Program part of the printed launch command, run from the candidate directory. */
  piCommand: string;
  /** What install and build cover; omitted = `full`. */
  scope?: InstallScope;
  /**
   * `--live-model` on an instance that lacks the provider's secret: restart it (suspend and
   * resume) after declaring the secret without asking.
   */
  restart?: boolean;
}

/** The parsed command line: help, the Pi version check (`--check-pi`), or a run. */
export type ParsedCommandLine =
  | { help: true }
  | { help: false; checkPi: true; repo?: string }
  | ({ help: false; checkPi?: undefined } & ReviewSetupArgs);

/** Text of `--help`. */
export const USAGE = `Usage: bun run sandbox:setup --name <instance> [options]

Refreshes a disposable review candidate of this checkout inside a pi-sandbox instance:
snapshot tracked files (edits and deletions, no untracked files) -> transfer -> verify sha256 ->
unpack -> npm ci -> npm run build -> switch <workspace>/.review/current. A failed step leaves the
previous candidate current. Services are not restarted.

Options:
  --name <instance>              instance to refresh (required)
  --config <sandbox.yaml>        create the instance from this file first
                                 (see packages/review-setup/sandbox.review.yaml)
  --live-model <provider/model>  use that provider's credential from the host's Pi login, kept on
                                 the host (a network.secrets entry the instance got at --config;
                                 the guest holds only a placeholder), and require one real
                                 generated response; without it the run is an offline snapshot
  --model-server <url>           run the guest's Pi on this host's OpenAI-compatible model server
                                 (oMLX, llama.cpp, Ollama, LM Studio), e.g. http://127.0.0.1:8000:
                                 adds its port to the instance's network.hostPorts (with --config),
                                 writes a "local" provider seeded from GET <url>/v1/models and an
                                 extension that refreshes that list; not with --live-model
  --model-server-key <env:VAR|file:PATH>
                                 the server's API key, read on the host (as network.secrets
                                 MODEL_SERVER_KEY for host.sandbox.internal:<port>, with --config):
                                 the guest holds a placeholder in $MODEL_SERVER_KEY, which the host
                                 replaces by the key in requests to that port; never the key itself
  --repo <dir>                   checkout to snapshot (default: the one containing the cwd)
  --pi-command <command>         program part of the launch command
                                 (default: ${DEFAULT_PI_COMMAND})
  --scope <full|pi>              full (default): npm ci and npm run build of the whole workspace;
                                 pi: only what the launch command loads (npm ci --workspace
                                 @pi-sandbox/pi-extension, then the builds of the workspaces it
                                 depends on, in order): far less work on a slow guest
  --restart                      with --live-model on an instance made without --config: after
                                 adding the provider's secret to it, suspend and resume it (its
                                 processes keep running) without asking; without it, a terminal
                                 is asked and anything else stops with REVIEW_SETUP_RESTART_NEEDED
  --check-pi                     only check whether the Pi the guest gets (the version
                                 package-lock.json pins) is the newest on the npm registry: exit 0
                                 current, 1 an update exists, 2 could not check (offline); no --name
  -h, --help                     this text
`;

/** Parses `sandbox:setup` arguments; throws REVIEW_SETUP_USAGE with the fix. */
export function parseCommandLine(argv: readonly string[]): ParsedCommandLine {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      strict: true,
      allowPositionals: false,
      options: {
        name: { type: "string" },
        config: { type: "string" },
        "live-model": { type: "string" },
        "model-server": { type: "string" },
        "model-server-key": { type: "string" },
        repo: { type: "string" },
        "pi-command": { type: "string" },
        scope: { type: "string" },
        restart: { type: "boolean" },
        "check-pi": { type: "boolean" },
        help: { type: "boolean", short: "h" },
      },
    });
  } catch (error) {
    throw new ReviewSetupError("REVIEW_SETUP_USAGE", (error as Error).message, {
      hint: "Run with --help to see the options.",
      cause: error,
    });
  }
  const values = parsed.values;
  if (values.help) return { help: true };
  if (values["check-pi"]) return { help: false, checkPi: true, ...(values.repo ? { repo: values.repo } : {}) };
  if (!values.name) {
    throw new ReviewSetupError("REVIEW_SETUP_USAGE", "--name <instance> is required", {
      hint: "Example: bun run sandbox:setup --name review --config sandbox.yaml",
    });
  }
  const result: ParsedCommandLine = {
    help: false,
    name: values.name,
    piCommand: values["pi-command"] ?? DEFAULT_PI_COMMAND,
  };
  if (values.config !== undefined) result.config = values.config;
  if (values.restart) result.restart = true;
  if (values.repo !== undefined) result.repo = values.repo;
  if (values["live-model"] !== undefined) result.liveModel = parseModel(values["live-model"]);
  if (values["model-server"] !== undefined) {
    if (result.liveModel) {
      throw new ReviewSetupError("REVIEW_SETUP_USAGE", "--live-model and --model-server exclude each other", {
        hint: "Pick the cloud login (--live-model provider/model) or the host's model server (--model-server <url>).",
      });
    }
    result.modelServer = parseModelServer(values["model-server"]);
    if (values["model-server-key"] !== undefined)
      result.modelServer.key = parseModelServerKey(values["model-server-key"]);
  } else if (values["model-server-key"] !== undefined) {
    throw new ReviewSetupError("REVIEW_SETUP_USAGE", "--model-server-key needs --model-server", {
      hint: "Example: --model-server http://127.0.0.1:8000 --model-server-key env:OMLX_API_KEY",
    });
  }
  if (values.scope !== undefined) {
    if (!(INSTALL_SCOPES as readonly string[]).includes(values.scope)) {
      throw new ReviewSetupError(
        "REVIEW_SETUP_USAGE",
        `--scope must be ${INSTALL_SCOPES.join(" or ")}; got "${values.scope}"`,
        {
          hint: "Run with --help to see what each scope installs and builds.",
        },
      );
    }
    result.scope = values.scope as InstallScope;
  }
  if (result.piCommand.trim() === "") {
    throw new ReviewSetupError("REVIEW_SETUP_USAGE", "--pi-command must not be empty", {
      hint: `Omit it for the default (${DEFAULT_PI_COMMAND}).`,
    });
  }
  return result;
}

/** Splits `provider/model` at the first slash (model ids may contain slashes). */
export function parseModel(text: string): { provider: string; model: string } {
  const slash = text.indexOf("/");
  const provider = text.slice(0, slash);
  const model = text.slice(slash + 1);
  if (slash <= 0 || model === "" || !/^[A-Za-z0-9._-]+$/.test(provider) || /\s/.test(model)) {
    throw new ReviewSetupError("REVIEW_SETUP_USAGE", `--live-model "${text}" is not provider/model`, {
      hint: "Example: --live-model openai-codex/gpt-5.4 (the provider as in Pi's /login).",
    });
  }
  return { provider, model };
}
