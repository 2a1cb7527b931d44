#!/usr/bin/env bash
# README command 2: runs Cove's whole test suite (lints, unit tests, end-to-end tests with a real
# server, real runc sandboxes and the real guest agent). Needs root (runc, mounts, cgroups).
set -euo pipefail
cd "$(dirname "$0")/.."

scripts/install-deps.sh
# A throwaway PostgreSQL cluster (unix socket only) for the store's PostgreSQL conformance
# cases; stopped and removed at exit.
pg_dir="$(mktemp -d /tmp/cove-pg.XXXXXX)"
trap 'scripts/postgres-test-cluster.sh stop "$pg_dir"' EXIT
COVE_TEST_POSTGRES_URL="$(scripts/postgres-test-cluster.sh start "$pg_dir")"
export COVE_TEST_POSTGRES_URL
# A build cache outside the clone keeps repeated runs fast.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
# No incremental caches: one run of the suite gains nothing from them and they cost ~19 GB of
# disk (a full disk once failed CI); set CARGO_INCREMENTAL=1 for edit-and-rerun work.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"
# Release root filesystems are cached per machine: `base` is built once.
export COVE_TEST_CACHE_DIR="${COVE_TEST_CACHE_DIR:-/var/cache/cove/templates}"

cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked -q
scripts/build-guest-agent.sh
export COVE_GUEST_AGENT="$CARGO_TARGET_DIR/x86_64-unknown-linux-gnu/debug/cove-guest-agent"
cargo test --workspace --locked --no-fail-fast -- --test-threads=4
# The lifecycle suites and the C01-C15 cases again on gVisor (`--runtime gvisor`, Debian's runsc
# from install-deps); the harness fails when runsc is missing.
COVE_TEST_RUNTIME=gvisor cargo test -p cove-e2e --locked --no-fail-fast \
  --test e2e_lifecycle --test e2e_lifecycle_states --test e2e_cases --test e2e_network \
  --test e2e_ports -- --test-threads=4
# Left out (see docs/runtimes.md): C13 (on gVisor a command over the memory limit ends the whole
# sandbox: the host's OOM killer takes gVisor's kernel), C14 (/tmp is gVisor's own tmpfs, not
# the sandbox's disk) and C11 step 3 (this gVisor opens a file through a symlink to `/` and a
# bind-mounted file as a directory).
COVE_TEST_RUNTIME=gvisor cargo test -p cove-e2e --locked --no-fail-fast \
  --test e2e_auth --test e2e_commands --test e2e_files --test e2e_files_paths \
  -- --test-threads=4 c04 c06 c10 c11_step1 c11_step2 c15
# The Python SDK's suite against a real `cove server` (its own venv outside the clone).
scripts/test-python.sh
# The management API against its OpenAPI document: schemathesis on a live server (loopback).
scripts/test-openapi.sh
# E2B compatibility: the real E2B Python and JavaScript SDKs against a real server.
scripts/test-e2b.sh
# The MCP server (stdio and streamable HTTP) with the official `mcp` Python SDK as the client.
scripts/test-mcp.sh
# The Kubernetes manifests validate against the Kubernetes schemas and pass only flags `cove` has.
scripts/test-deploy.sh
# The web console in headless Chromium (playwright-core), and its checked-in bundle is current.
scripts/test-console.sh
