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
# CI (CI=true) installs every tool the suite uses: there a test that would skip for a missing tool fails instead,
# and any skip fails the run. Elsewhere a missing tool is a skip, counted in the summary.
under_ci=false
if [ -n "${CI:-}" ] && [ "${CI}" != "false" ] && [ "${CI}" != "0" ]; then under_ci=true; fi
# The JWKS test checks minted tokens with Python's cryptography package (an implementation not ours). The Debian
# package serves /usr/bin/python3; another python3 first on PATH gets it from PyPI.
if ! python3 -c 'import cryptography' 2>/dev/null; then
    if ! { python3 -m pip install -q --user cryptography 2>/dev/null \
           || python3 -m pip install -q --user --break-system-packages cryptography 2>/dev/null; }; then
        if $under_ci; then echo "test.sh: could not install Python's cryptography (CI needs it)" >&2; exit 1; fi
        echo "test.sh: could not install Python's cryptography: the JWKS verification test will be skipped"
    fi
fi
# The iOS client library on its own: it must build without any server module.
swift build --target AppAttestClient
./scripts/typecheck-apple-client.sh
swift build --build-tests
# XCTest only (the suite has no Swift Testing tests); the last line is the plain "N passed, N failed, N skipped" summary.
set +e
swift test --skip-build --disable-swift-testing "$@" 2>&1 | tee "$work/test.log"
status=${PIPESTATUS[0]}
set -e
# Counted per test case: XCTest's own "with N failures" counts failed assertions, not tests.
passed=$(grep -cE "^Test Case '.*' passed" "$work/test.log" || true)
failed=$(grep -cE "^Test Case '.*' failed" "$work/test.log" || true)
skipped=$(grep -cE "^Test Case '.*' skipped" "$work/test.log" || true)
if [ "$status" -ne 0 ] && [ "$failed" -eq 0 ]; then echo "the test process failed without a failed test (exit $status): see above"; fi
if $under_ci && [ "$skipped" -gt 0 ]; then
    echo "skipped under CI (every tool is installed there, so a skip hides a test that did not run):"
    grep -E "^Test Case '.*' skipped" "$work/test.log"
    if [ "$status" -eq 0 ]; then status=1; fi
fi
echo "$passed passed, $failed failed, $skipped skipped"
exit "$status"
