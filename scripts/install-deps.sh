#!/usr/bin/env bash
# Installs the host packages Cove needs (Debian/Ubuntu, as root): runc (the container runtime),
# mmdebstrap (builds the `base` template), busybox-static (builds the `tiny` template and the
# qemu runtime's initramfs), lxcfs (sandboxes see their own memory and CPUs in /proc),
# python3-venv (the Python SDK's tests), nftables + iproute2 (sandbox networks and the egress
# gateway, crates/network), qemu-system-x86 + qemu-utils (the qemu runtime), lz4 (unpacks the
# guest kernel), e2fsprogs (`mkfs.ext4 -d` for VM disks), apt (downloads the guest kernel .deb),
# postgresql (the server the store's conformance suite runs its PostgreSQL half on), chromium
# (the web console's browser test drives it headless through playwright-core from npm, which
# scripts/test-console.sh installs with `npm ci` in console/), protobuf-compiler (`protoc`,
# which builds the node gRPC code of crates/node-rpc), runsc (gVisor: the `gvisor` runtime,
# whose suites the tests run with COVE_TEST_RUNTIME=gvisor).
# Safe to run again: it installs only what is missing.
# `scripts/install-deps.sh main` installs only what README command 1 (scripts/demo.sh: build
# Cove, run a server, build `base`, run a sandbox) needs; with no argument (or `all`) it also
# installs what only the tests need (QEMU, PostgreSQL, Chromium, Node, the S3 test server).
set -euo pipefail

scope="${1:-all}"
case "$scope" in
  main|all) ;;
  *) echo "install-deps: unknown scope '$scope' (main or all)" >&2; exit 2 ;;
esac

need=()
# The main job: runtime, template builds, sandbox networks, own disks, the build itself.
command -v runc >/dev/null || need+=(runc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
command -v lxcfs >/dev/null || need+=(lxcfs)
if ! [ -x /bin/busybox ] || ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  need+=(busybox-static)
fi
command -v file >/dev/null || need+=(file)
command -v curl >/dev/null || need+=(curl)
command -v python3 >/dev/null || need+=(python3)
command -v nft >/dev/null || need+=(nftables)
command -v ip >/dev/null || need+=(iproute2)
command -v mkfs.ext4 >/dev/null || need+=(e2fsprogs)
command -v protoc >/dev/null || need+=(protobuf-compiler)
if [ "$scope" = all ]; then
  # The Python SDK's tests run in a venv (scripts/test-python.sh).
  python3 -c 'import ensurepip, venv' 2>/dev/null || need+=(python3-venv)
  command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
  command -v qemu-img >/dev/null || need+=(qemu-utils)
  command -v lz4 >/dev/null || need+=(lz4)
  # The gvisor runtime (`cove server --runtime gvisor`): its suites run in the tests.
  command -v runsc >/dev/null || need+=(runsc)
  # The E2B compatibility tests drive the real E2B SDKs (Python in a venv, JavaScript via npm).
  command -v npm >/dev/null || need+=(nodejs npm)
  ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
  command -v chromium >/dev/null || need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to install: ${need[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
# Installing Debian's qemu-system-x86 removes a qemu-utils of another version (a backport
# preinstalled on some images), which takes `qemu-img` away: install the matching one after.
if [ "$scope" = all ] && ! command -v qemu-img >/dev/null && [ "$(id -u)" = 0 ]; then
  echo "install-deps: installing qemu-utils (matching qemu-system-x86)" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq qemu-utils >/dev/null
fi
tools=(nft runc mmdebstrap protoc)
[ "$scope" = all ] && tools+=(qemu-system-x86_64 qemu-img chromium runsc)
for tool in "${tools[@]}"; do
  command -v "$tool" >/dev/null || { echo "install-deps: $tool is still missing" >&2; exit 1; }
done
command -v cargo >/dev/null || { echo "install-deps: cargo (Rust stable) is required" >&2; exit 1; }
[ "$scope" = main ] && exit 0
# The snapshot store's S3 test (tests/e2e_s3.rs) runs a real S3 server: s3s-fs from crates.io,
# built once per machine into /var/cache/cove-tools (0.14.1: the newest that builds on the
# machine's rustc 1.95; about 10 minutes the first time on 2 cores).
S3S_FS=/var/cache/cove-tools/bin/s3s-fs
if ! [ -x "$S3S_FS" ]; then
  echo "install-deps: building s3s-fs (S3 server for tests/e2e_s3.rs)" >&2
  cargo install -q --locked s3s-fs@0.14.1 --features binary --root /var/cache/cove-tools
fi
