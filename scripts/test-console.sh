#!/usr/bin/env bash
# The web console end to end: rebuilds console/dist from its sources (npm ci + esbuild) and
# fails when the checked-in bundle differs, then drives the console in headless Chromium
# (Debian's `chromium` through playwright-core, console/test) against a real `cove server` on
# loopback (runc, the guest agent, the shared template cache). Screenshots are kept in
# COVE_CONSOLE_ARTIFACTS (default target-dir/console-artifacts). COVE_CONSOLE_README_SHOT=PATH
# also saves the sandbox page there (how docs/console.png is made).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
export COVE_TEST_CACHE_DIR="${COVE_TEST_CACHE_DIR:-/var/cache/cove/templates}"
export COVE_CONSOLE_ARTIFACTS="${COVE_CONSOLE_ARTIFACTS:-$CARGO_TARGET_DIR/console-artifacts}"

cargo build --locked -q -p cove-cli
scripts/build-guest-agent.sh >/dev/null
COVE_BIN="$CARGO_TARGET_DIR/debug/cove"
AGENT="${COVE_GUEST_AGENT:-$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent}"

# The bundle embedded in the binary must be what the sources build to.
fresh="$(mktemp -d /tmp/cove-console-dist.XXXXXX)"
(cd console && npm ci --no-audit --no-fund --loglevel=error >/dev/null && node build.mjs "$fresh")
if ! diff -r "$fresh" console/dist >/dev/null; then
  echo "test-console: console/dist is stale: run (cd console && npm ci && npm run build) and commit it" >&2
  diff -rq "$fresh" console/dist >&2 || true
  rm -rf "$fresh"
  exit 1
fi
rm -rf "$fresh"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
data_dir="$(mktemp -d /tmp/cove-console.XXXXXX)"
api_port="$(free_port)"
dp_port="$(free_port)"
e2b_port="$(free_port)"
url="http://127.0.0.1:$api_port"
server_pid=""
# Its own namespace prefix, so what it leaves can be told from other servers'.
net_prefix="ts$(od -An -N3 -tx1 /dev/urandom | tr -d ' \n')"

cleanup() {
  local status=$?
  # SIGTERM as an operator stops it; fails the run when it leaves network state behind.
  if [ -n "$server_pid" ]; then
    "$root/scripts/stop-test-server.sh" "$server_pid" "$data_dir" "$net_prefix" || status=1
  else
    "$root/scripts/remove-server-data-dir.sh" "$data_dir"
  fi
  exit "$status"
}
trap cleanup EXIT

# Sandbox networks on (the port proxy reaches a sandbox's port through its namespace); the
# tests' sandboxes get no internet (their policy), and the browser reaches loopback only.
"$COVE_BIN" server --data-dir "$data_dir" --network-prefix "$net_prefix" --listen "127.0.0.1:$api_port" \
  --data-plane-listen "127.0.0.1:$dp_port" --e2b-listen "127.0.0.1:$e2b_port" \
  --guest-agent "$AGENT" --network on \
  --proxy-listen off --cache-dir "$COVE_TEST_CACHE_DIR" >"$data_dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  curl -fsS "$url/healthz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$data_dir/server.log" >&2; exit 1; }
  sleep 0.1
done
token="$(cat "$data_dir/admin.token")"
COVE_URL="$url" COVE_TOKEN="$token" "$COVE_BIN" template build base >/dev/null

status=0
COVE_URL="$url" COVE_DATA_PLANE_URL="http://127.0.0.1:$dp_port" COVE_TOKEN="$token" \
  COVE_E2B_URL="http://127.0.0.1:$e2b_port" \
  node --test --test-reporter=spec console/test/ || status=$?
if [ "$status" -ne 0 ]; then
  echo "test-console: failed (screenshots in $COVE_CONSOLE_ARTIFACTS); server log tail:" >&2
  tail -n 40 "$data_dir/server.log" >&2
fi
exit "$status"
