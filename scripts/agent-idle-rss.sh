#!/usr/bin/env bash
# Starts a guest agent on the host (a temporary socket and run dir), lets it settle, prints its
# idle memory from /proc (VmRSS, RssAnon, RssFile, threads, minor faults) and, with -v, the
# resident kB of each mapping; then stops it. The figures behind docs/performance.md.
#
#   scripts/agent-idle-rss.sh [-v] [AGENT]     (default: the release build under CARGO_TARGET_DIR)
set -euo pipefail

verbose=0
if [[ "${1:-}" == "-v" ]]; then verbose=1; shift; fi
case "${1:-}" in -h|--help) sed -n '2,6p' "$0"; exit 0 ;; esac
target_dir="${CARGO_TARGET_DIR:-$(cd "$(dirname "$0")/.." && pwd)/target}"
agent="${1:-$target_dir/x86_64-unknown-linux-gnu/release/cove-guest-agent}"
[[ -x "$agent" ]] || { echo "agent-idle-rss.sh: no agent at $agent" >&2; exit 2; }

dir=$(mktemp -d)
"$agent" --listen "$dir/sock" --run-dir "$dir/run" 2>"$dir/log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null; rm -rf "$dir"' EXIT
for _ in $(seq 1 50); do [[ -S "$dir/sock" ]] && break; sleep 0.1; done
[[ -S "$dir/sock" ]] || { echo "agent-idle-rss.sh: the agent did not listen:" >&2; cat "$dir/log" >&2; exit 1; }
sleep 1

echo "binary: $agent ($(stat -c %s "$agent") bytes)"
grep -E '^(VmRSS|RssAnon|RssFile|Threads):' "/proc/$pid/status" | tr -s ' \t' ' '
awk '{print "minor faults: " $10}' "/proc/$pid/stat"
if [[ $verbose == 1 ]]; then
  awk '/^[0-9a-f]+-/{name=$0} /^Rss:/{if ($2 > 0) printf "%6d kB  %s\n", $2, name}' "/proc/$pid/smaps"
fi
