#!/usr/bin/env bash
# Removes a test server's data dir after the server has stopped: its runc containers, then
# every mount under the dir (overlays, own disks, idmapped releases, volumes and their clones;
# deepest first, lazily), then the dir. Used by the scripts that run a throwaway server.
# Usage: scripts/remove-server-data-dir.sh DATA_DIR
set -uo pipefail
dir="${1:?usage: remove-server-data-dir.sh DATA_DIR}"
[ -d "$dir" ] || exit 0
dir="$(cd "$dir" && pwd -P)"
for id in $(runc --root "$dir/runc" list -q 2>/dev/null); do
  runc --root "$dir/runc" delete -f "$id" >/dev/null 2>&1 || true
done
# /proc/self/mounts escapes spaces as \040; the scripts' data dirs (mktemp) have none.
awk -v d="$dir/" 'index($2, d) == 1 { print $2 }' /proc/self/mounts | sort -r |
  while read -r m; do umount -l "$m" 2>/dev/null || true; done
rm -rf "$dir"
