#!/usr/bin/env bash
# Runs the whole suite against a redis-server of its own on a free loopback port, then stops it.
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d /tmp/gateway-test.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
cleanup() { kill "$(cat "$work/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
export TEST_REDIS_URL="redis://127.0.0.1:$port/0"
swift build --build-tests
swift test --skip-build "$@"
