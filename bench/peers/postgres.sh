#!/usr/bin/env bash
# A throwaway PostgreSQL for hookd-bench's SKIP LOCKED baseline (--pg-url), on loopback.
#
#   bench/peers/postgres.sh start [PORT]   # prints the URL to pass to hookd-bench
#   bench/peers/postgres.sh stop
#
# Uses Debian's PostgreSQL (installs the package if it is missing). The cluster lives in
# $HOOKD_PG_DIR (default /tmp/hookd-bench-pg) and is owned by the `postgres` user, since
# the server refuses to run as root. Settings are the defaults, fsync and
# synchronous_commit on: every committed outcome is durable, as hookd's are.
set -euo pipefail
dir=${HOOKD_PG_DIR:-/tmp/hookd-bench-pg}
port=${2:-55432}

bin() {
    local found
    found=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -n 1)
    if [ -z "$found" ]; then
        echo "installing Debian's postgresql..." >&2
        apt-get update >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y postgresql >&2
        found=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
    fi
    echo "$found"
}

as_postgres() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

case "${1:-}" in
start)
    b=$(bin)
    if [ ! -f "$dir/data/PG_VERSION" ]; then
        mkdir -p "$dir"
        [ "$(id -u)" = 0 ] && chown postgres: "$dir"
        as_postgres "$b/initdb" -D "$dir/data" -A trust -U hookd >&2
    fi
    as_postgres "$b/pg_ctl" -D "$dir/data" -l "$dir/log" -w \
        -o "-h 127.0.0.1 -p $port -k $dir -c max_connections=200" start >&2
    echo "postgres://hookd@127.0.0.1:$port/postgres"
    ;;
stop)
    b=$(bin)
    as_postgres "$b/pg_ctl" -D "$dir/data" -w stop -m fast >&2
    ;;
*)
    echo "usage: $0 start [PORT] | stop" >&2
    exit 2
    ;;
esac
