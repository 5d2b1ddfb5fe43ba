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
# The JWKS test checks minted tokens with Python's cryptography package (an implementation not ours). The Debian
# package serves /usr/bin/python3; another python3 first on PATH gets it from PyPI. Without it that test is skipped.
if ! python3 -c 'import cryptography' 2>/dev/null; then
    python3 -m pip install -q --user cryptography 2>/dev/null || python3 -m pip install -q --user --break-system-packages cryptography \
        2>/dev/null || echo "test.sh: could not install Python's cryptography: the JWKS verification test will be skipped"
fi
swift build --build-tests
# XCTest only (the suite has no Swift Testing tests); the last line is the plain "N passed, N failed" summary.
set +e
swift test --skip-build --disable-swift-testing "$@" 2>&1 | tee "$work/test.log"
status=${PIPESTATUS[0]}
set -e
# Counted per test case: XCTest's own "with N failures" counts failed assertions, not tests.
passed=$(grep -cE "^Test Case '.*' passed" "$work/test.log" || true)
failed=$(grep -cE "^Test Case '.*' failed" "$work/test.log" || true)
echo "$passed passed, $failed failed"
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then echo "the test process failed without a failed test (exit $status): see above"; fi
exit "$status"
