// doctor on the real guest test image: every image check passes. A VM suite because it needs the
// built image (jest.vm.config.cjs's globalSetup), and with a usable /dev/kvm doctor boots the
// image's kernel to prove the accelerator. The broken setups are in doctor.test.ts.
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { callAction, type DoctorCheck } from "../src/client/index.js";

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), "doc-image-"));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

test("the test image passes every image check", async () => {
  const image = process.env.PI_SANDBOX_TEST_IMAGE;
  if (!image) throw new Error("PI_SANDBOX_TEST_IMAGE is not set: run through jest's globalSetup");
  await writeFile(join(dir, "sandbox.yaml"), `version: 1\nimage: ${image}\n`);
  const result = (await callAction(
    { action: "doctor", config: "sandbox.yaml" },
    { env: { ...process.env, PI_SANDBOX_HOME: join(dir, "state") }, cwd: dir },
  )) as { checks: DoctorCheck[] };
  for (const name of ["image:python3", "image:sshd", "image:sandboxssh", "image:resize2fs"]) {
    expect(result.checks.find((c) => c.name === name)?.status).toBe("ok");
  }
});
