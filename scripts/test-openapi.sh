#!/usr/bin/env bash
# Fuzzes the management API against its own OpenAPI document: schemathesis (PyPI, in a venv
# outside the clone: COVE_OPENAPI_VENV, default /var/cache/cove-venv-openapi) against a live
# `cove server` on loopback (runc, the guest agent, the shared template cache). Fails on any
# 5xx and on answers that do not match the document. Bounded: a few examples per operation
# and a time budget.
#
# Left out, and why:
# - POST /v1/sandboxes: every accepted example starts a real sandbox (hundreds of them).
# - POST /v1/templates/{name}/releases: a build of `base` takes minutes and fetches packages
#   from a Debian mirror (no traffic off loopback here).
# - GET /v1/events: a stream that never ends by design.
# - PUT /v1/pools/{name}: every accepted example makes a warm pool whose controller boots up to
#   `min_ready` real sandboxes.
# Everything else runs, on a server with one running `tiny` sandbox and none of the random ids
# schemathesis makes up, so sandbox-scoped calls mostly answer 404 (which the document says).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$(pwd)"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
export COVE_TEST_CACHE_DIR="${COVE_TEST_CACHE_DIR:-/var/cache/cove/templates}"
VENV="${COVE_OPENAPI_VENV:-/var/cache/cove-venv-openapi}"
MAX_EXAMPLES="${COVE_OPENAPI_MAX_EXAMPLES:-10}"
# Extra schemathesis arguments (e.g. `--include-operation-id operations_logs` to focus).
read -r -a EXTRA <<<"${COVE_OPENAPI_ARGS:-}"

cargo build --locked -q -p cove-cli
scripts/build-guest-agent.sh >/dev/null
COVE_BIN="$CARGO_TARGET_DIR/debug/cove"
AGENT="${COVE_GUEST_AGENT:-$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "schemathesis==4.32.5"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
data_dir="$(mktemp -d /tmp/cove-openapi.XXXXXX)"
report_dir="$(mktemp -d /tmp/cove-openapi-report.XXXXXX)"
api_port="$(free_port)"
dp_port="$(free_port)"
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
  rm -rf "$report_dir"
  exit "$status"
}
trap cleanup EXIT

"$COVE_BIN" server --data-dir "$data_dir" --network-prefix "$net_prefix" --listen "127.0.0.1:$api_port" \
  --data-plane-listen "127.0.0.1:$dp_port" --guest-agent "$AGENT" \
  --proxy-listen 127.0.0.1:0 --cache-dir "$COVE_TEST_CACHE_DIR" >"$data_dir/server.log" 2>&1 &
server_pid=$!
for _ in $(seq 1 600); do
  python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
    "$url/healthz" >/dev/null 2>&1 && break
  kill -0 "$server_pid" 2>/dev/null || { cat "$data_dir/server.log" >&2; exit 1; }
  sleep 0.1
done
token="$(cat "$data_dir/admin.token")"
export COVE_URL="$url" COVE_TOKEN="$token"
"$COVE_BIN" template build tiny >/dev/null
"$COVE_BIN" create --template tiny >/dev/null

status=0
# templates_create takes a tar build context that fuzzing cannot make meaningfully (and a
# valid one would start real builds); tests/e2e_templates_file.rs covers it.
# Excluded below: checkpoints_import needs a real checkpoint archive as its body (a tar of a
# checkpoint of this node's runtime); e2e_checkpoint_archives tests it, hostile archives too.
# From the report dir, so schemathesis's example cache stays out of the clone.
cd "$report_dir"
"$VENV/bin/schemathesis" run "$url/v1/openapi.json" \
  --header "Authorization: Bearer $token" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --exclude-operation-id sandboxes_create \
  --exclude-operation-id templates_build \
  --exclude-operation-id templates_create \
  --exclude-operation-id events_stream \
  --exclude-operation-id pools_put \
  --exclude-operation-id checkpoints_import \
  --phases examples,coverage,fuzzing \
  --max-examples "$MAX_EXAMPLES" --max-time 240 --request-timeout 30 --seed 1 \
  --workers 2 --no-shrink --warnings off \
  --report junit --report-dir "$report_dir" "${EXTRA[@]}" || status=$?
if [ "$status" -ne 0 ]; then
  echo "test-openapi: schemathesis found problems (exit $status); server log tail:" >&2
  tail -n 40 "$data_dir/server.log" >&2
fi
exit "$status"
