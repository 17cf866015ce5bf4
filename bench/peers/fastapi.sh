#!/usr/bin/env bash
# The seed documents' webhook receiver (FastAPI + Redis SET NX + a Redis list), for
# hookd-bench's ingest comparison (--peer-url). On loopback.
#
#   bench/peers/fastapi.sh start [PORT] [WORKERS]   # prints the URL to pass to hookd-bench
#   bench/peers/fastapi.sh stop
#
# Uses Debian's redis-server (installs the package if missing) with the append-only file
# and `appendfsync always`, so an event it answers 202 for is on disk, as hookd's are
# (HOOKD_PEER_FSYNC=everysec for Redis's usual setting, which can lose the last second), and
# a venv with bench/peers/fastapi/requirements.txt. uvicorn runs WORKERS processes
# (default 1) with uvloop and httptools. State lives in $HOOKD_PEER_DIR
# (default /tmp/hookd-bench-fastapi).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${HOOKD_PEER_DIR:-/tmp/hookd-bench-fastapi}
port=${2:-58080}
workers=${3:-1}
redis_port=56379
fsync=${HOOKD_PEER_FSYNC:-always}
secret=${HOOKD_PEER_SECRET:-whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw}

case "${1:-}" in
start)
    if ! command -v redis-server >/dev/null; then
        echo "installing Debian's redis-server..." >&2
        apt-get update -qq >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq redis-server >&2
    fi
    mkdir -p "$dir/redis"
    if [ ! -x "$dir/venv/bin/python" ]; then
        python3 -m venv "$dir/venv" >&2
    fi
    "$dir/venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$here/fastapi/requirements.txt" >&2
    redis-server --port "$redis_port" --bind 127.0.0.1 --dir "$dir/redis" --daemonize yes \
        --pidfile "$dir/redis.pid" --logfile "$dir/redis.log" \
        --appendonly yes --appendfsync "$fsync" --save "" >&2
    for _ in $(seq 50); do
        redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
        sleep 0.1
    done
    redis-cli -p "$redis_port" flushall >/dev/null
    (
        cd "$here/fastapi"
        HOOKD_PEER_SECRET="$secret" HOOKD_PEER_REDIS="redis://127.0.0.1:$redis_port/0" \
            nohup "$dir/venv/bin/uvicorn" app:app --host 127.0.0.1 --port "$port" \
            --workers "$workers" --loop uvloop --http httptools --no-access-log \
            --log-level warning >"$dir/uvicorn.log" 2>&1 &
        echo $! >"$dir/uvicorn.pid"
    )
    for _ in $(seq 100); do
        curl -s -o /dev/null "http://127.0.0.1:$port/docs" && break
        sleep 0.1
    done
    echo "http://127.0.0.1:$port"
    ;;
stop)
    [ -f "$dir/uvicorn.pid" ] && kill "$(cat "$dir/uvicorn.pid")" 2>/dev/null || true
    redis-cli -p "$redis_port" shutdown nosave >/dev/null 2>&1 || true
    rm -f "$dir/uvicorn.pid"
    ;;
*)
    echo "usage: $0 start [PORT] [WORKERS] | stop" >&2
    exit 2
    ;;
esac
