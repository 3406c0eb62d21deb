// The environment a daemon process gets: the state root, and glibc's fixed mmap threshold that
// keeps a daemon's resident memory from growing after it streamed a guest's memory, which the
// daemon then keeps from its own children (QEMU).
import { daemonEnv } from "../src/client/spawn.js";
import { forgetDaemonMalloc } from "../src/daemon-malloc.js";

test("a daemon gets the state root and a fixed 64 KiB mmap threshold, and its children do not", () => {
  const env = daemonEnv({ PATH: "/usr/bin", PI_SANDBOX_HOME: "/elsewhere" }, "/state");
  expect(env).toMatchObject({ PATH: "/usr/bin", PI_SANDBOX_HOME: "/state", MALLOC_MMAP_THRESHOLD_: "65536" });
  forgetDaemonMalloc(env);
  expect(env).toEqual({ PATH: "/usr/bin", PI_SANDBOX_HOME: "/state" });
});

test("a threshold the user set is theirs: kept for the daemon and for its children", () => {
  const env = daemonEnv({ MALLOC_MMAP_THRESHOLD_: "1048576" }, "/state");
  forgetDaemonMalloc(env);
  expect(env).toEqual({ MALLOC_MMAP_THRESHOLD_: "1048576", PI_SANDBOX_HOME: "/state" });
});
