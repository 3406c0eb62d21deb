#!/usr/bin/env bash
# Installs the pinned Python tools that check the supervisor's guest agent (ruff, mypy, pytest)
# into a cached virtualenv, and prints its directory on stdout. Idempotent: when the venv already
# holds exactly these pins it does nothing and needs no network. Override the place with
# PI_SANDBOX_PYTOOLS (default ${XDG_CACHE_HOME:-~/.cache}/pi-sandbox/pytools).
set -euo pipefail
# Every package pinned, dependencies included, so two machines check with the same tools.
pins=(
  ruff==0.17.5
  mypy==2.4.1
  pytest==9.2.0
  ast_serialize==0.13.1
  iniconfig==2.3.1
  librt==0.17.0
  mypy_extensions==1.2.0
  packaging==26.4
  pathspec==1.1.1
  pluggy==1.7.0
  Pygments==2.21.0
  typing_extensions==4.16.0
)
venv="${PI_SANDBOX_PYTOOLS:-${XDG_CACHE_HOME:-$HOME/.cache}/pi-sandbox/pytools}"
want="$(printf '%s\n' "${pins[@]}")"
ready() { [ -x "$venv/bin/ruff" ] && [ -x "$venv/bin/mypy" ] && [ -x "$venv/bin/pytest" ] && [ "$(cat "$venv/.pins" 2>/dev/null)" = "$want" ]; }
if ready; then
  echo "$venv"
  exit 0
fi
mkdir -p "$(dirname "$venv")"
# nx runs lint and test side by side: one installer at a time, the second finds the work done.
exec 9>"$venv.lock"
flock 9
if ! ready; then
  if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" >/dev/null 2>&1; then
    echo "python3 cannot create virtualenvs; install python3-venv (scripts/install-system-deps.sh does)" >&2
    exit 1
  fi
  echo "installing ${pins[*]:0:3} into $venv" >&2
  rm -f "$venv/.pins"
  python3 -m venv --clear "$venv" >&2
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps "${pins[@]}" >&2
  # Written last: a venv without it is redone next time.
  printf '%s\n' "$want" >"$venv/.pins"
fi
echo "$venv"
