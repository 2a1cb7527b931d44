#!/usr/bin/env bash
# Checks the Kubernetes manifests in deploy/kubernetes: each resource validates strictly against
# the Kubernetes schemas (kubernetes-validate from PyPI, in a venv outside the clone), and every
# flag a container passes to `cove` exists in that binary's --help (so a renamed flag breaks CI,
# not a deployment).
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/var/cache/cove-target}"
VENV="${COVE_DEPLOY_VENV:-/var/cache/cove-deploy-venv}"

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
"$VENV/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==1.37.0"
"$VENV/bin/kubernetes-validate" --strict --quiet deploy/kubernetes/*.yaml

cargo build --locked -q -p cove-cli
"$VENV/bin/python" scripts/check-deploy-flags.py "$CARGO_TARGET_DIR/debug/cove" deploy/kubernetes/*.yaml
echo "test-deploy: manifests valid; every flag they pass exists"
