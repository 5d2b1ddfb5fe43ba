#!/usr/bin/env bash
# HTTP/2 over TLS: the gateway's listener (server.tls, ALPN h2, pass route) against nginx configured the same way
# (ssl http2, proxy_pass with keep-alive to the same upstream), both driven by h2load (Debian nghttp2-client);
# then new TLS handshakes per second for each (`openssl s_time -new`). Per run: req/s, CPU of the measured
# process group (µs per request, from /proc/PID/stat), p50/p99 from h2load's per-request log, and the ratios
# against nginx. Runs alone (`bench/h2.sh`, about a minute: prints its own summary) or from bench/run.sh, whose
# report table shows these runs beside the HTTP/1.1 ones (BENCH_H2_SUMMARY=0 leaves the summary out).
# Writes bench/results/h2.json (BENCH_H2_OUT).
# Settings: BENCH_DURATION (8 s), BENCH_H2_CONNECTIONS (64), BENCH_H2_STREAMS (10 per connection).
set -euo pipefail
cd "$(dirname "$0")/.."
duration=${BENCH_DURATION:-8} connections=${BENCH_H2_CONNECTIONS:-64} streams=${BENCH_H2_STREAMS:-10}
out=${BENCH_H2_OUT:-bench/results/h2.json}
threads=$(nproc)
./scripts/install-deps.sh nginx nghttp2-client openssl python3 procps >&2
[ -x .build/release/gateway ] || ./scripts/release-build.sh >&2
gateway=.build/release/gateway

work=$(mktemp -d /tmp/gateway-bench-h2.XXXXXX)
chmod 755 "$work"
mkdir -p "$work/logs" "$work/tmp"
gateway_pid=""
cleanup() {
    set +e
    [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null
    for pidfile in "$work"/nginx-*.pid; do [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$work"
}
trap cleanup EXIT
read -r upstream_port nginx_port gateway_port admin_port < <(python3 -c '
import socket
sockets = [socket.socket() for _ in range(4)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])')

# One EC P-256 certificate for both (the handshake's cost is the key's).
openssl req -x509 -new -nodes -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -keyout "$work/server.key" -out "$work/server.crt" \
    -days 2 -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 2>/dev/null
source bench/nginx.sh
nginx_instance upstream auto "
  server { listen 127.0.0.1:$upstream_port; location / { default_type application/json; return 200 '{\"ok\":true}'; } }"
nginx_instance front auto "
  upstream fast { server 127.0.0.1:$upstream_port; keepalive 1024; }
  server {
    listen 127.0.0.1:$nginx_port ssl http2;
    ssl_certificate $work/server.crt; ssl_certificate_key $work/server.key;
    ssl_protocols TLSv1.2 TLSv1.3; ssl_session_cache shared:SSL:10m;
    http2_max_concurrent_streams 100;
    location / { proxy_pass http://fast; proxy_http_version 1.1; proxy_set_header Connection \"\"; }
  }"
cat > "$work/gateway.yaml" <<EOF
listen: "127.0.0.1:$gateway_port"
admin_listen: "127.0.0.1:$admin_port"
server: { tls: { cert_file: "$work/server.crt", key_file: "$work/server.key" } }
app_attest: { apps: ["BENCH12345.com.example.bench"] }
upstreams: { fast: { url: "http://127.0.0.1:$upstream_port", max_idle_connections: 2048 } }
routes: [{ path_prefix: "/pass/", upstream: fast, policy: pass }]
EOF
"$gateway" serve --config "$work/gateway.yaml" > /dev/null 2> "$work/logs/gateway.err" &
gateway_pid=$!
for _ in $(seq 150); do curl -sk -o /dev/null "https://127.0.0.1:$gateway_port/pass/" && break; sleep 0.1; done

cpu_ticks() {  # PID…: utime + stime of each, summed
    local total=0 pid
    for pid in "$@"; do
        [ -r "/proc/$pid/stat" ] || continue
        total=$((total + $(awk '{ print $14 + $15 }' "/proc/$pid/stat")))
    done
    echo "$total"
}
workers_of() { pgrep -P "$(cat "$work/nginx-$1.pid")" | paste -sd' ' -; }
clk_tck=$(getconf CLK_TCK)
results=()
# run NAME URL PIDS…: h2load for $duration s; records req/s, µs of CPU per request, p50/p99 (ms, from h2load's
# per-request log), non-2xx answers and failed requests.
run() {
    local name=$1 url=$2 before after
    shift 2
    before=$(cpu_ticks "$@")
    h2load -t "$threads" -c "$connections" -m "$streams" -D "$duration" --log-file "$work/$name.log" "$url" \
        > "$work/$name.out" 2>&1 || true
    after=$(cpu_ticks "$@")
    local line
    line=$(python3 - "$work/$name.out" "$work/$name.log" <<EOF
import json, re, sys
output = open(sys.argv[1]).read()
number = lambda pattern: float((re.search(pattern, output, re.M) or [0, 0])[1])
rps, ok = number(r"^finished in .*, ([0-9.]+) req/s"), int(number(r"^requests: .* ([0-9]+) succeeded"))
# "errored": failed without an HTTP status (resets, timeouts); non-2xx answers are counted from the log.
errored = int(number(r"^requests: .* ([0-9]+) errored"))
times, non_2xx = [], 0
for row in open(sys.argv[2]):
    fields = row.split()
    if len(fields) >= 3:
        times.append(int(fields[2]) / 1000)
        non_2xx += not fields[1].startswith("2")
times.sort()
quantile = lambda share: round(times[min(len(times) - 1, int(share * len(times)))], 2) if times else None
seconds = ($after - $before) / $clk_tck
protocol = re.search(r"^Application protocol: (.*)", output, re.M)
print(json.dumps({"name": "$name", "protocol": protocol[1] if protocol else "", "connections": $connections,
                  "streams": $streams, "req_s": rps, "succeeded": ok, "errored": errored, "non_2xx": non_2xx,
                  "p50_ms": quantile(0.5), "p99_ms": quantile(0.99), "cpu_seconds": seconds,
                  "cores": round(seconds / $duration, 2), "us_per_req": seconds / ok * 1e6 if ok else None,
                  "loadavg_1m": float(open("/proc/loadavg").read().split()[0])}))
EOF
)
    results+=("$line")
    echo "$line" >&2
}
# handshakes NAME PORT: new TLS sessions per second, two s_time clients at once (no resumption: -new).
handshakes() {
    local name=$1 port=$2 total=0 pids=() files=()
    for i in 1 2; do
        openssl s_time -connect "127.0.0.1:$port" -new -time "$duration" > "$work/s_time-$name-$i.txt" 2>&1 &
        pids+=($!) files+=("$work/s_time-$name-$i.txt")
    done
    wait "${pids[@]}" || true
    # s_time's "connections/user sec" is per second of its own CPU; the wall-clock rate is connections / real seconds.
    local wall
    wall=$(cat "${files[@]}" | sed -nE 's/^([0-9]+) connections in ([0-9]+) real seconds.*/\1 \2/p' \
        | awk '{ if ($2 > 0) sum += $1 / $2 } END { printf "%.1f", sum }')
    local line="{\"name\": \"$name\", \"handshakes_s\": ${wall:-0}}"
    results+=("$line")
    echo "$line" >&2
}

echo "bench h2: $threads cores, ${duration}s, $connections connections x $streams streams" >&2
run nginx-h2 "https://127.0.0.1:$nginx_port/pass/items/1" $(workers_of front)
run gateway-h2 "https://127.0.0.1:$gateway_port/pass/items/1" "$gateway_pid"
handshakes nginx-tls "$nginx_port"
handshakes gateway-tls "$gateway_port"

mkdir -p "$(dirname "$out")"
printf '%s\n' "${results[@]}" | python3 -c '
import json, sys
runs = {run["name"]: run for run in map(json.loads, sys.stdin)}
nginx, gateway = runs["nginx-h2"], runs["gateway-h2"]
ratio = lambda a, b: round(a / b, 2) if a and b else None
summary = {"runs": runs,
           "req_s_vs_nginx": ratio(gateway["req_s"], nginx["req_s"]), "req_s_goal": 0.8,
           "cpu_per_req_vs_nginx": ratio(gateway["us_per_req"], nginx["us_per_req"]), "cpu_per_req_goal": 1.5,
           "handshakes_vs_nginx": ratio(runs["gateway-tls"]["handshakes_s"], runs["nginx-tls"]["handshakes_s"])}
json.dump(summary, open(sys.argv[1], "w"), indent=1)
if sys.argv[2] == "0":
    sys.exit()
print()
print("%-12s %10s %12s %10s" % ("h2 + TLS", "req/s", "us/req CPU", "hs/s"))
for name, tls in (("nginx", "nginx-tls"), ("gateway", "gateway-tls")):
    run = runs[name + "-h2"]
    print("%-12s %10.0f %12s %10.0f" % (name, run["req_s"], "%.0f" % run["us_per_req"] if run["us_per_req"] else "-", runs[tls]["handshakes_s"]))
print("gateway / nginx: req/s %s (goal >= 0.8), CPU per request %s (goal <= 1.5), handshakes/s %s" % (
    summary["req_s_vs_nginx"], summary["cpu_per_req_vs_nginx"], summary["handshakes_vs_nginx"]))
' "$out" "${BENCH_H2_SUMMARY:-1}"
