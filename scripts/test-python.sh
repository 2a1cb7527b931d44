#!/usr/bin/env bash
# Runs the Python SDK's test suite (python/tests) against a real `cove server` that its fixture
# starts (runc, the guest agent, the shared template cache). Needs root, like the e2e tests.
# The venv lives outside the clone (COVE_VENV, default /var/cache/cove-venv) and is reused.
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
export COVE_TEST_CACHE_DIR="${COVE_TEST_CACHE_DIR:-/var/cache/cove/templates}"
VENV="${COVE_VENV:-/var/cache/cove-venv}"

cargo build --locked -q -p cove-cli
scripts/build-guest-agent.sh >/dev/null
export COVE_BIN="$CARGO_TARGET_DIR/debug/cove"
export COVE_GUEST_AGENT="${COVE_GUEST_AGENT:-$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "./python[test]"

# Any failure fails the run, exit code 5 (no tests collected) included.
status=0
"$VENV/bin/python" -m pytest -q -p no:cacheprovider python/tests || status=$?
if [ "$status" -ne 0 ]; then
  echo "test-python: pytest exited $status$([ "$status" = 5 ] && echo ' (no tests were collected)')" >&2
  exit "$status"
fi
