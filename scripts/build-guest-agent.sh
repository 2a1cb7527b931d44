#!/usr/bin/env bash
# Builds the static guest agent binary and prints its path.
#
#   scripts/build-guest-agent.sh [--release]
#
# glibc is linked statically (+crt-static); the explicit --target keeps that flag away from build
# scripts and proc-macros. Honours CARGO_TARGET_DIR.
set -euo pipefail

cd "$(dirname "$0")/.."

profile=debug
args=()
for arg in "$@"; do
  case "$arg" in
    --release)
      profile=release
      # The agent runs once per sandbox and its idle RSS is mostly its own code pages: a release
      # agent is built for size (see docs/performance.md), without changing the workspace's
      # release profile for everything else.
      args+=(--release
        --config 'profile.release.opt-level="s"'
        --config 'profile.release.lto="fat"'
        --config 'profile.release.codegen-units=1'
        --config 'profile.release.strip=true')
      ;;
    -h|--help) sed -n '2,7p' "$0"; exit 0 ;;
    *) echo "build-guest-agent.sh: unknown argument: $arg" >&2; exit 2 ;;
  esac
done

target=x86_64-unknown-linux-gnu
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static -C relocation-model=static" \
  cargo build -p cove-guest-agent --target "$target" ${args[@]+"${args[@]}"} >&2

target_dir="${CARGO_TARGET_DIR:-$(pwd)/target}"
echo "$target_dir/$target/$profile/cove-guest-agent"
