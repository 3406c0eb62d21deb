// `doctor`: checks the host (Node, QEMU, KVM, the state directory, images) and says what to fix.
import { execFile } from "node:child_process";
import { constants } from "node:fs";
import { access } from "node:fs/promises";
import { arch, platform } from "node:os";
import { delimiter, join, resolve } from "node:path";
import { promisify } from "node:util";
import { isCodedError, isImageName, loadConfig } from "@pi-sandbox/config";
import { DEFAULT_IMAGE_NAME, imageCacheRoot, isImageError, listImages, resolveImageRef } from "@pi-sandbox/image";
import { chooseAccelerator, loadImageDir, probeHost, resolveAccelerator } from "@pi-sandbox/vm/host";
import { isControllerError } from "../errors.js";
import type { StateLayout } from "../state/layout.js";
import type { LocalContext } from "./kit/define.js";
import { findDaemonNode } from "../node-floor.js";

const run = promisify(execFile);

/** One doctor check. */
export interface DoctorCheck {
  /** What was checked. */
  name: string;
  /** `ok`, `warn` (works, with a caveat) or `fail`. */
  status: "ok" | "warn" | "fail";
  /** What was found. */
  detail: string;
  /** How to fix it, for warn and fail. */
  fix?: string;
}

/** Guest tools an image needs, with the candidate paths inside its root filesystem. */
const GUEST_TOOLS: { tool: string; paths: string[]; neededFor: string; fix: string }[] = [
  {
    tool: "python3",
    paths: ["/usr/bin/python3", "/usr/local/bin/python3"],
    neededFor: "commands and services",
    fix: "install python3 in the image",
  },
  { tool: "sshd", paths: ["/usr/sbin/sshd"], neededFor: "the terminal", fix: "install openssh-server in the image" },
  {
    tool: "sandboxssh",
    paths: ["/usr/bin/sandboxssh"],
    neededFor: "the terminal",
    fix: "add Gondolin's sandboxssh helper to /usr/bin",
  },
  {
    tool: "resize2fs",
    paths: ["/usr/sbin/resize2fs", "/sbin/resize2fs"],
    neededFor: "growing the disk to diskGiB",
    fix: "install e2fsprogs in the image",
  },
];

/** Absolute path of `command` on `env`'s PATH, or undefined. */
async function findOnPath(command: string, env: NodeJS.ProcessEnv): Promise<string | undefined> {
  for (const dir of (env.PATH ?? "").split(delimiter).filter(Boolean)) {
    const candidate = join(dir, command);
    try {
      await access(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not here
    }
  }
  return undefined;
}

async function version(command: string, args: string[], env: NodeJS.ProcessEnv): Promise<string | undefined> {
  try {
    const { stdout } = await run(command, args, { timeout: 10_000, env });
    return stdout.split("\n")[0]?.trim();
  } catch {
    return undefined;
  }
}

async function pathInExt4(image: string, path: string): Promise<boolean> {
  try {
    const { stdout, stderr } = await run("debugfs", ["-R", `stat ${path}`, image], { timeout: 15_000 });
    return /Inode:/.test(stdout) && !/not found/i.test(stderr);
  } catch {
    return false;
  }
}

/**
 * The accelerator a boot would really get, and why. An accessible /dev/kvm counts only once a
 * guest kernel printed its banner on it: with a config's image, doctor runs that probe (or reuses
 * the verdict a boot cached for this host boot); without one, only a cached verdict counts.
 */
async function acceleratorCheck(
  qemu: string | undefined,
  env: NodeJS.ProcessEnv,
  layout: StateLayout,
  kernelPath: string | undefined,
): Promise<DoctorCheck> {
  if (platform() === "darwin") return { name: "accelerator", status: "ok", detail: "hvf" };
  const override = env.PI_SANDBOX_ACCEL;
  let resolved: Awaited<ReturnType<typeof resolveAccelerator>>;
  try {
    const host = probeHost();
    resolved = qemu
      ? await resolveAccelerator({
          qemuPath: qemu,
          host,
          ...(override !== undefined ? { override } : {}),
          ...(kernelPath ? { kernelPath } : {}),
          cacheDir: layout.runtimeDir(),
        })
      : { choice: chooseAccelerator(host, override), host };
  } catch (error) {
    return { name: "accelerator", status: "fail", detail: (error as Error).message, fix: "Unset PI_SANDBOX_ACCEL." };
  }
  const { choice, host } = resolved;
  const detail = `${choice.accel}: ${choice.reason}`;
  if (choice.accel === "kvm" && !host.kvmProven && !override?.trim()) {
    return {
      name: "accelerator",
      status: "ok",
      detail,
      fix: "Run doctor with -c <sandbox.yaml> to prove KVM with that image's kernel now; the first boot does it otherwise.",
    };
  }
  if (choice.accel !== "tcg" || override?.trim()) return { name: "accelerator", status: "ok", detail };
  if (host.kvmProblem !== undefined) {
    return {
      name: "accelerator",
      status: "warn",
      detail: `${detail}; VMs run on software emulation (TCG), several times slower`,
      fix: "Check the host's virtualisation (nested virtualisation needs vmx/svm passed through to this machine); nothing to do if TCG's speed is enough.",
    };
  }
  return {
    name: "accelerator",
    status: "warn",
    detail: `${detail}; VMs run on QEMU's software emulation (TCG), several times slower`,
    fix: "Enable virtualisation and add your user to the kvm group for hardware speed.",
  };
}

/** The command that builds the image `image: default` names. */
const BUILD_COMMAND = "pi-sandbox image build";

/**
 * The assets directory of a config's `image:` (a path as given, a name looked up in the image
 * cache), or undefined after pushing the failed check that says which command builds one.
 */
async function configImageDir(
  image: string | undefined,
  env: NodeJS.ProcessEnv,
  checks: DoctorCheck[],
): Promise<string | undefined> {
  if (image === undefined) {
    checks.push({
      name: "image",
      status: "fail",
      detail: "no image: set; Gondolin's default image has no python3, so commands and services cannot run",
      fix: `Build one with \`${BUILD_COMMAND}\` and add \`image: default\` to sandbox.yaml.`,
    });
    return undefined;
  }
  if (!isImageName(image)) return image;
  try {
    return await resolveImageRef(image, env);
  } catch (error) {
    checks.push({
      name: "image",
      status: "fail",
      detail: `image ${image} is not built`,
      fix: `Build it: \`${BUILD_COMMAND}${image === DEFAULT_IMAGE_NAME ? "" : ` ${image}`}\` (\`pi-sandbox image list\` shows the built ones).`,
    });
    if (!isImageError(error)) throw error;
    return undefined;
  }
}

/** Without a config: whether any image is built, and the command that builds one if not. */
async function imagesCheck(env: NodeJS.ProcessEnv): Promise<DoctorCheck> {
  const names = (await listImages(imageCacheRoot(env)).catch(() => [])).flatMap((i) => (i.name ? [i.name] : []));
  if (names.length === 0) {
    return {
      name: "images",
      status: "warn",
      detail: "no guest image is built",
      fix: `Build one: \`${BUILD_COMMAND}\` (then \`image: default\` in sandbox.yaml).`,
    };
  }
  return { name: "images", status: "ok", detail: `built: ${names.join(", ")}` };
}

/** Checks the host and, given a config, its image; each failed check says how to fix it. */
export async function runDoctor(
  layout: StateLayout,
  options: { config?: string; cwd: string; env: NodeJS.ProcessEnv },
): Promise<{ ok: boolean; checks: DoctorCheck[] }> {
  const checks: DoctorCheck[] = [];
  try {
    const node = findDaemonNode(options.env);
    checks.push({ name: "node", status: "ok", detail: `controller runs on ${node}` });
  } catch (error) {
    checks.push({
      name: "node",
      status: "fail",
      detail: (error as Error).message,
      fix: isControllerError(error) ? error.hint : undefined,
    });
  }
  const qemuBinary = arch() === "arm64" ? "qemu-system-aarch64" : "qemu-system-x86_64";
  const qemu = await version(qemuBinary, ["--version"], options.env);
  checks.push(
    qemu
      ? { name: "qemu", status: "ok", detail: qemu }
      : {
          name: "qemu",
          status: "fail",
          detail: `${qemuBinary} not found on PATH`,
          fix: "Install QEMU (Debian/Ubuntu: apt-get install qemu-system-x86; macOS: brew install qemu).",
        },
  );
  const qemuImg = await version("qemu-img", ["--version"], options.env);
  checks.push(
    qemuImg
      ? { name: "qemu-img", status: "ok", detail: qemuImg }
      : {
          name: "qemu-img",
          status: "fail",
          detail: "qemu-img not found on PATH",
          fix: "Install it (Debian/Ubuntu: apt-get install qemu-utils).",
        },
  );
  const qemuPath = qemu ? await findOnPath(qemuBinary, options.env) : undefined;
  const acceleratorAt = checks.length;
  try {
    await layout.ensurePrivate();
    checks.push({ name: "state-dir", status: "ok", detail: `${layout.root} is private` });
  } catch (error) {
    checks.push({
      name: "state-dir",
      status: "fail",
      detail: (error as Error).message,
      fix: isControllerError(error) ? error.hint : undefined,
    });
  }
  let kernelPath: string | undefined;
  if (options.config) {
    const configPath = resolve(options.cwd, options.config);
    try {
      const config = await loadConfig(configPath);
      checks.push({ name: "config", status: "ok", detail: `${configPath} is valid` });
      const imagePath = await configImageDir(config.image, options.env, checks);
      if (imagePath !== undefined) {
        // The same checks a boot makes (files inside the directory, checksums): a refusal is the answer.
        const loaded = await loadImageDir(imagePath, { stateRoot: layout.runtimeDir() }).catch((error: unknown) =>
          isCodedError(error) && error.code === "VM_IMAGE_INVALID" ? error : undefined,
        );
        if (loaded instanceof Error) throw loaded;
        kernelPath = loaded?.kernelPath;
        const rootfs = loaded?.rootfsPath ?? join(imagePath, "rootfs.ext4");
        try {
          await access(rootfs, constants.R_OK);
          checks.push({
            name: "image",
            status: "ok",
            detail: imagePath === config.image ? imagePath : `${config.image}: ${imagePath}`,
          });
          for (const t of GUEST_TOOLS) {
            let found = false;
            for (const p of t.paths) if (!found) found = await pathInExt4(rootfs, p);
            checks.push(
              found
                ? { name: `image:${t.tool}`, status: "ok", detail: `${t.tool} present` }
                : {
                    name: `image:${t.tool}`,
                    status: "fail",
                    detail: `${t.tool} is missing from the image; ${t.neededFor} need it`,
                    fix: t.fix,
                  },
            );
          }
        } catch {
          checks.push({
            name: "image",
            status: "fail",
            detail: `${rootfs} is missing or unreadable`,
            fix: `Point image: at a Gondolin assets directory (vmlinuz-virt, initramfs.cpio.lz4, rootfs.ext4, manifest.json), or build one: ${BUILD_COMMAND}.`,
          });
        }
      }
    } catch (error) {
      if (isCodedError(error) && error.code === "VM_IMAGE_INVALID") {
        checks.push({
          name: "image",
          status: "fail",
          detail: error.message,
          ...(error.hint ? { fix: error.hint } : {}),
        });
      } else
        checks.push({
          name: "config",
          status: "fail",
          detail: (error as Error).message,
          fix:
            (error as { code?: string }).code === "CONFIG_NOT_FOUND"
              ? "Pass the path of an existing sandbox.yaml with -c (or config), or create one (the README has an example)."
              : "Fix the sandbox.yaml errors listed.",
        });
    }
  }
  if (!options.config) checks.push(await imagesCheck(options.env));
  checks.splice(acceleratorAt, 0, await acceleratorCheck(qemuPath, options.env, layout, kernelPath));
  return { ok: checks.every((c) => c.status !== "fail"), checks };
}

/** The doctor action's handler: actions/doctor.ts loads this module on the action's first call. */
export function doctorHandler(
  args: { config?: string | undefined },
  ctx: LocalContext,
): Promise<{ ok: boolean; checks: DoctorCheck[] }> {
  return runDoctor(ctx.layout, {
    ...(args.config !== undefined ? { config: args.config } : {}),
    cwd: ctx.cwd,
    env: ctx.env,
  });
}
