// A daemon starts loading Gondolin before its first boot asks for it: the boot then gets the same
// module, with its session registry under the state root the preload named.
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { loadGondolin } from "../src/gondolin-loader.js";
import { gondolinSessionsDir } from "../src/filenames.js";
import { preloadGondolin } from "../src/index.js";

test("a preload fixes the session registry under the state root, and the boot's load gets that module", async () => {
  const root = await mkdtemp(join(tmpdir(), "preload-"));
  const before = process.env.GONDOLIN_SESSIONS_DIR;
  delete process.env.GONDOLIN_SESSIONS_DIR;
  try {
    expect(preloadGondolin(root)).toBeUndefined();
    expect(process.env.GONDOLIN_SESSIONS_DIR).toBe(gondolinSessionsDir(root));
    const gondolin = await loadGondolin(join(root, "elsewhere"));
    expect(typeof gondolin.VM).toBe("function");
    expect(await loadGondolin()).toBe(gondolin);
    expect(process.env.GONDOLIN_SESSIONS_DIR).toBe(gondolinSessionsDir(root));
  } finally {
    if (before === undefined) delete process.env.GONDOLIN_SESSIONS_DIR;
    else process.env.GONDOLIN_SESSIONS_DIR = before;
    await rm(root, { recursive: true, force: true });
  }
});
