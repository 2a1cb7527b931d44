#!/usr/bin/env bash
# Stops a throwaway test server as an operator does and checks it released what it prepared
# on the host, then removes everything it had.
#
# Usage: scripts/stop-test-server.sh PID DATA_DIR NETWORK_PREFIX
#
# SIGTERM, then up to 60 s for the process to exit (SIGKILL after that). A server that exits
# on SIGTERM must leave none of its network namespaces (`NETWORK_PREFIX-*`: the gateway and
# the ready pool) but those a still-running sandbox holds (named by a record in
# `DATA_DIR/network/*.json`, kept for the next start to adopt). Then the data dir goes
# (scripts/remove-server-data-dir.sh) and every namespace of the prefix with it.
# Exit status 1 when the server had to be killed or left network state behind (printed).
set -uo pipefail
pid="${1:?usage: stop-test-server.sh PID DATA_DIR NETWORK_PREFIX}"
dir="${2:?usage: stop-test-server.sh PID DATA_DIR NETWORK_PREFIX}"
prefix="${3:?usage: stop-test-server.sh PID DATA_DIR NETWORK_PREFIX}"
root="$(cd "$(dirname "$0")/.." && pwd)"
status=0

namespaces() { ip netns list 2>/dev/null | awk -v p="$prefix-" 'index($1, p) == 1 { print $1 }'; }

if kill -0 "$pid" 2>/dev/null; then
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 600); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    kill -KILL "$pid" 2>/dev/null || true
    echo "stop-test-server: the server did not exit within 60 s of SIGTERM" >&2
    status=1
  fi
fi
if [ "$status" -eq 0 ] && [ -d "$dir" ]; then
  claimed="$(python3 - "$dir/network" <<'EOF'
import json, os, sys
d = sys.argv[1]
for name in (os.listdir(d) if os.path.isdir(d) else []):
    try:
        with open(os.path.join(d, name), "rb") as f:
            ns = json.load(f).get("netns")
    except (OSError, ValueError, AttributeError):
        continue
    if isinstance(ns, str):
        print(ns)
EOF
)"
  left="$(namespaces | grep -vxF -f <(printf '%s\n' "$claimed") || true)"
  if [ -n "$left" ]; then
    echo "stop-test-server: the server left network namespaces behind after SIGTERM:" $left >&2
    status=1
  fi
fi
"$root/scripts/remove-server-data-dir.sh" "$dir"
for _ in 1 2 3 4 5; do
  left="$(namespaces)"
  [ -z "$left" ] && break
  for ns in $left; do ip netns delete "$ns" 2>/dev/null || true; done
  sleep 0.05
done
exit "$status"
