#!/usr/bin/env bash
# Installs the host packages Cove needs (Debian/Ubuntu, as root): runc (the container runtime),
# mmdebstrap (builds the `base` template), busybox-static (builds the `tiny` template),
# postgresql (the server the store's conformance suite runs its PostgreSQL half on).
# Safe to run again: it installs only what is missing.
set -euo pipefail

need=()
command -v runc >/dev/null || need+=(runc)
command -v mmdebstrap >/dev/null || need+=(mmdebstrap)
if ! [ -x /bin/busybox ] || ! file -L /bin/busybox 2>/dev/null | grep -q 'statically linked'; then
  need+=(busybox-static)
fi
command -v file >/dev/null || need+=(file)
command -v curl >/dev/null || need+=(curl)
ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || need+=(postgresql)
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
command -v cargo >/dev/null || { echo "install-deps: cargo (Rust stable) is required" >&2; exit 1; }
