#!/usr/bin/env bash
# `make bench`: the gateway against nginx and a do-it-yourself verifier, in one run, all on 127.0.0.1.
# Installs what it needs, starts Redis, two nginx instances, the release gateway and the DIY verifier in a
# temporary directory, drives them with wrk, stops everything, writes bench/results/latest.json and prints
# the table. Settings (environment): BENCH_QUICK=1, BENCH_DURATION, BENCH_LEVELS, BENCH_DEVICES,
# BENCH_KEYS (0 skips the large-key run), BENCH_RATE_CONNECTIONS, BENCH_OUT, BENCH_PERF=1, BENCH_KEEP=1,
# BENCH_OLD=0 (skips the thread-per-connection comparison), BENCH_IDLE (10000), BENCH_SSE_STREAMS (2000).
# See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
bench_start=$(date +%s)

if [ "${BENCH_QUICK:-0}" = 1 ]; then
    duration=${BENCH_DURATION:-4} levels=${BENCH_LEVELS:-64} keys=${BENCH_KEYS:-10000}
else
    duration=${BENCH_DURATION:-8} levels=${BENCH_LEVELS:-16 64 256} keys=${BENCH_KEYS:-100000}
fi
devices=${BENCH_DEVICES:-2000}
idle_count=${BENCH_IDLE:-10000}
sse_streams=${BENCH_SSE_STREAMS:-2000}
sse_events=$((duration + 6))  # one a second: the streams outlast their ramp-up and the fast route's run
rate_connections=${BENCH_RATE_CONNECTIONS:-32}
out=${BENCH_OUT:-bench/results/latest.json}
threads=$(nproc)
peak=$(tr ' ' '\n' <<< "$levels" | sort -n | tail -1)
level_count=$(wc -w <<< "$levels")

# --- Tools --------------------------------------------------------------------------------------------
./scripts/install-deps.sh libssl-dev libcbor-dev libcurl4-openssl-dev libuv1-dev libhttp-parser-dev libyaml-dev \
    pkg-config redis-server python3 python3-venv nginx wrk openssl curl procps
./scripts/release-build.sh
gateway=.build/release/gateway
venv=.build/bench-venv
if ! cmp -s bench/diy/requirements.txt "$venv/requirements.txt"; then
    rm -rf "$venv"
    /usr/bin/python3 -m venv "$venv"
    "$venv/bin/pip" install -q --disable-pip-version-check -r bench/diy/requirements.txt
    cp bench/diy/requirements.txt "$venv/requirements.txt"
fi
report() { python3 bench/report.py "$@"; }
# 10,000 idle connections and 2,000 streams (each two sockets in the gateway) need descriptors: the
# client scripts run in this shell, the gateway raises its own limit at start.
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true
# The thread-per-connection gateway (49b53de) for the comparison runs: built once, cached in .build-old/.
old_gateway="" old_error=""
if [ "${BENCH_OLD:-1}" = 1 ]; then
    old_log=$(mktemp)
    old_gateway=$(bench/build-old.sh 2> "$old_log") || { old_gateway=""; old_error=$(tail -1 "$old_log"); }
    cat "$old_log" >&2; rm -f "$old_log"
else
    old_error="skipped (BENCH_OLD=0)"
fi

# --- Services -----------------------------------------------------------------------------------------
work=$(mktemp -d /tmp/gateway-bench.XXXXXX)
chmod 755 "$work"  # nginx workers run as nobody
mkdir -p "$work/runs" "$work/queues" "$work/logs" "$work/tmp" "$work/ca"
gateway_pid="" diy_pid="" old_pid="" sse_pid=""
cleanup() {
    set +e  # a process that is already gone must not stop the others being stopped
    [ -n "$gateway_pid" ] && kill "$gateway_pid" 2>/dev/null
    [ -n "$old_pid" ] && kill "$old_pid" 2>/dev/null
    [ -n "$sse_pid" ] && kill "$sse_pid" 2>/dev/null
    [ -n "$diy_pid" ] && kill $(diy_pids) 2>/dev/null
    for pidfile in "$work"/nginx-*.pid "$work/redis.pid"; do
        [ -f "$pidfile" ] && kill "$(cat "$pidfile")" 2>/dev/null
    done
    wait 2>/dev/null
    if [ "${BENCH_KEEP:-0}" = 1 ]; then echo "bench: kept $work"; else rm -rf "$work"; fi
}
trap cleanup EXIT

read -r redis_port upstream_port proxy_port diy_front_port diy_port gateway_port admin_port sse_port old_port old_admin_port \
    < <(python3 -c '
import socket
sockets = [socket.socket() for _ in range(10)]
for s in sockets: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in sockets])')
upstream_url=http://127.0.0.1:$upstream_port
proxy_url=http://127.0.0.1:$proxy_port
diy_url=http://127.0.0.1:$diy_front_port
gateway_url=http://127.0.0.1:$gateway_port
admin_url=http://127.0.0.1:$admin_port
redis_url=redis://127.0.0.1:$redis_port/0
sse_url=http://127.0.0.1:$sse_port
old_url=http://127.0.0.1:$old_port
old_admin_url=http://127.0.0.1:$old_admin_port

wait_for() {  # URL: answers anything within 15 s
    for _ in $(seq 150); do curl -s -o /dev/null "$1" && return 0; sleep 0.1; done
    echo "bench: $1 did not come up" >&2
    return 1
}

redis-server --port "$redis_port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --daemonize yes \
    --pidfile "$work/redis.pid" --logfile "$work/logs/redis.log"

source bench/nginx.sh
keepalive_proxy='proxy_http_version 1.1; proxy_set_header Connection "";'
nginx_instance upstream auto "
  server { listen 127.0.0.1:$upstream_port; location / { default_type application/json; return 200 '{\"ok\":true}'; } }"
nginx_instance front auto "
  upstream fast { server 127.0.0.1:$upstream_port; keepalive 256; }
  upstream diy { server 127.0.0.1:$diy_port; keepalive 256; }
  server { listen 127.0.0.1:$proxy_port; location / { proxy_pass http://fast; $keepalive_proxy } }
  server {
    listen 127.0.0.1:$diy_front_port;
    location /assert/ { auth_request /_attest; proxy_pass http://fast; $keepalive_proxy }
    location = /_attest {
      internal;
      proxy_pass http://diy; $keepalive_proxy
      proxy_pass_request_body off;
      proxy_set_header Content-Length \"\";
      proxy_set_header X-Original-URI \$request_uri;
      proxy_set_header X-Original-Method \$request_method;
    }
    location / { return 404; }
  }"

"$gateway" bench ca --out "$work/ca" >/dev/null
# gateway_config LISTEN ADMIN REDIS CA [UPSTREAM…] [-- ROUTE…] [-- TOP-LEVEL…]: the bench config, the same for the
# old gateway (49b53de) and this one; this one adds the SSE upstream and route and room for the idle
# connections above BENCH_IDLE (whatever the default connection_limit is).
gateway_config() {
    local listen=$1 admin=$2 redis=$3 ca=$4 part=0 line
    shift 4
    local upstreams=() routes=() top=()
    for line in "$@"; do
        if [ "$line" = -- ]; then part=$((part + 1)); continue; fi
        case $part in 0) upstreams+=("  $line") ;; 1) routes+=("  - $line") ;; *) top+=("$line") ;; esac
    done
    cat <<EOF
listen: "127.0.0.1:$listen"
admin_listen: "127.0.0.1:$admin"
redis: { url: "$redis", pool_size: 64, timeout_ms: 1000 }
app_attest:
  apps: ["BENCH12345.com.example.bench"]
  environments: [development]
  trust_anchor: "$ca/root.pem"
  challenge_ttl_seconds: 3600
upstreams:
  fast: { url: "$upstream_url", max_idle_connections: 512 }
$(printf '%s\n' "${upstreams[@]}")
routes:
  - { path_prefix: "/pass/", upstream: fast, policy: pass }
  - { path_prefix: "/assert/", upstream: fast, policy: assert }
  - { path_prefix: "/body/", upstream: fast, policy: assert, client_data: body }
$(printf '%s\n' "${routes[@]}")
$(printf '%s\n' "${top[@]}")
EOF
}
gateway_config "$gateway_port" "$admin_port" "$redis_url" "$work/ca" \
    "sse: { url: \"$sse_url\", max_idle_connections: $((sse_streams + 100)) }" \
    -- '{ path_prefix: "/sse/", upstream: sse, policy: pass }' \
    -- "server: { connection_limit: $((idle_count + 500)), per_ip_connection_limit: 0 }" > "$work/gateway.yaml"
gateway_config "$old_port" "$old_admin_port" "redis://127.0.0.1:$redis_port/1" "$work/old-ca" > "$work/old-gateway.yaml"
python3 bench/sse_upstream.py --port "$sse_port" --events "$sse_events" --interval 1 > "$work/logs/sse-upstream.log" 2>&1 &
sse_pid=$!
# The request log (one JSON line per request) is still built, then dropped: the cheapest log sink.
"$gateway" serve --config "$work/gateway.yaml" > /dev/null 2> "$work/logs/gateway.err" &
gateway_pid=$!
"$venv/bin/python" bench/diy/verifier.py --listen "127.0.0.1:$diy_port" --redis "$redis_url" --workers "$threads" \
    > "$work/logs/diy.log" 2>&1 &
diy_pid=$!
diy_pids() { echo "$diy_pid" $(pgrep -P "$diy_pid"); }
for url in "$upstream_url" "$proxy_url" "$diy_url" "$gateway_url/pass/" "http://127.0.0.1:$diy_port/" "$sse_url/stats"; do
    wait_for "$url"
done
sleep 1  # the DIY verifier's other workers
workers_of() { pgrep -P "$(cat "$work/nginx-$1.pid")" | paste -sd, -; }
pids="gateway=$gateway_pid upstream=$(workers_of upstream) front=$(workers_of front) diy=$(diy_pids | tr ' ' ,) redis=$(cat "$work/redis.pid")"
clk_tck=$(getconf CLK_TCK)

# --- Measuring ----------------------------------------------------------------------------------------
# load NAME TARGET KIND WHAT CONNECTIONS URL [VAR=VALUE…]: one wrk run of $run_seconds (default $duration).
load() {
    local name=$1 target=$2 kind=$3 what=$4 connections=$5 url=$6 rate=0 seconds=${run_seconds:-$duration}
    shift 6
    for assignment in "$@"; do [[ $assignment == BENCH_RATE=* ]] && rate=${assignment#BENCH_RATE=}; done
    report reset-peaks --pids "$pids"
    report snapshot --admin "${metrics_url:-$admin_url}" --pids "$pids" > "$work/runs/$name.before.json"
    local profiler=""
    if [ "${BENCH_PERF:-0}" = 1 ] && [ "$kind" = max ] && [ "$connections" = "$peak" ] && [[ $target =~ ^(c|d|keys)$ ]]; then
        perf record -F 299 --call-graph dwarf,16384 -p "$gateway_pid" -o "$work/perf-$name.data" -- sleep $((seconds - 1)) \
            > /dev/null 2>&1 &
        profiler=$!
    fi
    env BENCH_THREADS="$threads" BENCH_WORKDIR="$work/queues" BENCH_PIDS="$pids" BENCH_SUMMARY="$work/runs/$name.wrk.json" "$@" \
        wrk -t"$threads" -c"$connections" -d"${seconds}s" --timeout 10s -s bench/replay.lua "$url" > "$work/runs/$name.out" 2>&1 || true
    report snapshot --admin "${metrics_url:-$admin_url}" --pids "$pids" > "$work/runs/$name.after.json"
    if [ -n "$profiler" ]; then
        wait "$profiler" || true
        {
            echo "# perf of the gateway during $name ($what, $connections connections), BENCH_PERF=1 run: inclusive share"
            perf report -i "$work/perf-$name.data" --children --sort symbol --stdio -g none 2>/dev/null \
                | grep -E '^ +[0-9.]+%' | head -60
            echo "# self share"
            perf report -i "$work/perf-$name.data" --no-children --sort symbol --stdio -g none 2>/dev/null \
                | grep -E '^ +[0-9.]+%' | head -30
        } | swift demangle --simplified | cut -c1-220 > "bench/results/perf-$name.txt" || true
    fi
    printf '{"name":"%s","target":"%s","kind":"%s","what":"%s","connections":%d,"rate":%s,"seconds":%s,"clk_tck":%s}\n' \
        "$name" "$target" "$kind" "$what" "$connections" "$rate" "$seconds" "$clk_tck" >> "$work/runs/manifest.jsonl"
    printf '%-16s %-40s %s\n' "$name" "$what, $connections conns" "$(tail -1 "$work/runs/$name.out")"
    for pid in $gateway_pid $old_pid; do
        kill -0 "$pid" 2>/dev/null && continue
        echo "bench: the gateway under test (pid $pid) is gone after $name; its stderr ends:" >&2
        tail -5 "$work/logs/gateway.err" "$work/logs/old-gateway.err" 2>/dev/null >&2
        exit 1
    done
}
next_round() {  # NAME: the first counter the run after NAME may use
    local round
    round=$(report field "$work/runs/$1.wrk.json" next_round)
    [ -n "$round" ] || { echo "bench: run $1 left no summary, so the next unused request is unknown" >&2; exit 1; }
    echo "$round"
}
best() { report best "$work" "$1"; }

echo "bench: $threads cores, ${duration}s per run, connections: $levels; work dir $work"
echo "bench: (f) single-core crypto"
openssl speed -seconds 5 ecdsap256 > "$work/openssl-speed.txt" 2>&1
"$gateway" bench verify --seconds 5 > "$work/bench-verify.txt"
grep -E "ecdsa \(nistp256\)" "$work/openssl-speed.txt" | tail -1
cat "$work/bench-verify.txt"

for connections in $levels; do
    load "a-c$connections" a max "upstream direct (nginx return 200)" "$connections" "$upstream_url/pass/items/1"
done
# nginx and the gateway back to back at each level: the machine drifts over minutes, and their ratio is
# the figure that matters.
for connections in $levels; do
    load "b-c$connections" b max "nginx proxy_pass, keepalive" "$connections" "$proxy_url/pass/items/1"
    load "c-c$connections" c max "gateway pass route" "$connections" "$gateway_url/pass/items/1"
done

# Latency at half load: the gateway pass route and the bare upstream paced to half the route's best rate.
pass_best=$(best c)
load a-rate-pass a rate "upstream direct, paced" "$rate_connections" "$upstream_url/pass/items/1" BENCH_RATE=$((pass_best / 2))
load c-rate c rate "gateway pass, paced" "$rate_connections" "$gateway_url/pass/items/1" BENCH_RATE=$((pass_best / 2))

# Pre-signed assert requests come in files of $devices new devices each; $requests is the current file,
# $round its first unused round (counter) and $file_end the round past its last.
requests="" round=1 file_end=1 files=0
# need_requests COUNT [BATCH]: COUNT unused requests or more, else a new file of BATCH (default COUNT).
need_requests() {
    [ $(( (file_end - round) * devices )) -ge "$1" ] && return 0
    local count=${2:-$1} rounds
    rounds=$(( (count + devices - 1) / devices + 1 ))
    files=$((files + 1)) requests="$work/requests-$files.txt" round=1 file_end=$((rounds + 1))
    echo "bench: preparing $requests: $devices devices x $rounds requests"
    "$gateway" bench prepare --gateway "$gateway_url" --ca "$work/ca" --devices "$devices" --requests-per-device "$rounds" \
        --out "$requests" > "$work/prepare-$files.json" 2> "$work/logs/prepare-$files.log"
    cat "$work/prepare-$files.json"
}
# enough SECONDS RATE: the requests one run of SECONDS at RATE req/s can use, 15 % to spare.
enough() { python3 -c "print(int($1 * max($2, 100) * 1.15))"; }

# The gateway's assert route cannot beat its pass route (same gateway, more work per request), so the
# pass route's best rate bounds its first run; later runs get room for 1.3 x the best assert rate so far
# (signing requests nobody sends was a minute of the bench). A run that would be short gets a new file.
left=$level_count
for connections in $levels; do
    assert_so_far=$(best d)
    if [ "$assert_so_far" -gt 0 ]; then
        bound=$(python3 -c "print(int($assert_so_far * 1.3))") batch_seconds="$duration * ($left + 0.5)"
    else
        bound=$pass_best batch_seconds=$duration
    fi
    need_requests "$(enough "$duration" "$bound")" "$(enough "$batch_seconds" "$bound")"
    left=$((left - 1))
    load "d-c$connections" d max "gateway assert route" "$connections" "$gateway_url" \
        BENCH_REQUESTS="$requests" BENCH_START_ROUND="$round"
    round=$(next_round "d-c$connections")
done
assert_best=$(best d)
load a-rate-assert a rate "upstream direct, paced" "$rate_connections" "$upstream_url/pass/items/1" BENCH_RATE=$((assert_best / 2))
need_requests "$(enough "$duration" "$assert_best / 2")"
load d-rate d rate "gateway assert, paced" "$rate_connections" "$gateway_url" BENCH_RATE=$((assert_best / 2)) \
    BENCH_REQUESTS="$requests" BENCH_START_ROUND="$round"
round=$(next_round d-rate)

# The DIY peer is another stack with no such bound: its first run gets room for 1.5 x the gateway's best
# rate, later ones for 1.5 x its own best, and a new file is prepared when that is short.
diy_bound=$(python3 -c "print(int(max($pass_best, $assert_best) * 1.5))")
left=$level_count
for connections in $levels; do
    batch_seconds=$([ "$(best e)" -gt 0 ] && echo "$duration * $left" || echo "$duration")
    need_requests "$(enough "$duration" "$diy_bound")" "$(enough "$batch_seconds" "$diy_bound")"
    left=$((left - 1))
    load "e-c$connections" e max "DIY: nginx auth_request + pyattest" "$connections" "$diy_url" \
        BENCH_REQUESTS="$requests" BENCH_START_ROUND="$round"
    round=$(next_round "e-c$connections")
    diy_bound=$(python3 -c "print(int(max($(best e), 100) * 1.5))")
done

# The thread-per-connection main (49b53de), same load: its pass route, then its assert route with
# requests it prepared itself (its own CA, Redis database 1), at 64 and 256 connections (those of them in
# the run, else the peak). It runs only for these runs; a build that failed is reported, not measured.
old_levels=$(for level in 64 256; do if [[ " $levels " == *" $level "* ]]; then echo "$level"; fi; done | paste -sd' ' -)
[ -n "$old_levels" ] || old_levels=$peak
if [ -n "$old_gateway" ]; then
    mkdir -p "$work/old-ca"
    "$old_gateway" bench ca --out "$work/old-ca" >/dev/null
    "$old_gateway" serve --config "$work/old-gateway.yaml" > /dev/null 2> "$work/logs/old-gateway.err" &
    old_pid=$!
    wait_for "$old_url/pass/"
    saved_pids=$pids
    pids="old=$old_pid upstream=$(workers_of upstream) redis=$(cat "$work/redis.pid")" metrics_url=$old_admin_url
    for connections in $old_levels; do
        load "oldc-c$connections" oldc max "old main (49b53de) pass route" "$connections" "$old_url/pass/items/1"
    done
    old_count=$(enough "$duration * ($(wc -w <<< "$old_levels") + 0.5)" "$(best oldc)")
    old_rounds=$(( (old_count + devices - 1) / devices + 1 ))
    echo "bench: preparing $work/old-requests.txt with the old main: $devices devices x $old_rounds requests"
    "$old_gateway" bench prepare --gateway "$old_url" --ca "$work/old-ca" --devices "$devices" \
        --requests-per-device "$old_rounds" --out "$work/old-requests.txt" > "$work/old-prepare.json" 2> "$work/logs/old-prepare.log"
    old_round=1
    for connections in $old_levels; do
        load "oldd-c$connections" oldd max "old main (49b53de) assert route" "$connections" "$old_url" \
            BENCH_REQUESTS="$work/old-requests.txt" BENCH_START_ROUND="$old_round"
        old_round=$(next_round "oldd-c$connections")
    done
    kill "$old_pid"; wait "$old_pid" 2>/dev/null || true
    old_pid="" pids=$saved_pids metrics_url=""
    echo '{"commit": "49b53de", "built": true}' > "$work/old.json"
else
    echo "bench: no comparison with the thread-per-connection main: $old_error"
    python3 -c 'import json, sys; json.dump({"commit": "49b53de", "built": False, "reason": sys.argv[1]}, open(sys.argv[2], "w"))' \
        "$old_error" "$work/old.json"
fi

# Many keys: written straight into Redis with the gateway's own store code (attesting 100k keys would
# take longer than the whole bench). Then the assert route again at peak connections, twice: from as many
# of the new keys as the small runs had devices, several requests each (the same traffic as d, with 50 x
# the keys registered; the first request of each key misses the key cache), and each request from a key
# not used before (every lookup misses: the worst case).
if [ "$keys" -gt 0 ]; then
    active=$devices
    measured=$(python3 -c "print(int(max($assert_best, 100) * $duration * 1.3) + 1000)")
    echo "bench: storing $keys keys or more directly in Redis: $measured assert requests from $active of them," \
        "$measured from as many others"
    "$gateway" bench prepare --gateway "$gateway_url" --ca "$work/ca" --devices "$active" \
        --requests-per-device $(( (measured + active - 1) / active )) \
        --max-requests "$measured" --register store --redis "$redis_url" \
        --out "$work/keys.txt" > "$work/prepare-keys.json" 2> "$work/logs/prepare-keys.log"
    others=$((keys - active > measured ? keys - active : measured))  # one key per request: never short
    "$gateway" bench prepare --gateway "$gateway_url" --ca "$work/ca" --devices "$others" \
        --requests-per-device 1 --max-requests "$measured" --register store --redis "$redis_url" \
        --out "$work/keys-miss.txt" > "$work/prepare-keys-miss.json" 2> "$work/logs/prepare-keys-miss.log"
    cat "$work/prepare-keys.json" "$work/prepare-keys-miss.json"
    load "keys-c$peak" keys max "assert, +$keys keys, $active active" "$peak" "$gateway_url" BENCH_REQUESTS="$work/keys.txt"
    load "keys-miss-c$peak" keys max "assert, +$keys keys, all cache misses" "$peak" "$gateway_url" \
        BENCH_REQUESTS="$work/keys-miss.txt"
fi

# Idle connections: $idle_count keep-alive connections, one request each, then silent; the gateway's RSS
# and threads with all of them open, and a request on a fresh connection meanwhile.
if [ "$(ulimit -n)" -gt $((idle_count + 100)) ]; then
    python3 bench/idle.py --port "$gateway_port" --pid "$gateway_pid" --count "$idle_count" --out "$work/idle.json"
else
    echo "bench: ulimit -n is $(ulimit -n): too low for $idle_count idle connections"
    printf '{"count": %d, "skipped": "ulimit -n %s"}\n' "$idle_count" "$(ulimit -n)" > "$work/idle.json"
fi

# Streams: $sse_streams server-sent-event streams through the gateway's pass route at once (one event a
# second for $sse_events s each), and meanwhile, once the upstream holds them all, the fast pass route
# paced at 200 req/s over 16 connections for $duration s.
python3 bench/sse_clients.py --port "$gateway_port" --streams "$sse_streams" --events "$sse_events" --out "$work/sse.json" &
sse_clients=$!
for _ in $(seq 150); do
    active=$(curl -s "$sse_url/stats" | python3 -c 'import json, sys; print(json.load(sys.stdin)["active"])' || echo 0)
    [ "$active" -ge "$sse_streams" ] && break
    sleep 0.1
done
curl -s "$sse_url/stats" > "$work/sse-upstream-start.json"
load sse-fast sse rate "gateway pass during $sse_streams SSE streams" 16 "$gateway_url/pass/items/1" BENCH_RATE=200
curl -s "$sse_url/stats" > "$work/sse-upstream-end.json"
wait "$sse_clients" || true
curl -s "$sse_url/stats" > "$work/sse-upstream.json"

# HTTP/2 over TLS against nginx the same way (bench/h2.sh: its own services); its runs go into the table below.
if [ "${BENCH_H2:-1}" = 1 ]; then
    echo "bench: HTTP/2 over TLS (h2load) and TLS handshakes, gateway and nginx"
    BENCH_DURATION=$duration BENCH_H2_OUT="$work/h2.json" BENCH_H2_SUMMARY=0 bench/h2.sh
fi

# --- Report -------------------------------------------------------------------------------------------
python3 - "$work/environment.json" <<EOF
import glob, json, os, platform, subprocess, sys
def run(*command):
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=10)
        return (result.stdout + result.stderr).strip().splitlines()[0]
    except Exception as error:
        return str(error)
cpu = [line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")]
environment = {
    "date": run("date", "-u", "+%Y-%m-%dT%H:%M:%SZ"), "commit": run("git", "describe", "--always", "--dirty"),
    "cores": os.cpu_count(), "cpu": cpu[0] if cpu else "", "kernel": platform.release(),
    "nginx": run("nginx", "-v"), "wrk": run("wrk", "-v"), "redis": run("redis-server", "--version"),
    "openssl": run("openssl", "version"), "python_diy": run("$venv/bin/python", "--version"),
    "settings": {"duration_s": $duration, "levels": "$levels".split(), "devices": $devices, "keys": $keys,
                 "rate_connections": $rate_connections, "wrk_threads": $threads, "quick": "${BENCH_QUICK:-0}" == "1",
                 "idle_connections": $idle_count, "sse_streams": $sse_streams, "sse_events": $sse_events},
    "prepare": [json.load(open(path)) for path in sorted(glob.glob("$work/prepare-*.json"))],
    "total_seconds": $(date +%s) - $bench_start,
}
json.dump(environment, open(sys.argv[1], "w"))
EOF
echo
report table "$work" "$out"
echo
echo "bench: wrote $out in $(( $(date +%s) - bench_start )) s"
