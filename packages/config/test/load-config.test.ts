// loadConfig reading sandbox.yaml from disk: a missing, oversized, unreadable or non-UTF-8 file gets
// its own code, errors name the file, and an abort rejects with the signal's reason.
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ConfigError, LIMITS, loadConfig } from "../src/index.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "config-load-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function loadError(path: string, options = {}): Promise<ConfigError> {
  const error = await loadConfig(path, options).then(
    () => undefined,
    (caught: unknown) => caught,
  );
  expect(error).toBeInstanceOf(ConfigError);
  return error as ConfigError;
}

test("reads, parses and resolves a relative image next to the file", async () => {
  await mkdir(join(dir, "project"));
  const file = join(dir, "project", "sandbox.yaml");
  await writeFile(file, "version: 1\nimage: ../assets\nservices:\n  web: { command: run, preview: true }\n");
  const config = await loadConfig(file);
  expect(config.image).toBe(join(dir, "assets"));
  expect(config.services.web!.preview).toEqual({ url: "/", title: "web" });
});

test("a missing file is CONFIG_NOT_FOUND with the absolute path", async () => {
  const error = await loadError(join(dir, "nope.yaml"));
  expect(error.code).toBe("CONFIG_NOT_FOUND");
  expect(error.message).toBe(`no config file at ${join(dir, "nope.yaml")}`);
  expect(error.hint).toBe("check the path, or create a sandbox.yaml there (the package README has an example)");
});

test("a file over 1 MiB is CONFIG_TOO_LARGE", async () => {
  const file = join(dir, "big.yaml");
  await writeFile(file, `version: 1\n#${"x".repeat(LIMITS.yamlMaxBytes)}\n`);
  const error = await loadError(file);
  expect(error.code).toBe("CONFIG_TOO_LARGE");
  expect(error.details).toMatchObject({ sourcePath: file, limitBytes: LIMITS.yamlMaxBytes });
});

test("a file of exactly 1 MiB is accepted", async () => {
  const file = join(dir, "edge.yaml");
  const head = "version: 1\n#";
  await writeFile(file, head + "x".repeat(LIMITS.yamlMaxBytes - head.length));
  await expect(loadConfig(file)).resolves.toMatchObject({ version: 1 });
});

test("validation errors name the file", async () => {
  const file = join(dir, "sandbox.yaml");
  await writeFile(file, "version: 1\ndiskGiB: 1\n");
  const error = await loadError(file);
  expect(error.code).toBe("CONFIG_INVALID");
  expect(error.message.split("\n")[0]).toBe(`${file} is not a valid sandbox.yaml (1 problem):`);
});

test("a directory is CONFIG_READ_FAILED", async () => {
  expect((await loadError(dir)).code).toBe("CONFIG_READ_FAILED");
});

test("text that is not UTF-8 is a syntax error", async () => {
  const file = join(dir, "latin1.yaml");
  await writeFile(file, Buffer.from([0x76, 0x65, 0x72, 0x3a, 0x20, 0xff, 0xfe, 0x0a]));
  expect((await loadError(file)).code).toBe("CONFIG_YAML_SYNTAX");
});

test("a UTF-8 byte-order mark is accepted", async () => {
  const file = join(dir, "bom.yaml");
  await writeFile(file, "\uFEFFversion: 1\n");
  await expect(loadConfig(file)).resolves.toMatchObject({ version: 1 });
});

describe("cancellation", () => {
  test("an aborted signal rejects with its reason before reading", async () => {
    const reason = new Error("stop");
    await expect(loadConfig(join(dir, "nope.yaml"), { signal: AbortSignal.abort(reason) })).rejects.toBe(reason);
  });

  test("aborting during the read rejects with the reason", async () => {
    const file = join(dir, "sandbox.yaml");
    await writeFile(file, "version: 1\n");
    const controller = new AbortController();
    const reason = new Error("later");
    const pending = loadConfig(file, { signal: controller.signal });
    controller.abort(reason);
    await expect(pending).rejects.toBe(reason);
  });

  test("aborting after the load has finished changes nothing", async () => {
    const file = join(dir, "sandbox.yaml");
    await writeFile(file, "version: 1\n");
    const controller = new AbortController();
    const config = await loadConfig(file, { signal: controller.signal });
    controller.abort();
    expect(config.version).toBe(1);
  });
});
