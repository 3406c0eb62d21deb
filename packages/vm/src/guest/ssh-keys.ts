// Client keys of guest terminals: each SSH access gets a key pair of its own, made on the host with
// ssh-keygen, whose public half is added to the guest user's authorized_keys while the access is
// open and removed when it closes (guest-ssh.ts decides when).

import { execFile } from "node:child_process";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import os from "node:os";
import path from "node:path";
import { promisify } from "node:util";
import { VmError, messageOf } from "../errors.js";
import { runInGuest } from "./exec-util.js";
import type { GuestVm } from "./guest-vm.js";
import { parseHostKeys } from "./ssh-forwarder.js";

/** A client key pair for one SSH access. */
export interface SshKeyPair {
  /** The OpenSSH private key file's content. */
  privateKey: Buffer;
  /** The public key as `type base64`, the form authorized_keys lines start with. */
  publicKey: string;
}

/**
 * Adds (`add`) or removes (`remove`) one public key in a guest user's authorized_keys, as root.
 * Arguments: mode, user, key (`type base64`). Adding needs the file Gondolin's setup wrote; a
 * removal rewrites the file in place (owner and mode stay) without the lines holding the key.
 */
const AUTHORIZED_KEYS_SCRIPT = `set -eu
mode=$1 user=$2 key=$3
home=$(getent passwd "$user" 2>/dev/null | cut -d: -f6) || home=
[ -n "$home" ] || home=$(awk -F: -v u="$user" '$1 == u { print $6; exit }' /etc/passwd)
[ -n "$home" ] || { echo "no home directory for $user" >&2; exit 3; }
file=$home/.ssh/authorized_keys
if [ "$mode" = add ]; then
  [ -f "$file" ] || { echo "$file is missing" >&2; exit 3; }
  printf '%s\\n' "$key" >> "$file"
else
  [ -f "$file" ] || exit 0
  kept=$(grep -vF -e "$key" "$file") || [ $? -eq 1 ]
  printf '%s\\n' "$kept" > "$file"
fi
`;

/** The `type base64` part of a public key line (`ssh-ed25519 AAAA… comment`). */
export function publicKeyOf(line: string): string {
  const key = parseHostKeys(line)[0];
  if (!key) {
    throw new VmError("VM_SSH_FAILED", "SSH into the guest could not be enabled: ssh-keygen wrote no public key", {
      hint: "check the OpenSSH client on the host (ssh-keygen -t ed25519)",
      details: { reason: "no public key" },
    });
  }
  return key;
}

/** A new ed25519 key pair from the host's ssh-keygen; its files are gone when this resolves. */
export async function generateSshKeyPair(): Promise<SshKeyPair> {
  const dir = await mkdtemp(path.join(os.tmpdir(), "pisb-sshkey-"));
  const file = path.join(dir, "id_ed25519");
  try {
    await promisify(execFile)("ssh-keygen", ["-q", "-t", "ed25519", "-N", "", "-C", "pi-sandbox", "-f", file], {
      timeout: 30_000,
    });
    const [privateKey, publicLine] = await Promise.all([readFile(file), readFile(`${file}.pub`, "utf8")]);
    return { privateKey, publicKey: publicKeyOf(publicLine) };
  } catch (error) {
    if (error instanceof VmError) throw error;
    throw new VmError(
      "VM_SSH_FAILED",
      `SSH into the guest could not be enabled: ssh-keygen failed: ${messageOf(error)}`,
      {
        hint: "install the OpenSSH client on the host (ssh-keygen)",
        cause: error,
        details: { reason: "ssh-keygen failed" },
      },
    );
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

/** Adds `publicKey` to `user`'s authorized_keys in the guest. */
export async function authorizeKey(
  guest: Pick<GuestVm, "exec">,
  user: string,
  publicKey: string,
  signal?: AbortSignal,
): Promise<void> {
  const result = await runInGuest(
    guest,
    ["/bin/sh", "-c", AUTHORIZED_KEYS_SCRIPT, "sh", "add", user, publicKey],
    signal ? { signal } : {},
  );
  if (result.exitCode !== 0) {
    const reason = result.stderr.trim().slice(0, 500) || `exit ${result.exitCode}`;
    throw new VmError("VM_SSH_FAILED", `SSH into the guest could not be enabled: adding the key failed: ${reason}`, {
      hint: "check the user's ~/.ssh in the guest, or wait for the open terminals to close and try again",
      details: { user, reason },
    });
  }
}

/** Removes `publicKey` from `user`'s authorized_keys in the guest; resolves with whether it worked. */
export async function revokeKey(
  guest: Pick<GuestVm, "exec">,
  user: string,
  publicKey: string,
  signal?: AbortSignal,
): Promise<boolean> {
  const result = await runInGuest(
    guest,
    ["/bin/sh", "-c", AUTHORIZED_KEYS_SCRIPT, "sh", "remove", user, publicKey],
    signal ? { signal } : {},
  );
  return result.exitCode === 0;
}
