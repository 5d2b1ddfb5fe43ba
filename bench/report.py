#!/usr/bin/env python3
"""Helpers of bench/run.sh (stdlib only).

  report.py snapshot --admin URL --pids "name=pid,pid …"   gateway counters + per-group memory, as JSON
  report.py reset-peaks --pids "…"                         VmHWM := VmRSS for every pid (clear_refs 5)
  report.py best WORK TARGET                               highest valid req/s among TARGET's runs
  report.py field FILE KEY                                 one number from a run's wrk summary
  report.py table WORK OUT                                 results JSON to OUT, table to stdout
"""

import json
import os
import re
import sys
import urllib.request

COUNTER = re.compile(r'^(gateway_requests_total|gateway_key_cache_total|gateway_key_cache_entries'
                     r'|gateway_(?:request|verify|store|upstream)_duration_seconds_bucket)(?:\{([^}]*)\})? ([0-9.e+]+)$')
PHASES = ("request", "verify", "store", "upstream")
FAILED_SHARE = 0.001  # more rejected or failed requests than this and a run is FAILED, not fast
# Whose CPU a target's throughput costs (the upstream nginx serves every target and is listed apart).
COMPONENTS = {"a": ["upstream"], "b": ["front"], "c": ["gateway"], "d": ["gateway"], "e": ["front", "diy"],
              "keys": ["gateway"], "sse": ["gateway"], "oldc": ["old"], "oldd": ["old"]}
# Whose memory the table's "gw MiB" shows: this gateway, or the thread-per-connection one (49b53de).
GATEWAY_PROCESS = {"c": "gateway", "d": "gateway", "keys": "gateway", "sse": "gateway", "oldc": "old", "oldd": "old"}
COMPARED_LEVELS = (64, 256)  # connection levels of the per-level ratios (the peak level when neither ran)


def pid_groups(text):
    groups = {}
    for item in text.split():
        name, _, pids = item.partition("=")
        groups[name] = [pid for pid in pids.split(",") if pid]
    return groups


def memory_kib(pid):
    values = {}
    try:
        with open("/proc/%s/status" % pid) as status:
            for line in status:
                if line.startswith(("VmHWM:", "VmRSS:")):
                    values[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return values


def snapshot(admin, pids):
    counters = {}
    if admin:
        try:
            with urllib.request.urlopen(admin + "/metrics", timeout=5) as response:
                for line in response.read().decode().splitlines():
                    match = COUNTER.match(line)
                    if match:
                        counters["%s{%s}" % (match[1], match[2] or "")] = float(match[3])
        except OSError as error:
            counters["error"] = str(error)
    memory = {}
    for name, group in pid_groups(pids).items():
        totals = {"VmHWM": 0, "VmRSS": 0}
        for pid in group:
            for key, value in memory_kib(pid).items():
                totals[key] += value
        memory[name] = {"peak_rss_mib": round(totals["VmHWM"] / 1024, 1), "rss_mib": round(totals["VmRSS"] / 1024, 1)}
    with open("/proc/loadavg") as loadavg:
        load = float(loadavg.read().split()[0])
    return {"counters": counters, "memory": memory, "loadavg_1m": load}


def reset_peaks(pids):
    for group in pid_groups(pids).values():
        for pid in group:
            try:
                with open("/proc/%s/clear_refs" % pid, "w") as refs:
                    refs.write("5")
            except OSError:
                pass


def load_runs(work):
    runs = []
    with open(os.path.join(work, "runs", "manifest.jsonl")) as manifest:
        for line in manifest:
            run = json.loads(line)
            base = os.path.join(work, "runs", run["name"])
            run["wrk"] = read_json(base + ".wrk.json")
            run["before"] = read_json(base + ".before.json")
            run["after"] = read_json(base + ".after.json")
            judge(run)
            runs.append(run)
    return runs


def read_json(path):
    try:
        with open(path) as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def phase_quantiles(before, after):
    """p50/p99 (ms) of the gateway's own phase histograms over the run, interpolated inside buckets."""
    result = {}
    for phase in PHASES:
        prefix = "gateway_%s_duration_seconds_bucket" % phase
        buckets = {}
        for key, value in after.items():
            if key.startswith(prefix):
                bound = re.search(r'le="([^"]+)"', key)[1]
                bound = float("inf") if bound == "+Inf" else float(bound)
                buckets[bound] = buckets.get(bound, 0) + value - before.get(key, 0)
        bounds = sorted(buckets)
        total = buckets[bounds[-1]] if bounds else 0
        if total <= 0:
            continue
        quantiles = {}
        for name, share in (("p50", 0.5), ("p99", 0.99)):
            target, lower, below = share * total, 0.0, 0.0
            for bound in bounds:
                if buckets[bound] >= target:
                    if bound == float("inf"):
                        quantiles[name] = None  # beyond the last bucket
                    else:
                        within = (target - below) / max(buckets[bound] - below, 1e-9)
                        quantiles[name] = round((lower + (bound - lower) * within) * 1000, 2)
                    break
                lower, below = bound, buckets[bound]
        result[phase] = quantiles
    return result


def judge(run):
    """Adds status, gateway decisions and CPU cores to a run."""
    wrk = run["wrk"]
    if not wrk:
        run["status"] = "NO_RESULT"
        return
    errors = wrk["errors"]
    socket_errors = errors["connect"] + errors["read"] + errors["write"] + errors["timeout"]
    bad = errors["non_2xx"] + socket_errors
    run["failed_share"] = bad / max(1, wrk["requests"] + socket_errors)
    before = run["before"].get("counters", {})
    after = run["after"].get("counters", {})
    decisions = {}
    for key, value in after.items():
        if key.startswith("gateway_requests_total") and "builtin" not in key:
            delta = value - before.get(key, 0)
            if delta:
                labels = dict(re.findall(r'(\w+)="([^"]*)"', key))
                # Summed over the status-class label (code).
                reason = labels.get("reason", "")
                name = "%s %s%s" % (labels.get("route"), labels.get("decision"), " " + reason if reason else "")
                decisions[name] = decisions.get(name, 0) + int(delta)
    run["gateway_decisions"] = decisions
    run["gateway_ms"] = phase_quantiles(before, after)
    cache = {k.split('"')[1]: int(after[k] - before.get(k, 0)) for k in after if k.startswith("gateway_key_cache_total")}
    if "gateway_key_cache_entries{}" in after:
        cache["entries_after"] = int(after["gateway_key_cache_entries{}"])
    run["key_cache"] = cache
    wall = wrk["load_wall_s"]
    run["cpu_cores"] = {name: round(ticks / run["clk_tck"] / wall, 2) for name, ticks in wrk["cpu_ticks"].items()}
    run["cpu_seconds"] = {name: round(ticks / run["clk_tck"], 2) for name, ticks in wrk["cpu_ticks"].items()}
    run["component_cores"] = round(sum(run["cpu_cores"].get(name, 0) for name in COMPONENTS[run["target"]]), 2)
    # CPU of the measured component per request: its cores over the run's req/s.
    # (Not for sse-fast: the gateway's CPU then is mostly the streams'.)
    run["component_us_per_request"] = (round(run["component_cores"] / wrk["rps"] * 1e6, 1)
                                       if wrk["rps"] and run["target"] != "sse" else None)
    if wrk["exhausted"] > 0:
        run["status"] = "EXHAUSTED"
    elif run["failed_share"] > FAILED_SHARE:
        run["status"] = "FAILED"
    else:
        run["status"] = "ok"


def best(runs, target):
    valid = [run for run in runs if run["target"] == target and run["kind"] == "max" and run["status"] == "ok"]
    return max(valid, key=lambda run: run["wrk"]["rps"]) if valid else None


def named(runs, name):
    found = [run for run in runs if run["name"] == name and run["status"] == "ok"]
    return found[0] if found else None


def crypto(work):
    result = {}
    speed = open(os.path.join(work, "openssl-speed.txt")).read() if os.path.exists(os.path.join(work, "openssl-speed.txt")) else ""
    # "256 bits ecdsa (nistp256)   0.0000s   0.0001s  40000.0  12000.0"
    match = re.search(r"256 bits ecdsa \(nistp256\)\s+\S+s\s+\S+s\s+([0-9.]+)\s+([0-9.]+)", speed)
    if match:
        result["openssl_sign_per_s"] = float(match[1])
        result["openssl_verify_per_s"] = float(match[2])
    path = os.path.join(work, "bench-verify.txt")
    if os.path.exists(path):
        for line in open(path):
            key, _, value = line.strip().partition("=")
            if value:
                result["gateway_bench_verify_" + key] = float(value)
    return result


def ratio(numerator, denominator):
    return round(numerator / denominator, 3) if numerator is not None and denominator else None


def compared_levels(runs):
    ran = {run["connections"] for run in runs if run["kind"] == "max" and run["target"] in ("b", "c")}
    levels = [level for level in COMPARED_LEVELS if level in ran]
    return levels or [max_connections(runs)]


def targets(runs, crypto_result, settings, extra):
    a, b, c, d, e = (best(runs, name) for name in "abcde")
    rps = lambda run: run["wrk"]["rps"] if run else None
    p99 = lambda run: run["wrk"]["latency_ms"]["p99"] if run else None
    verify = crypto_result.get("openssl_verify_per_s")
    cores = d["cpu_cores"].get("gateway") if d else None
    checks = []

    def check(name, value, goal, met, how, note=None):
        checks.append({"target": name, "value": value, "goal": goal,
                       "met": None if value is None or met is None else met(value), "how": how, "note": note})

    levels = compared_levels(runs)
    for level in levels:
        pass_run, nginx_run = named(runs, "c-c%d" % level), named(runs, "b-c%d" % level)
        check("pass / nginx proxy_pass, %d connections (c/b)" % level, ratio(rps(pass_run), rps(nginx_run)), ">= 0.8",
              lambda v: v >= 0.8, "req/s of the gateway pass route over req/s of nginx proxy_pass at the same level")
    for level in levels:
        pass_run, nginx_run = named(runs, "c-c%d" % level), named(runs, "b-c%d" % level)
        us = lambda run: run["component_us_per_request"] if run else None
        check("CPU per pass request / nginx's, %d conns (%s/%s us)" % (level, us(pass_run), us(nginx_run)),
              ratio(us(pass_run), us(nginx_run)), "<= 2", lambda v: v <= 2,
              "gateway CPU seconds per request (c) over the front nginx's (b), /proc utime+stime over the run")
    check("pass / nginx proxy_pass, best of each (c/b)", ratio(rps(c), rps(b)), "-", None,
          "best req/s of the gateway pass route over best req/s of nginx proxy_pass, any connection level")
    old = extra.get("old", {})
    for level in ([run["connections"] for run in runs if run["target"] == "oldd"] or levels):
        new_run, old_run = named(runs, "d-c%d" % level), named(runs, "oldd-c%d" % level)
        note = None if old.get("built") else "old main not measured: %s" % old.get("reason", "no result")
        if old.get("built") and not old_run:
            note = "the old main's run oldd-c%d is not ok" % level
        check("assert / old thread-per-connection main, %d conns" % level, ratio(rps(new_run), rps(old_run)),
              ">= 2", lambda v: v >= 2,
              "req/s of this gateway's assert route over 49b53de's in the same bench run, same level", note)
    for level in [run["connections"] for run in runs if run["target"] == "oldc"]:
        check("pass / old thread-per-connection main, %d conns" % level,
              ratio(rps(named(runs, "c-c%d" % level)), rps(named(runs, "oldc-c%d" % level))), "-", None,
              "req/s of this gateway's pass route over 49b53de's in the same bench run, same level")
    check("assert / (ECDSA verify/s x cores) (d/(f x cores))",
          ratio(rps(d), verify * cores if verify and cores else None), ">= 0.6", lambda v: v >= 0.6,
          "cores = gateway CPU seconds / wall seconds during the best assert run; f = openssl speed verify/s (one core)")
    check("assert / DIY peer (d/e)", ratio(rps(d), rps(e)), ">= 10", lambda v: v >= 10,
          "best req/s of the gateway assert route over best req/s of nginx auth_request + pyattest verifier")
    for kind, goal in (("pass", 1.0), ("assert", 2.0)):
        loaded = named(runs, "%s-rate" % ("c" if kind == "pass" else "d"))
        base = named(runs, "a-rate-%s" % kind)
        added = round(p99(loaded) - p99(base), 3) if loaded and base else None
        check("added p99 at 50%% load, %s (ms)" % kind, added, "<= %g" % goal, lambda v, g=goal: v <= g,
              "p99 of the gateway minus p99 of the bare upstream, both paced by wrk delay() to half the "
              "gateway's best req/s")
    peak = max_connections(runs)
    big, small = named(runs, "keys-c%s" % peak), named(runs, "d-c%s" % peak)
    missing = named(runs, "keys-miss-c%s" % peak)
    keys, devices = settings.get("keys", 0), settings.get("devices", 0)
    peaks = [run["after"]["memory"].get("gateway", {}).get("peak_rss_mib") for run in (big, missing) if run]
    rss = max(peaks) if peaks and None not in peaks else None
    cached = max([run.get("key_cache", {}).get("entries_after", 0) for run in (big, missing) if run] or [0])
    check("gateway peak RSS, %s connections, %s keys (up to %s cached) (MiB)" % (peak, keys + 2 * devices, cached), rss,
          "<= 64", lambda v: v <= 64,
          "highest VmHWM (reset before each run) of the gateway during the two assert runs with the large key set")
    check("assert req/s, %s keys / %s keys (%s connections)" % (keys + 2 * devices, devices, peak),
          ratio(rps(big), rps(small)), ">= 0.9", lambda v: v >= 0.9,
          "req/s of the assert run from a tenth of the large key set (the first request of each key misses the "
          "cache) over the same run with the small set")
    check("assert req/s, every request a key-cache miss / small key set", ratio(rps(missing), rps(small)), "-",
          None, "the worst case, no target: each request from a key this gateway process has not seen")
    idle = extra.get("idle", {})
    idle_note = idle.get("skipped") or ("%s of %s connections opened" % (idle.get("opened"), idle.get("count"))
                                        if idle.get("opened") != idle.get("count") else None)
    idle_rss = idle.get("idle", {}).get("rss_mib") if not idle_note else None
    check("gateway RSS with %s idle keep-alive connections (MiB)" % idle.get("count"), idle_rss, "<= 100",
          lambda v: v <= 100, "VmRSS of the gateway with every connection open after one request each", idle_note)
    check("a fresh request meanwhile (status), idle connections still open: %s" % idle.get("still_open"),
          idle.get("fresh_status") if not idle_note else None, "200", lambda v: v == 200,
          "GET on a new connection while the idle ones are open", idle_note)
    h2 = extra.get("h2", {})
    h2_note = None if h2.get("runs") else "bench/h2.sh did not run (BENCH_H2=0) or left no result"
    us = lambda name: h2.get("runs", {}).get(name, {}).get("us_per_req")
    check("h2 + TLS: gateway / nginx ssl http2 req/s (h2load)", h2.get("req_s_vs_nginx"), ">= 0.8",
          lambda v: v >= 0.8, "req/s of the gateway's TLS listener (ALPN h2, pass route) over nginx's, same h2load run "
          "settings, back to back", h2_note)
    cpu = tuple("%.0f" % us(name) if us(name) else "-" for name in ("gateway-h2", "nginx-h2"))
    check("h2 + TLS: CPU per request / nginx's (%s/%s us)" % cpu, h2.get("cpu_per_req_vs_nginx"), "<= 1.5",
          lambda v: v <= 1.5, "gateway CPU seconds per request over nginx's workers', /proc utime+stime over the run",
          h2_note)
    check("new TLS handshakes/s: gateway / nginx (openssl s_time -new)", h2.get("handshakes_vs_nginx"), "-", None,
          "two s_time clients at once against each, no resumption", h2_note)
    sse = extra.get("sse", {})
    fast = named(runs, "sse-fast")
    start = extra.get("sse_upstream_start", {}).get("active")
    check("SSE streams ok of %s (failed %s %s)" % (sse.get("streams"), sse.get("failed"), sse.get("reasons") or ""),
          sse.get("ok"), "all", lambda v: v == sse.get("streams"),
          "streams that got 200, every event and a clean end; run concurrently through the pass route")
    check("fast route p99 during the streams (ms; %s streams open at its start)" % start, p99(fast), "< 100",
          lambda v: v < 100, "wrk paced at 200 req/s over 16 connections on /pass/ while the streams run",
          None if fast else "the fast run sse-fast is missing or not ok")
    return checks


def max_connections(runs):
    return max([run["connections"] for run in runs if run["kind"] == "max"] or [0])


def table(work, out):
    runs = load_runs(work)
    crypto_result = crypto(work)
    environment = read_json(os.path.join(work, "environment.json"))
    extra = {name.replace("-", "_"): read_json(os.path.join(work, name + ".json"))
             for name in ("old", "idle", "sse", "sse-upstream", "sse-upstream-start", "sse-upstream-end", "h2")}
    checks = targets(runs, crypto_result, environment.get("settings", {}), extra)
    result = {"environment": environment, "crypto": crypto_result, "targets": checks, "runs": [
        {key: run[key] for key in run if key not in ("before", "after", "clk_tck")}
        | {"memory": run["after"].get("memory", {}), "loadavg_1m": run["after"].get("loadavg_1m")}
        for run in runs]} | extra
    with open(out, "w") as handle:
        json.dump(result, handle, indent=1, sort_keys=True)
        handle.write("\n")
    print_table(runs, crypto_result, checks, extra)


def print_table(runs, crypto_result, checks, extra):
    header = "%-14s %-36s %5s %6s %8s %7s %7s %6s %7s %5s %6s %6s %5s  %s" % (
        "run", "what", "conns", "rate", "req/s", "p50 ms", "p99 ms", "non2xx", "sockerr", "cores", "us/req", "gw MiB",
        "load", "status")
    print(header)
    print("-" * len(header))
    for run in runs:
        wrk = run["wrk"]
        if not wrk:
            print("%-14s %-36s %s" % (run["name"], run["what"][:36], run["status"]))
            continue
        errors = wrk["errors"]
        socket_errors = errors["connect"] + errors["read"] + errors["write"] + errors["timeout"]
        memory = run["after"].get("memory", {}).get(GATEWAY_PROCESS.get(run["target"]), {})
        print("%-14s %-36s %5d %6s %8.0f %7.2f %7.2f %6d %7d %5.2f %6s %6s %5.1f  %s" % (
            run["name"], run["what"][:36], run["connections"], "%.0f" % run["rate"] if run["rate"] else "max",
            wrk["rps"], wrk["latency_ms"]["p50"], wrk["latency_ms"]["p99"], errors["non_2xx"], socket_errors,
            run["component_cores"], run.get("component_us_per_request") or "-", memory.get("peak_rss_mib", "-"),
            run["after"].get("loadavg_1m", 0), run["status"]))
        decisions = run.get("gateway_decisions", {})
        if any(not key.endswith((" verified", " pass")) for key in decisions):
            print("%14s gateway decisions: %s" % ("", decisions))
        if run["target"] == "keys":
            print("%14s gateway key cache: %s" % ("", run.get("key_cache", {})))
        phases = run.get("gateway_ms", {})
        if phases:
            print("%14s inside the gateway, p50/p99 ms: %s" % ("", ", ".join(
                "%s %s/%s" % (phase, phases[phase].get("p50"), phases[phase].get("p99")) for phase in PHASES if phase in phases)))
    print_h2_rows(extra.get("h2", {}))
    idle, sse = extra.get("idle", {}), extra.get("sse", {})
    if idle.get("idle"):
        print("%-14s %s connections opened of %s in %s s (failures %s); gateway RSS %s -> %s MiB, threads %s -> %s; "
              "fresh request: %s; still open after: %s" % (
                  "idle", idle["opened"], idle["count"], idle["open_seconds"], idle["failures"] or "none",
                  idle["before"]["rss_mib"], idle["idle"]["rss_mib"], idle["before"]["threads"], idle["idle"]["threads"],
                  idle["fresh_status"], idle["still_open"]))
    if sse:
        print("%-14s %s of %s streams ok, failed %s %s; %s of %s events; all headers after %s s; upstream peak %s "
              "streams, %s open when sse-fast started, %s when it ended" % (
                  "sse", sse.get("ok"), sse.get("streams"), sse.get("failed"), sse.get("reasons") or "",
                  sse.get("events"), sse.get("events_expected"), sse.get("all_headers_s"),
                  extra.get("sse_upstream", {}).get("peak"), extra.get("sse_upstream_start", {}).get("active"),
                  extra.get("sse_upstream_end", {}).get("active")))
    print()
    for key, value in sorted(crypto_result.items()):
        print("%-50s %12.0f" % (key, value) if value > 10 else "%-50s %12.3f" % (key, value))
    print()
    print("%-70s %10s %8s  %s" % ("target", "value", "goal", "met"))
    for check in checks:
        met = "info" if check["goal"] == "-" else {True: "MET", False: "MISSED", None: "not measured"}[check["met"]]
        if check.get("note"):
            met += " (%s)" % check["note"]
        print("%-70s %10s %8s  %s" % (check["target"], check["value"], check["goal"], met))


# bench/h2.sh's runs in the table's columns (h2load: no rate-paced runs; memory is not sampled).
H2_ROWS = (("nginx-h2", "nginx ssl http2 proxy_pass (h2load)"), ("gateway-h2", "gateway TLS h2 pass route (h2load)"))
TLS_ROWS = (("nginx-tls", "nginx: TLS handshakes/s (s_time)"), ("gateway-tls", "gateway: TLS handshakes/s (s_time)"))


def print_h2_rows(h2):
    runs = h2.get("runs", {})
    for name, what in H2_ROWS:
        run = runs.get(name)
        if not run:
            continue
        status = "ok" if run["succeeded"] and run["non_2xx"] + run["errored"] <= FAILED_SHARE * run["succeeded"] else "FAILED"
        print("%-14s %-36s %5s %6s %8.0f %7s %7s %6d %7d %5.2f %6s %6s %5.1f  %s" % (
            name, what[:36], "%dx%d" % (run["connections"], run["streams"]), "max", run["req_s"],
            "%.2f" % run["p50_ms"] if run["p50_ms"] is not None else "-",
            "%.2f" % run["p99_ms"] if run["p99_ms"] is not None else "-", run["non_2xx"], run["errored"], run["cores"],
            "%.1f" % run["us_per_req"] if run["us_per_req"] else "-", "-", run["loadavg_1m"], status))
    for name, what in TLS_ROWS:
        if name in runs:
            print("%-14s %-36s %5s %6s %8.0f" % (name, what[:36], 2, "max", runs[name]["handshakes_s"]))


def main(argv):
    command = argv[1] if len(argv) > 1 else ""
    if command == "snapshot":
        options = dict(zip(argv[2::2], argv[3::2]))
        print(json.dumps(snapshot(options.get("--admin"), options.get("--pids", ""))))
    elif command == "reset-peaks":
        reset_peaks(dict(zip(argv[2::2], argv[3::2])).get("--pids", ""))
    elif command == "best":
        run = best(load_runs(argv[2]), argv[3])
        print("%.0f" % run["wrk"]["rps"] if run else "0")
    elif command == "field":
        value = read_json(argv[2])
        for key in argv[3].split("."):
            value = value.get(key, {}) if isinstance(value, dict) else {}
        print(value if value != {} else "")
    elif command == "table":
        table(argv[2], argv[3])
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
