#!/usr/bin/env bash
# README command 1: Cove's main job on a fresh machine (as root). Installs what is missing,
# builds Cove, starts a server, builds the `base` template once (cached in
# /var/cache/cove/templates), creates a sandbox, uploads a small Python data analysis, runs it,
# prints the report.csv it wrote, and deletes the sandbox.
set -euo pipefail
cd "$(dirname "$0")/.."

# Each phase says how long it took, so a slow first run shows where the time went.
phase_start=$SECONDS
phase() {
  [ -n "${phase_name:-}" ] && echo "    ($phase_name: $((SECONDS - phase_start)) s)" >&2
  phase_name="$1"; phase_start=$SECONDS
  [ -n "$1" ] && echo "==> $1" >&2
  return 0
}
phase "installing what the main job needs (only what is missing)"
scripts/install-deps.sh main
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
# The dev profile: what the test suite builds too, and about a quarter of a release build's
# compile time (the release build was ~580 s of a ~590 s cold run here). Production builds
# use `--release` (docs/deploy.md).
phase "building cove (dev profile)"
cargo build --locked -q -p cove-cli
scripts/build-guest-agent.sh >/dev/null
BIN_DIR="$CARGO_TARGET_DIR/debug"
AGENT="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent"
cove() { "$BIN_DIR/cove" "$@"; }

export COVE_DATA_DIR="${COVE_DATA_DIR:-/var/lib/cove}"
export COVE_URL="${COVE_URL:-http://127.0.0.1:7700}"
LOG="$COVE_DATA_DIR/server.log"
mkdir -p "$COVE_DATA_DIR"

started=""
if ! curl -fsS "$COVE_URL/healthz" >/dev/null 2>&1; then
  phase "starting cove server (log: $LOG)"
  "$BIN_DIR/cove" server --data-dir "$COVE_DATA_DIR" --guest-agent "$AGENT" \
    --cache-dir /var/cache/cove/templates >"$LOG" 2>&1 &
  started=$!
  for _ in $(seq 1 100); do
    curl -fsS "$COVE_URL/healthz" >/dev/null 2>&1 && break
    kill -0 "$started" 2>/dev/null || { cat "$LOG" >&2; exit 1; }
    sleep 0.1
  done
fi
SANDBOX=""
cleanup() {
  [ -n "$SANDBOX" ] && cove rm "$SANDBOX" >/dev/null 2>&1 || true
  if [ -n "$started" ]; then kill -TERM "$started" 2>/dev/null || true; wait "$started" 2>/dev/null || true; fi
}
trap cleanup EXIT

if ! cove template ls --json | python3 -c 'import json,sys; d=json.load(sys.stdin); d=d["templates"] if isinstance(d,dict) else d; t={x["name"]:x for x in d}; sys.exit(0 if t["base"]["latest_release"] else 1)'; then
  phase "building the base template (once; later runs reuse the cache)"
  cove template build base >/dev/null
fi

phase "creating a sandbox"
SANDBOX=$(cove create --template base)
echo "    $SANDBOX" >&2
cove cp examples/analysis/analyze.py "$SANDBOX:/home/user/analyze.py"
phase "running the analysis inside the sandbox"
cove exec "$SANDBOX" -- python3 /home/user/analyze.py
echo "==> report.csv (written inside the sandbox)" >&2
cove cp "$SANDBOX:/home/user/report.csv" -
phase "deleting the sandbox"
cove rm "$SANDBOX" >/dev/null
SANDBOX=""
phase ""
