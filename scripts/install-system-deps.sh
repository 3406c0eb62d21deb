#!/usr/bin/env bash
# Installs the Debian/Ubuntu packages pi-sandbox and its test image builder need. Idempotent:
# does nothing (and needs no network) when everything is present.
set -euo pipefail
pkgs=(qemu-system-x86 qemu-utils debootstrap busybox-static cpio lz4 kmod e2fsprogs openssh-client util-linux curl)
missing=()
for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
# The guest test image installs Zig from PyPI with "python3 -m pip" (into its cache, not globally).
if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then missing+=(python3-pip); fi
# scripts/install-python-tools.sh puts the agent's checkers (ruff, mypy, pytest) in a venv.
if ! command -v python3 >/dev/null 2>&1 || ! python3 -c "import ensurepip, venv" >/dev/null 2>&1; then missing+=(python3-venv); fi
# e2e/test/preview-cookies.test.ts drives Debian's headless Chromium through playwright-core,
# which never downloads a browser of its own.
if ! command -v chromium-headless-shell >/dev/null 2>&1 && ! command -v chromium >/dev/null 2>&1; then
  missing+=(chromium-headless-shell)
fi
# e2e/test/context-ssh.test.ts runs a real sshd (in inetd mode, started by the test) for a context,
# in a network namespace of its own (ip netns).
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# The controller's node-floor test runs the pi-sandbox command on the distribution's own Node
# (/usr/bin/node, older than the CLI's floor) to check the one-line refusal.
[ -x /usr/bin/node ] || missing+=(nodejs)
[ "${#missing[@]}" -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
  echo "install these with your package manager: ${missing[*]}" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
