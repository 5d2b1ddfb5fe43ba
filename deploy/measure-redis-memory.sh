#!/usr/bin/env bash
# Measures Redis memory per registered key and per challenge with the gateway's own key layout
# (Sources/Gateway/Store/StoreKeys.swift): starts a throwaway redis-server on a free loopback port,
# writes N records of each kind with redis-cli --pipe, and reports INFO memory deltas and MEMORY USAGE.
# usage: deploy/measure-redis-memory.sh [N]   (default 20000; needs redis-server, redis-cli, python3)
set -euo pipefail
count=${1:-20000}
work=$(mktemp -d /tmp/aag-redis-memory.XXXXXX)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/redis.log"
cleanup() { kill "$(cat "$work/redis.pid" 2>/dev/null)" 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
cli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do cli ping >/dev/null 2>&1 && break; sleep 0.1; done

# RESP commands for one kind of record, N times, with random 32-byte key ids and challenges
# (base64url without padding: 43 characters), as the gateway writes them.
generate() {
    python3 - "$1" "$count" "${2:-0}" <<'PY'
import base64, os, sys
kind, count, receipt_bytes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
def b64(raw): return base64.urlsafe_b64encode(raw).rstrip(b"=")
def resp(*args):
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)
w = sys.stdout.buffer
for _ in range(count):
    kid = b64(os.urandom(32))
    if kind == "key":
        w.write(resp(b"HSET", b"aag:{" + kid + b"}:production:key",
                     b"public_key", os.urandom(91), b"counter", b"1234", b"app_id", b"TEAMID1234.com.example.app",
                     b"environment", b"production", b"receipt", os.urandom(receipt_bytes),
                     b"created_at", b"1767225600", b"revoked", b"0", b"last_used_at", b"1767229200"))
    elif kind == "assert":
        w.write(resp(b"SET", b"aag:{" + kid + b"}:ch:" + b64(os.urandom(32)), b"assert", b"NX", b"EX", b"300"))
    elif kind == "attest":
        w.write(resp(b"SET", b"aag:ch:{" + b64(os.urandom(32)) + b"}", b"attest", b"NX", b"EX", b"300"))
    elif kind == "window":
        key = b"aag:{" + kid + b"}:production:win"
        for counter in range(1000, 1008):
            w.write(resp(b"ZADD", key, str(counter).encode(), str(counter).encode()))
PY
}

used() { cli info memory | awk -F: '/^used_memory:/ { print $2 }' | tr -d '\r'; }

measure() {  # label kind [receipt bytes]
    cli flushall >/dev/null
    local before after sample
    before=$(used)
    generate "$2" "${3:-0}" | cli --pipe >/dev/null
    after=$(used)
    sample=$(cli randomkey)
    printf '%-44s %8d B/record (INFO delta over %d)   MEMORY USAGE of one: %s B\n' "$1" \
        $(( (after - before) / count )) "$count" "$(cli memory usage "$sample" samples 0)"
}

echo "redis $(cli info server | awk -F: '/^redis_version:/ { print $2 }' | tr -d '\r'), $count records per row"
measure "key record, 5000-byte receipt"             key 5000
measure "key record, 3500-byte receipt"             key 3500
measure "key record, no receipt (field sizes only)" key 0
measure "assertion challenge (TTL)"                 assert
measure "attestation challenge (TTL)"               attest
measure "counter window, 8 entries (window > 0)"    window
