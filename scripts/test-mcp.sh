#!/usr/bin/env bash
# Cove's MCP server tested with the official `mcp` Python SDK (PyPI) as the client, over
# stdio (`cove mcp`) and streamable HTTP (`/mcp`), against a real server started by
# tests/e2b/cove_server.py (loopback only). The SDK lives in a venv outside the clone
# (COVE_MCP_VENV, default /var/cache/cove-venv-mcp). Needs root, runc, the `cove` binary and
# the guest agent (built here).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
export COVE_TEST_CACHE_DIR="${COVE_TEST_CACHE_DIR:-/var/cache/cove/templates}"
VENV="${COVE_MCP_VENV:-/var/cache/cove-venv-mcp}"

cargo build --locked -q -p cove-cli
scripts/build-guest-agent.sh >/dev/null
export COVE_BIN="$CARGO_TARGET_DIR/debug/cove"
export COVE_GUEST_AGENT="${COVE_GUEST_AGENT:-$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check \
  "mcp==2.3.0" "pytest==9.2.0" "pytest-asyncio==1.5.0"

"$VENV/bin/python" -m pytest -q -p no:cacheprovider -c tests/mcp/pytest.ini tests/mcp
