// Our changes to Gondolin's guest helper sources (GUEST_SOURCE_PATCHES in builder/config.mjs)
// against the Gondolin this workspace installs: each applies exactly once, so an upgrade that moves
// the code fails here, on the host, instead of in an image build minutes later.
import { cp, mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import path from "node:path";
import { applyGuestPatches, GUEST_SOURCE_PATCHES, gondolinDir } from "../builder/index.mjs";

let guest: string;

beforeAll(async () => {
  guest = path.join(await mkdtemp(path.join(tmpdir(), "pisb-guest-")), "guest");
  await cp(path.join(gondolinDir(), "dist", "guest"), guest, { recursive: true });
});

afterAll(() => rm(path.dirname(guest), { recursive: true, force: true }));

test("every change applies once to the installed Gondolin's guest sources, and not twice", async () => {
  expect(GUEST_SOURCE_PATCHES.length).toBeGreaterThan(0);
  await applyGuestPatches(guest);
  for (const patch of GUEST_SOURCE_PATCHES) {
    const text = await readFile(path.join(guest, patch.file), "utf8");
    expect(text).toContain(patch.replacement);
    expect(text).not.toContain(patch.search);
  }
  await expect(applyGuestPatches(guest)).rejects.toThrow(
    /expected one occurrence of .*, found 0; update @pi-sandbox\/image builder/,
  );
});
