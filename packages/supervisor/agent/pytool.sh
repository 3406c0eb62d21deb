#!/usr/bin/env bash
# Runs one of the agent's pinned Python tools (ruff, mypy, pytest) in this directory, from the
# cached venv of scripts/install-python-tools.sh (which installs it first when missing).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
venv="$("$here/../../../scripts/install-python-tools.sh")"
cd "$here"
tool="$1"
shift
exec "$venv/bin/$tool" "$@"
