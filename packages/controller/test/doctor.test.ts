// doctor on broken setups: each failed check names the problem and its fix.
import { execFileSync } from "node:child_process";
import { constants } from "node:fs";
import { access, chmod, mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { callAction, type DoctorCheck } from "../src/client/index.js";

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), "doc-"));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function doctor(env: NodeJS.ProcessEnv, config?: string) {
  return (await callAction({ action: "doctor", ...(config ? { config } : {}) }, { env, cwd: dir })) as {
    ok: boolean;
    checks: DoctorCheck[];
  };
}

const check = (result: { checks: DoctorCheck[] }, name: string) => result.checks.find((c) => c.name === name);

test("missing QEMU and qemu-img fail with install instructions", async () => {
  // A PATH with only node on it: no qemu, no qemu-img.
  const bin = join(dir, "bin");
  await mkdir(bin);
  execFileSync("ln", ["-s", process.execPath, join(bin, "node")]);
  const result = await doctor({ PATH: bin, HOME: dir, PI_SANDBOX_HOME: join(dir, "state") });
  expect(result.ok).toBe(false);
  expect(check(result, "qemu")).toMatchObject({
    status: "fail",
    fix: expect.stringMatching(/apt-get install qemu-system-x86/),
  });
  expect(check(result, "qemu-img")).toMatchObject({ status: "fail", fix: expect.stringMatching(/qemu-utils/) });
  expect(check(result, "node")?.status).toBe("ok");
});

test("a group-readable state dir fails with the chmod fix", async () => {
  const root = join(dir, "state");
  await mkdir(root, { mode: 0o755 });
  await chmod(root, 0o755);
  const result = await doctor({ ...process.env, PI_SANDBOX_HOME: root });
  expect(check(result, "state-dir")).toMatchObject({ status: "fail", fix: `Run: chmod 700 ${root}` });
});

test("an image without python3 is named as missing it, with what needs it", async () => {
  // A tiny ext4 image holding sshd and resize2fs but no python3.
  const tree = join(dir, "tree");
  for (const file of ["usr/sbin/sshd", "usr/sbin/resize2fs", "usr/bin/sandboxssh"]) {
    await mkdir(dirname(join(tree, file)), { recursive: true });
    await writeFile(join(tree, file), "#!/bin/sh\n");
  }
  const image = join(dir, "image");
  await mkdir(image);
  execFileSync("mke2fs", ["-q", "-t", "ext4", "-d", tree, join(image, "rootfs.ext4"), "8M"]);
  await writeFile(join(dir, "sandbox.yaml"), "version: 1\nimage: ./image\n");
  const result = await doctor({ ...process.env, PI_SANDBOX_HOME: join(dir, "state") }, "sandbox.yaml");
  expect(check(result, "image:python3")).toMatchObject({
    status: "fail",
    detail: expect.stringMatching(/python3 is missing from the image; commands and services need it/),
  });
  expect(check(result, "image:sshd")?.status).toBe("ok");
  expect(check(result, "image:resize2fs")?.status).toBe("ok");
  expect(result.ok).toBe(false);
});

test("an image whose manifest leads outside its directory fails the image check, as a boot would refuse it", async () => {
  const image = join(dir, "escaping");
  await mkdir(image);
  await writeFile(join(dir, "secret"), "not an image\n");
  for (const file of ["vmlinuz-virt", "initramfs.cpio.lz4"]) await writeFile(join(image, file), "x");
  await writeFile(join(image, "manifest.json"), JSON.stringify({ assets: { rootfs: "../secret" } }));
  await writeFile(join(dir, "escaping.yaml"), "version: 1\nimage: ./escaping\n");
  const result = await doctor({ ...process.env, PI_SANDBOX_HOME: join(dir, "state") }, "escaping.yaml");
  expect(check(result, "image")).toMatchObject({ status: "fail", detail: expect.stringContaining("outside") });
  expect(check(result, "config")?.status).toBe("ok");
  expect(result.ok).toBe(false);
});

test("the accelerator check reports what a boot would really get", async () => {
  // A QEMU that answers --version but aborts on KVM, as on hosts whose /dev/kvm cannot run guests.
  const bin = join(dir, "bin");
  await mkdir(bin);
  const qemu = join(bin, "qemu-system-x86_64");
  await writeFile(
    qemu,
    '#!/bin/sh\n[ "$1" = --version ] && { echo "QEMU emulator version 9.9.9"; exit 0; }\necho "qemu-system-x86_64: error: failed to set MSR 0x10a to 0x69" >&2\nexit 1\n',
  );
  await chmod(qemu, 0o755);
  const env: NodeJS.ProcessEnv = {
    ...process.env,
    PATH: `${bin}:${process.env.PATH}`,
    PI_SANDBOX_HOME: join(dir, "state"),
  };
  delete env.PI_SANDBOX_ACCEL;
  let kvmAccessible = true;
  try {
    await access("/dev/kvm", constants.R_OK | constants.W_OK);
  } catch {
    kvmAccessible = false;
  }
  // With an image, doctor boots its kernel on KVM (here: the fake QEMU aborts) and says why not.
  const image = join(dir, "image");
  await mkdir(image);
  for (const file of ["vmlinuz-virt", "initramfs.cpio.lz4", "rootfs.ext4"]) await writeFile(join(image, file), "x");
  await writeFile(join(dir, "sandbox.yaml"), "version: 1\nimage: ./image\n");
  const withImage = check(await doctor(env, "sandbox.yaml"), "accelerator");
  // Without one, only a verdict a boot (or that doctor run) cached for this host boot counts.
  const cached = check(await doctor(env), "accelerator");
  if (kvmAccessible) {
    expect(withImage).toMatchObject({
      status: "warn",
      detail: expect.stringMatching(
        /^tcg: \/dev\/kvm is present but could not run a Linux kernel \(QEMU stopped before the guest kernel printed anything: error: failed to set MSR/,
      ),
    });
    expect(cached).toMatchObject({ status: "warn", detail: withImage!.detail });
    await rm(join(dir, "state", "runtime", "kvm-verdicts"), { recursive: true });
    expect(check(await doctor(env), "accelerator")).toMatchObject({
      status: "ok",
      detail: "kvm: /dev/kvm is accessible (not yet proven by a guest kernel)",
      fix: expect.stringMatching(/Run doctor with -c/),
    });
  } else {
    for (const result of [withImage, cached]) {
      expect(result).toMatchObject({
        status: "warn",
        detail: expect.stringMatching(/^tcg: no hardware virtualisation/),
      });
    }
  }
  expect(check(await doctor({ ...env, PI_SANDBOX_ACCEL: "tcg" }), "accelerator")).toMatchObject({
    status: "ok",
    detail: "tcg: forced by PI_SANDBOX_ACCEL=tcg",
  });
  expect(check(await doctor({ ...env, PI_SANDBOX_ACCEL: "warp" }), "accelerator")).toMatchObject({
    status: "fail",
    detail: expect.stringMatching(/accelerator "warp" is unknown/),
  });
});

test("a config without image: fails the image check with the command that builds one", async () => {
  const config = join(dir, "sandbox.yaml");
  await writeFile(config, "version: 1\n");
  const result = await doctor({ ...process.env, PI_SANDBOX_HOME: join(dir, "state"), XDG_CACHE_HOME: dir }, config);
  expect(check(result, "image")).toMatchObject({
    status: "fail",
    fix: "Build one with `pi-sandbox image build` and add `image: default` to sandbox.yaml.",
  });
});

test("a config naming an image that is not built fails with `pi-sandbox image build <name>`", async () => {
  const config = join(dir, "sandbox.yaml");
  await writeFile(config, "version: 1\nimage: node-dev\n");
  const result = await doctor({ ...process.env, PI_SANDBOX_HOME: join(dir, "state"), XDG_CACHE_HOME: dir }, config);
  expect(check(result, "image")).toMatchObject({
    status: "fail",
    detail: "image node-dev is not built",
    fix: expect.stringContaining("`pi-sandbox image build node-dev`"),
  });
});

test("without a config and with no image built, doctor warns with the build command", async () => {
  const result = await doctor({ ...process.env, PI_SANDBOX_HOME: join(dir, "state"), XDG_CACHE_HOME: dir });
  expect(check(result, "images")).toMatchObject({
    status: "warn",
    fix: expect.stringContaining("`pi-sandbox image build`"),
  });
});
