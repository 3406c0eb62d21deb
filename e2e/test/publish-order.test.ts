// The README's release command, dry-run: `nx release publish` publishes every publishable package
// after the workspace packages it depends on (a user installing in between never meets a version
// that is not there yet), and never the private ones.

import { execFile } from "node:child_process";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import { ROOT } from "./support/readme-blocks.js";

const run = promisify(execFile);
const PACKAGES = ["config", "image", "vm", "supervisor", "ingress", "controller", "pi-extension", "review-setup"];

interface Manifest {
  name: string;
  private?: boolean;
  dependencies?: Record<string, string>;
}

test("a dry-run publish goes in dependency order and leaves private packages out", async () => {
  const manifests = await Promise.all(
    PACKAGES.map(
      async (dir) => JSON.parse(await readFile(join(ROOT, "packages", dir, "package.json"), "utf8")) as Manifest,
    ),
  );
  const { stdout } = await run(join(ROOT, "node_modules/.bin/nx"), ["release", "publish", "--dry-run"], {
    cwd: ROOT,
    maxBuffer: 64 * 1024 * 1024,
    env: { ...process.env, NX_DAEMON: "false" },
  });
  // Nx colours its output in CI even into a pipe: read it without the escape sequences.
  const plain = stdout.replace(/\u001b\[[0-9;]*m/g, "");
  const order = [...plain.matchAll(/^> nx run (@pi-sandbox\/[a-z-]+):nx-release-publish/gm)].map((m) => m[1]!);
  const publishable = manifests.filter((m) => !m.private).map((m) => m.name);
  expect([...order].sort()).toEqual([...publishable].sort());
  for (const manifest of manifests.filter((m) => !m.private)) {
    for (const dependency of Object.keys(manifest.dependencies ?? {}).filter((d) => d.startsWith("@pi-sandbox/"))) {
      expect({ [manifest.name]: order.indexOf(dependency) < order.indexOf(manifest.name) }).toEqual({
        [manifest.name]: true,
      });
    }
  }
  expect(manifests.find((m) => m.name === "@pi-sandbox/review-setup")?.private).toBe(true);
  // The README's release steps use this command, not `npm publish -ws` (alphabetical order).
  const readme = await readFile(join(ROOT, "README.md"), "utf8");
  expect(readme).toMatch(/^npx nx release publish\b/m);
});
