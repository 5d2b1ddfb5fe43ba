#!/usr/bin/env bash
# Instructions per request, the deterministic cost figure (wall-clock benchmarks on this shared 2-core machine
# are noisy): the release gateway runs under valgrind's callgrind with the bench's upstream (nginx
# `return 200`) and config; after a warm-up, exactly COUNT pass-route requests (and, with PROFILE_ASSERT=1,
# pre-signed assert-route requests) are measured. The reference is measured in the same run the same way:
# nginx `proxy_pass` to the same upstream (one process, `master_process off`; keep-alive upstream pool),
# once with `access_log off` and once with a JSON access log of the fields the gateway's request line has.
# Prints instructions per request and leaves the callgrind output in the work directory for
# callgrind_annotate. PROFILE_H2=1: the same over HTTP/2 and TLS — the gateway with server.tls (one EC P-256
# certificate, as bench/h2.sh), nginx with `listen … ssl http2`, both driven by h2load (COUNT requests over
# CONNECTIONS connections, 10 streams each; its handshakes are in the count, the same for both).
# Settings: PROFILE_COUNT (20000), PROFILE_CONNECTIONS (16), PROFILE_ASSERT=1 (not with PROFILE_H2),
# PROFILE_DEVICES (200), PROFILE_ROUNDS (10), PROFILE_NGINX=0 (skips nginx), PROFILE_OUT (a new /tmp
# directory), PROFILE_GATEWAY (the binary; .build/release/gateway), PROFILE_HOST_CPU=0 (OpenSSL sees valgrind's
# CPU model, see below).
set -euo pipefail
cd "$(dirname "$0")/.."
count=${PROFILE_COUNT:-20000}
connections=${PROFILE_CONNECTIONS:-16}
devices=${PROFILE_DEVICES:-200}
rounds=${PROFILE_ROUNDS:-10}
work=${PROFILE_OUT:-$(mktemp -d /tmp/gateway-callgrind.XXXXXX)}
mkdir -p "$work/ca" "$work/tmp" "$work/logs"
chmod 755 "$work"
./scripts/install-deps.sh valgrind nginx wrk redis-server python3 curl nghttp2-client openssl
h2=${PROFILE_H2:-0}
[ "$h2" = 1 ] && [ "${PROFILE_ASSERT:-0}" = 1 ] && { echo "callgrind: PROFILE_ASSERT needs wrk's HTTP/1.1: not with PROFILE_H2" >&2; exit 2; }
gateway=${PROFILE_GATEWAY:-.build/release/gateway}
[ -x "$gateway" ] || { echo "callgrind: build first (./scripts/release-build.sh)" >&2; exit 1; }

gateway_pid="" grind_pid="" nginx_grind_pid=""
cleanup() {
    set +e
    [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null
    [ -n "$grind_pid" ] && kill "$grind_pid" 2>/dev/null
    [ -n "$nginx_grind_pid" ] && kill "$nginx_grind_pid" 2>/dev/null
    for pidfile in "$work"/nginx-*.pid "$work/redis.pid"; do [ -f "$pidfile" ] && kill "$(cat "$pidfile" 2>/dev/null)" 2>/dev/null; done
    wait 2>/dev/null
}
trap cleanup EXIT

read -r redis_port upstream_port gateway_port admin_port nginx_port nginx_log_port < <(python3 -c '
import socket
sockets = [socket.socket() for _ in range(6)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])')
scheme=http listener_tls="" nginx_tls=""
if [ "$h2" = 1 ]; then
    openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$work/server.key" \
        -out "$work/server.crt" -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
    scheme=https
    listener_tls="server: { tls: { cert_file: \"$work/server.crt\", key_file: \"$work/server.key\" } }"
    nginx_tls=" ssl http2; ssl_certificate $work/server.crt; ssl_certificate_key $work/server.key; ssl_protocols TLSv1.2 TLSv1.3"
fi
gateway_url=$scheme://127.0.0.1:$gateway_port

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/logs/redis.log"
source bench/nginx.sh
nginx_instance upstream 1 "
  server { listen 127.0.0.1:$upstream_port; location / { default_type application/json; return 200 '{\"ok\":true}'; } }"
"$gateway" bench ca --out "$work/ca" >/dev/null
# bench/run.sh's gateway config, without the stream upstream.
cat > "$work/gateway.yaml" <<EOF
listen: "127.0.0.1:$gateway_port"
admin_listen: "127.0.0.1:$admin_port"
$listener_tls
redis: { url: "redis://127.0.0.1:$redis_port/0", pool_size: 64, timeout_ms: 1000 }
app_attest:
  apps: ["BENCH12345.com.example.bench"]
  environments: [development]
  trust_anchor: "$work/ca/root.pem"
  challenge_ttl_seconds: 3600
upstreams:
  fast: { url: "http://127.0.0.1:$upstream_port", max_idle_connections: 512 }
routes:
  - { path_prefix: "/pass/", upstream: fast, policy: pass }
  - { path_prefix: "/assert/", upstream: fast, policy: assert }
EOF

wait_for() {
    for _ in $(seq 600); do curl -sk -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "callgrind: $1 did not come up" >&2
    exit 1
}

if [ "${PROFILE_ASSERT:-0}" = 1 ]; then
    # Devices are registered (and requests signed) against a gateway at full speed, then replayed to the
    # profiled one: round 1 warms its key cache, rounds 2.. are measured.
    "$gateway" serve --config "$work/gateway.yaml" > /dev/null 2> "$work/logs/prepare-gateway.err" &
    gateway_pid=$!
    wait_for "$gateway_url/pass/"
    "$gateway" bench prepare --gateway "$gateway_url" --ca "$work/ca" --devices "$devices" --requests-per-device "$rounds" \
        --out "$work/requests.txt" > "$work/prepare.json" 2> "$work/logs/prepare.log"
    kill "$gateway_pid"; wait "$gateway_pid" 2>/dev/null || true
    gateway_pid=""
    awk -F'\t' '/^#/ || $2 == 1' "$work/requests.txt" > "$work/assert-warm.txt"
    awk -F'\t' '/^#/ || $2 > 1' "$work/requests.txt" > "$work/assert-measured.txt"
fi

# valgrind 3.19's CPU model hides ADX from CPUID (it executes adcx/adox all the same), so under callgrind
# OpenSSL would pick its non-ADX big-number and P-256 routines, about 150,000 more instructions per ECDSA
# verify than the routines this host runs. Unless PROFILE_HOST_CPU=0, OpenSSL is told valgrind's capability
# vector plus ADX when the host has it (never more than valgrind emulates), for the gateway and nginx alike.
if [ "${PROFILE_HOST_CPU:-1}" = 1 ] && grep -qw adx /proc/cpuinfo; then
    emulated=$(valgrind -q openssl version -c | sed -n 's/^CPUINFO: OPENSSL_ia32cap=//p')
    [[ $emulated == 0x*:0x* ]] || { echo "callgrind: cannot read valgrind's OpenSSL capability vector" >&2; exit 1; }
    export OPENSSL_ia32cap="${emulated%%:*}:$(printf '0x%x' $(( ${emulated##*:} | 0x80000 )))"
    echo "callgrind: OpenSSL capability vector $OPENSSL_ia32cap (valgrind's $emulated plus ADX, as this host)"
fi

valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out.%p" \
    "$gateway" serve --config "$work/gateway.yaml" > "$work/logs/gateway.log" 2> "$work/logs/gateway.err" &
grind_pid=$!
wait_for "$gateway_url/pass/"

# N requests over C keep-alive connections (one wrk thread; it exits once N answers are in).
fixed() {  # N URL [VAR=VALUE…]
    local n=$1 url=$2
    shift 2
    env PROFILE_N="$n" "$@" wrk -t1 -c"$connections" -d600s --timeout 30s -s bench/callgrind.lua "$url" > "$work/logs/wrk.out" 2>&1
    grep -E "^callgrind.lua" "$work/logs/wrk.out" || { echo "callgrind: wrk did not finish:" >&2; cat "$work/logs/wrk.out" >&2; exit 1; }
}
# N requests over C connections of 10 streams each (h2load; it exits once N answers are in).
h2fixed() {  # N URL
    h2load -n "$1" -c "$connections" -m 10 "$2" > "$work/logs/h2load.out" 2>&1 || true
    grep -qE "^requests: $1 total, $1 started, $1 done, $1 succeeded" "$work/logs/h2load.out" \
        || { echo "callgrind: h2load did not finish:" >&2; cat "$work/logs/h2load.out" >&2; exit 1; }
}
drive() { if [ "$h2" = 1 ]; then h2fixed "$@"; else fixed "$@"; fi; }
measure() {  # PID NAME N URL [VAR=VALUE…]: instructions of N requests to PID, one callgrind dump
    local pid=$1 name=$2 n=$3
    shift 3
    callgrind_control -i on "$pid" > /dev/null
    drive "$n" "$@"
    sleep 2  # the requests still in flight when wrk left (at most connections - 1)
    callgrind_control -d "$name" "$pid" > /dev/null
    callgrind_control -i off "$pid" > /dev/null
    local file
    file=$(ls -t "$work"/callgrind.out.$pid* | head -1)
    mv "$file" "$work/$name.callgrind"
    local total
    total=$(awk '/^totals:/ { print $2 }' "$work/$name.callgrind")  # "summary:" wraps once instrumentation was toggled
    echo "callgrind: $name: $total instructions / $n requests = $((total / n)) per request ($work/$name.callgrind)"
    per_request[$name]=$((total / n))
}
declare -A per_request

drive 2000 "$gateway_url/pass/items/1"  # warm-up: connections, curl handles, caches
measure "$grind_pid" pass "$count" "$gateway_url/pass/items/1"
if [ "${PROFILE_ASSERT:-0}" = 1 ]; then
    # wrk calls request() once before the load to check what it returns: that first request is never sent.
    warm=$(($(grep -vc '^#' "$work/assert-warm.txt") - 1))
    measured=$(($(grep -vc '^#' "$work/assert-measured.txt") - 1))
    fixed "$warm" "$gateway_url" BENCH_REQUESTS="$work/assert-warm.txt" BENCH_WORKDIR="$work/tmp"
    measure "$grind_pid" assert "$measured" "$gateway_url" BENCH_REQUESTS="$work/assert-measured.txt" BENCH_WORKDIR="$work/tmp"
fi
if [ "${PROFILE_NGINX:-1}" = 1 ]; then
    # The fields of the gateway's request line that nginx has: time, client ip, method, path, status, bytes,
    # duration, upstream address, user agent, request id.
    nginx_config proxy 1 "
  log_format json escape=json '{\"time\":\"\$time_iso8601\",\"client_ip\":\"\$remote_addr\",\"method\":\"\$request_method\",'
    '\"path\":\"\$uri\",\"status\":\$status,\"bytes_out\":\$body_bytes_sent,\"total_ms\":\$request_time,'
    '\"upstream_addr\":\"\$upstream_addr\",\"user_agent\":\"\$http_user_agent\",\"request_id\":\"\$request_id\"}';
  upstream fast { server 127.0.0.1:$upstream_port; keepalive 512; }
  server { listen 127.0.0.1:$nginx_port$nginx_tls; location / { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection \"\"; } }
  server {
    listen 127.0.0.1:$nginx_log_port$nginx_tls; access_log $work/logs/nginx-access.json json;
    location / { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
  }"
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$work/callgrind.out.%p" \
        nginx -p "$work" -c "$work/nginx-proxy.conf" -e "$work/logs/nginx-proxy.log" -g "daemon off; master_process off;" \
        > "$work/logs/nginx-proxy.out" 2>&1 &
    nginx_grind_pid=$!
    wait_for "$scheme://127.0.0.1:$nginx_port/pass/"
    wait_for "$scheme://127.0.0.1:$nginx_log_port/pass/"
    drive 2000 "$scheme://127.0.0.1:$nginx_port/pass/items/1"
    measure "$nginx_grind_pid" nginx-log-off "$count" "$scheme://127.0.0.1:$nginx_port/pass/items/1"
    drive 2000 "$scheme://127.0.0.1:$nginx_log_port/pass/items/1"
    measure "$nginx_grind_pid" nginx-log-json "$count" "$scheme://127.0.0.1:$nginx_log_port/pass/items/1"
fi
if [ -n "${per_request[nginx-log-json]:-}" ]; then
    awk -v pass="${per_request[pass]}" -v off="${per_request[nginx-log-off]}" -v json="${per_request[nginx-log-json]}" 'BEGIN {
        printf "callgrind: gateway pass / nginx: %.2f x (access_log off), %.2f x (JSON access log)\n", pass / off, pass / json }'
fi
echo "callgrind: work directory $work"
