// The Python fixture that the real-VM suite runs in the guest, run here on the host first: same
// server, same expectations, host loopback instead of the virtio channel.
import { spawn, type ChildProcess } from "node:child_process";
import { fileURLToPath } from "node:url";
import { loopbackConnector } from "../src/testing.js";
import { guestServerSuite } from "./support/guest-suite.js";

const script = fileURLToPath(new URL("./support/guest_server.py", import.meta.url));
let child: ChildProcess;
let guestPort = 0;

beforeAll(async () => {
  child = spawn("python3", [script, "0"], { stdio: ["ignore", "pipe", "inherit"] });
  guestPort = await new Promise<number>((resolve, reject) => {
    child.once("error", reject);
    child.once("exit", (code) => reject(new Error(`guest_server.py exited with ${code}`)));
    let text = "";
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      text += chunk;
      const match = /listening (\d+)\n/.exec(text);
      if (match) resolve(Number(match[1]));
    });
  });
});

afterAll(() => {
  child?.kill("SIGKILL");
});

describe("the Python guest fixture on this host", () => {
  guestServerSuite(() => ({ connector: loopbackConnector({ plainDuplex: true }), guestPort }), {
    uploadBytes: 10 * 1024 * 1024,
    downloadBytes: 8 * 1024 * 1024,
    lateRead: { bytes: 32 * 1024 * 1024, afterMs: 1_000 },
    concurrent: 100,
    closeWithinMs: 2_000,
  });
});
