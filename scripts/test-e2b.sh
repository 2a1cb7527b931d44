#!/usr/bin/env bash
# E2B compatibility tests: the real E2B SDKs, pinned at the newest versions the registries had
# (PyPI `e2b==2.63.0`, sync and async clients, and `e2b-code-interpreter==2.11.5`; npm
# `e2b@2.51.0` and `@e2b/code-interpreter@2.8.0`) against a real Cove server started by tests/e2b/cove_server.py.
# The code-interpreter template is built offline from wheels downloaded here, on the host,
# into COVE_CI_WHEELS (templates/code-interpreter/requirements.txt), and from Debian 12's
# nodejs with the packages it needs, as .debs in COVE_CI_DEBS (resolved by apt on the host
# against an empty package database, so the list is complete whatever the host has; the
# build skips those the base template has); nothing in a sandbox or a build fetches from the
# internet. The host's apt must have Debian 12 (bookworm) sources.
# Installs the SDKs outside the clone (a virtualenv and a node_modules dir under
# /var/cache). Needs root, runc, the `cove` binary and the guest agent (built here).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
export COVE_TEST_CACHE_DIR="${COVE_TEST_CACHE_DIR:-/var/cache/cove/templates}"
VENV="${COVE_E2B_VENV:-/var/cache/cove-venv-e2b}"
NODE_DIR="${COVE_E2B_NODE_DIR:-/var/cache/cove-node-e2b}"
export COVE_CI_WHEELS="${COVE_CI_WHEELS:-/var/cache/cove/code-interpreter-wheels}"
export COVE_CI_DEBS="${COVE_CI_DEBS:-/var/cache/cove/code-interpreter-debs}"

cargo build --locked -q -p cove-cli
# The network tests' fake internet and the server they point at it (test-only binaries).
cargo build --locked -q -p cove-e2e --bin cove-e2e-server --bin cove-e2e-lab
scripts/build-guest-agent.sh >/dev/null
export COVE_BIN="$CARGO_TARGET_DIR/debug/cove"
export COVE_E2E_SERVER="$CARGO_TARGET_DIR/debug/cove-e2e-server"
export COVE_E2E_LAB="$CARGO_TARGET_DIR/debug/cove-e2e-lab"
export COVE_GUEST_AGENT="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent"

if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
"$VENV/bin/pip" install -q --disable-pip-version-check \
  "e2b==2.63.0" "e2b-code-interpreter==2.11.5" "pytest==9.2.0" "pytest-asyncio==1.5.0"
# The code-interpreter template's packages, as wheels for the template's Python (Debian 12's
# 3.11), installed offline by its build.
mkdir -p "$COVE_CI_WHEELS"
"$VENV/bin/pip" download -q --disable-pip-version-check --only-binary=:all: \
  --python-version 3.11 --implementation cp --abi cp311 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -d "$COVE_CI_WHEELS" -r templates/code-interpreter/requirements.txt
# Node.js for the template's JavaScript contexts: `nodejs` and its dependency closure as a
# fresh Debian 12 would install it (no recommends), each pinned to the version apt chose.
if ! grep -qs '^VERSION_CODENAME=bookworm' /etc/os-release; then
  echo "test-e2b.sh: the code-interpreter template's .debs come from the host's apt, which must be Debian 12" >&2
  exit 1
fi
debs=$(apt-get install -qq --no-install-recommends --print-uris \
  -o Dir::State::status=/dev/null nodejs \
  | awk '{print $2}' | sed -E 's/%3a/:/; s/^([^_]+)_([^_]+)_[^_]+\.deb$/\1=\2/')
if [ -z "$debs" ] || ! grep -q '^nodejs=' <<<"$debs"; then
  echo "test-e2b.sh: apt resolved no nodejs package list" >&2
  exit 1
fi
if [ "$(cat "$COVE_CI_DEBS/.list" 2>/dev/null)" != "$debs" ]; then
  rm -rf "$COVE_CI_DEBS.tmp" && mkdir -p "$COVE_CI_DEBS.tmp"
  # shellcheck disable=SC2086 # one word per package
  (cd "$COVE_CI_DEBS.tmp" && apt-get download -qq -o APT::Sandbox::User=root $debs)
  printf '%s\n' "$debs" >"$COVE_CI_DEBS.tmp/.list"
  rm -rf "$COVE_CI_DEBS" && mv "$COVE_CI_DEBS.tmp" "$COVE_CI_DEBS"
fi

mkdir -p "$NODE_DIR"
if [ ! -f "$NODE_DIR/package.json" ]; then
  (cd "$NODE_DIR" && npm init -y >/dev/null)
fi
(cd "$NODE_DIR" && npm install -q --no-audit --no-fund e2b@2.51.0 @e2b/code-interpreter@2.8.0 >/dev/null)
export E2B_NODE_MODULES="$NODE_DIR/node_modules"

# Python SDKs (test_code_interpreter.py also runs the JavaScript Code Interpreter SDK against
# the template it built), then the JavaScript base SDK against a fresh server.
"$VENV/bin/python" -m pytest -q -c tests/e2b/pytest.ini tests/e2b
"$VENV/bin/python" tests/e2b/node_runner.py
