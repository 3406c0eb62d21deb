#!/usr/bin/env bash
# One command from a fresh clone to a running demo environment: system packages, npm ci, build,
# a guest image (`pi-sandbox image build`: built locally, cached, the same one npm test boots),
# then `pi-sandbox create demo` (or `start` if it exists).
set -euo pipefail
cd "$(dirname "$0")/.."

./scripts/install-system-deps.sh
[ -d node_modules ] || npm ci --no-audit --no-fund
npm run -s build >/dev/null
cli() { npx --no-install pi-sandbox "$@"; }
echo "getting a guest image (the first build takes a few minutes)…" >&2
cli image build >&2

mkdir -p .demo
cat > .demo/sandbox.yaml <<YAML
version: 1
profile: tiny
diskGiB: 4
image: default
setup:
  - printf 'Hello from the guest\n' > /workspace/index.html
services:
  web:
    command: python3 -m http.server \$PORT --bind 127.0.0.1
    health: /
    preview: true
YAML

if cli inspect demo >/dev/null 2>&1; then
  cli start demo
else
  cli create demo -c .demo/sandbox.yaml
fi
url=$(cli call '{"action":"inspect","name":"demo"}' | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).previews[0]?.url??""))')
echo
echo "demo is running. Preview: $url"
[ -n "$url" ] && curl -s "$url"
echo
cat <<'NEXT'
Next:
  npx pi-sandbox exec demo -- ls -la        # run a command in the guest workspace
  npx pi-sandbox stop demo                  # checkpoint the disk; start demo reopens it
  npx pi-sandbox destroy demo --confirm demo
NEXT
