#!/usr/bin/env bash
# A throwaway PostgreSQL cluster for the store conformance tests, listening only on a unix
# socket inside its own directory (no TCP port, so runs never collide).
#   scripts/postgres-test-cluster.sh start DIR   # initdb + start; prints the connection URL
#   scripts/postgres-test-cluster.sh stop DIR    # stop (fast) and remove DIR
# As root the cluster runs as the `postgres` user (initdb refuses root). Needs Debian's
# `postgresql` package (scripts/install-deps.sh installs it).
set -euo pipefail

cmd="${1:?usage: $0 start|stop DIR}"
dir="${2:?usage: $0 start|stop DIR}"

bindir() {
  local d
  d="$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)"
  if [ -z "$d" ] || ! [ -x "$d/initdb" ]; then
    echo "postgres-test-cluster: no PostgreSQL server found under /usr/lib/postgresql" >&2
    exit 1
  fi
  echo "$d"
}

# Runs a PostgreSQL tool as the cluster's owner, from `/` (the owner may not read the cwd).
as_owner() {
  if [ "$(id -u)" = 0 ]; then
    (cd / && runuser -u postgres -- "$@")
  else
    (cd / && "$@")
  fi
}

case "$cmd" in
  start)
    bin="$(bindir)"
    mkdir -p "$dir"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$dir"
    chmod 700 "$dir"
    as_owner "$bin/initdb" -D "$dir/data" -U postgres --auth=trust -E UTF8 --no-sync \
      >"$dir/initdb.log" 2>&1 || { cat "$dir/initdb.log" >&2; exit 1; }
    as_owner "$bin/pg_ctl" -D "$dir/data" -l "$dir/server.log" -w -t 60 \
      -o "-c listen_addresses='' -k $dir -c max_connections=300 -c fsync=off \
          -c synchronous_commit=off -c full_page_writes=off" \
      start >/dev/null || { cat "$dir/server.log" >&2; exit 1; }
    echo "postgres://postgres@localhost/postgres?host=$dir"
    ;;
  stop)
    if [ -f "$dir/data/postmaster.pid" ]; then
      as_owner "$(bindir)/pg_ctl" -D "$dir/data" -m fast -w stop >/dev/null 2>&1 || true
    fi
    rm -rf "$dir"
    ;;
  *)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
