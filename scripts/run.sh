#!/usr/bin/env bash
# `make run`: Redis (unless gateway.yaml points at one that answers), the example upstream and the gateway,
# all in the foreground; Ctrl-C stops everything this script started. State lives under run/.
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-gateway.yaml}
mkdir -p run/redis

./scripts/release-build.sh
GATEWAY=.build/release/gateway
# The demo server key for the stand-in for Apple's servers (never reaches Apple), made before check-config reads it.
if [ ! -f run/demo-apple/AuthKey.p8 ]; then
    mkdir -p run/demo-apple
    openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out run/demo-apple/AuthKey.p8
fi
# Demo keys gateway.yaml names: the token signing key, and Play Integrity test keys standing in for the Play
# Console's (the demo app's token maker shares them; never use either in production).
[ -f run/demo-token.pem ] || openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out run/demo-token.pem
$GATEWAY demo play-integrity run/demo-play >/dev/null
$GATEWAY check-config "$CONFIG"

pids=()
cleanup() {
    trap - INT TERM EXIT
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    echo "stopped."
}
trap cleanup INT TERM EXIT

# Redis: the URL's host and port from gateway.yaml.
redis_url=$(sed -nE 's/^redis:.*url: *"?([^",}]+)"?.*/\1/p' "$CONFIG" | head -n1)
redis_host=$(echo "${redis_url:-redis://127.0.0.1:6379}" | sed -E 's#^redis://([^@/]*@)?([^:/]+).*#\2#')
redis_port=$(echo "${redis_url:-redis://127.0.0.1:6379}" | sed -nE 's#^redis://([^@/]*@)?[^:/]+:([0-9]+).*#\2#p')
redis_port=${redis_port:-6379}
if redis-cli -h "$redis_host" -p "$redis_port" ping >/dev/null 2>&1; then
    echo "using the Redis already answering on $redis_host:$redis_port"
elif [[ "$redis_host" == "127.0.0.1" || "$redis_host" == "localhost" ]]; then
    redis-server --bind 127.0.0.1 --port "$redis_port" --dir "$PWD/run/redis" --appendonly yes --save "" \
        --logfile "$PWD/run/redis.log" &
    pids+=($!)
    for _ in $(seq 50); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    echo "started redis-server on 127.0.0.1:$redis_port (data in run/redis)"
else
    echo "warning: Redis at $redis_host:$redis_port does not answer; assert routes will answer 503" >&2
fi

# The example upstream on the port of the first upstream URL.
upstream_port=$(sed -nE '/^upstreams:/,/^routes:/ s#.*url: *"http://127\.0\.0\.1:([0-9]+).*#\1#p' "$CONFIG" | head -n1)
python3 examples/upstream.py --host 127.0.0.1 --port "${upstream_port:-9000}" &
pids+=($!)

# A stand-in for Apple's DeviceCheck servers.
apple_port=$(sed -nE 's#^ *devicecheck_url: *"http://127\.0\.0\.1:([0-9]+).*#\1#p' "$CONFIG" | head -n1)
if [ -n "$apple_port" ]; then
    $GATEWAY demo apple --key run/demo-apple/AuthKey.p8 --listen "127.0.0.1:$apple_port" &
    pids+=($!)
fi

# The demo CA: the gateway trusts it on top of gateway.yaml (serve --trust-anchor), loudly logged.
[ -f run/demo-ca/root.pem ] || $GATEWAY demo ca run/demo-ca
$GATEWAY serve --config "$CONFIG" --trust-anchor run/demo-ca/root.pem > >(tee run/gateway.log) 2>&1 &
pids+=($!)

sleep 1
cat <<MSG

  gateway:  http://127.0.0.1:8080   (admin: http://127.0.0.1:9901/metrics)
  upstream: http://127.0.0.1:${upstream_port:-9000}   Apple stand-in: ${apple_port:+http://127.0.0.1:$apple_port}
  try:      curl -i http://127.0.0.1:8080/v1/ai/generate -X POST -d '{"prompt":"hi"}'   (401: no assertion)
  demo:     make demo    (in another terminal: a simulated iPhone registers and calls the API)
  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
