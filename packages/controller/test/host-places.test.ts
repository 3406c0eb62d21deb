// The one list of host places no guest and no model may have without the user: what a path is,
// is in or holds decides it, after symlinks are resolved by the caller.
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseConfig } from "@pi-sandbox/config";
import { refuseProtectedReaches } from "../src/daemon/secrets.js";
import { holdsHome, protectedPlace, type HostPlaces } from "../src/host-places.js";
import { runsCode } from "../src/host-guard.js";

const places: HostPlaces = {
  homes: ["/home/u", "/var/home/u"],
  stateRoot: "/home/u/.local/state/pi-sandbox",
  tmp: "/tmp",
  darwin: false,
};

test.each([
  ["/", "is the host's root directory"],
  ["/home", "is or holds the home directory /home/u"],
  ["/home/u", "is or holds the home directory /home/u"],
  ["/var/home/u/.aws/credentials", "is in /var/home/u/.aws, where credentials and configuration live"],
  ["/home/u/.bashrc", "is in /home/u/.bashrc, where credentials and configuration live"],
  ["/home/u/.pi/agent/auth.json", "is in /home/u/.pi, where credentials and configuration live"],
  ["/proc/self/environ", "is in /proc, the running system's own"],
  ["/run/user/0/bus", "is in /run, the running system's own"],
  ["/tmp", "is or holds /tmp, the temporary directory every process shares"],
])("%s is protected: it %s", (path, why) => {
  expect(protectedPlace(path, places)?.why).toBe(why);
});

test.each(["/home/u/project/src", "/tmp/build/out", "/srv/data", "/home/u/Library"])("%s is not protected", (path) => {
  expect(protectedPlace(path, places)).toBeUndefined();
});

test("the state directory is protected when it is, holds or is inside the path", () => {
  const state = { ...places, stateRoot: "/srv/pi/state" };
  for (const path of ["/srv/pi", "/srv/pi/state", "/srv/pi/state/instances/a"]) {
    expect(protectedPlace(path, state)?.place).toBe("/srv/pi/state");
  }
});

test("on macOS ~/Library is protected too, whatever its case", () => {
  expect(protectedPlace("/home/u/library/Keychains/login.keychain-db", { ...places, darwin: true })?.place).toBe(
    "/home/u/library",
  );
});

test("a project in / or the home directory is no project", () => {
  expect(holdsHome("/", places)).toBe(true);
  expect(holdsHome("/home/u", places)).toBe(true);
  expect(holdsHome("/home/u/project", places)).toBe(false);
});

test("names where code runs are compared case-folded and NFC-normalised", () => {
  expect(runsCode("/p", "/p/NODE_MODULES/x/index.js")).toBe(true);
  expect(runsCode("/p", "/p/sub/.GIT/config")).toBe(true);
  expect(runsCode("/p", "/p/Package.JSON")).toBe(true);
  expect(runsCode("/p", "/p/crates/a/CARGO.toml")).toBe(true);
  expect(runsCode("/p", "/p/sub/.gitignore")).toBe(false);
  expect(runsCode("/p", "/p/docs/package.json.md")).toBe(false);
});

test("every key whose kind puts host content into the guest is refused in a protected place, for every caller", async () => {
  const dir = await mkdtemp(join(tmpdir(), "pisb-places-"));
  try {
    const home = join(dir, "home");
    await mkdir(join(home, ".ssh"), { recursive: true });
    await mkdir(join(home, ".cache/images/dev"), { recursive: true });
    const env = { HOME: home };
    const refused = parseConfig("version: 1\nmounts: [{ host: ~/.ssh, guest: /mnt/ssh }]\n");
    await expect(refuseProtectedReaches(refused, join(dir, "state"), env)).rejects.toMatchObject({
      code: "CONTROLLER_HOST_PATH_REFUSED",
      message: expect.stringContaining(`mounts.0.host names ${join(home, ".ssh")}`),
    });
    // A boot asset is confined to its image's own directory instead: an image under ~/.cache boots.
    const image = parseConfig(`version: 1\nimage: ${join(home, ".cache/images/dev")}\n`);
    await expect(refuseProtectedReaches(image, join(dir, "state"), env)).resolves.toBeUndefined();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
