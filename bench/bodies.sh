#!/usr/bin/env bash
# Large bodies through the proxy, both directions: Sluice beside NGINX and HAProxy (issue 12).
#
#   bench/bodies.sh [--rounds N] [--duration SECONDS] [--cases "down-1k down-64k ..."]
#                   [--syscalls]
#
# Cases: down-1k, down-64k, down-1m (GET /bytes/N from the origin: the response carries the
# body); up-1k, up-64k, up-1m (POST of N bytes to /hello: the request carries it). wrk -t1 with
# 50 connections for 1 KiB, 20 for 64 KiB, 8 for 1 MiB.
#
# Layout as bench/run.sh: the proxy (one worker, one thread) pinned to CPU 0, the origin and wrk
# on CPU 1; each round runs every case against the three proxies, the order rotated every round
# (the machine's noise falls on each in turn). Reported: median req/s and proxy CPU µs per
# request ((utime+stime) from /proc over the wrk run), and Sluice's CPU per request over NGINX's
# and HAProxy's. --syscalls adds, per proxy and case, a 3 s run under `strace -c -f` (slow: only
# the counts are read): system calls per request and bytes per read and write call.
#
# NGINX is set not to touch the disk (client_body_buffer_size 2m, proxy_max_temp_file_size 0),
# HAProxy runs its defaults (no splicing: it is an option). Traffic to 127.0.0.1 only; stops
# everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/bodies.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=8
CASES="down-1k down-64k down-1m up-1k up-64k up-1m"
SYSCALLS=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    --syscalls) SYSCALLS=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out bodies
ensure nginx:nginx haproxy:haproxy wrk:wrk python3:python3
[ "$SYSCALLS" = 1 ] && ensure strace:strace
build_sluice

start_origin "$SLUICE"

cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
admin: {enabled: false}
limits: {max_body_size: 2m}
routes:
  - uri: /*
    upstream: {nodes: {"127.0.0.1:1980": 1}}
YAML
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  keepalive_requests 100000;
  client_max_body_size 2m;
  client_body_buffer_size 2m;
  proxy_max_temp_file_size 0;
$(nginx_hello 64 /)
}
CONF
cat > "$OUT/haproxy.cfg" <<CONF
global
  maxconn 4000
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 30s
  timeout server 30s
  timeout http-keep-alive 30s
frontend f
  bind 127.0.0.1:9095
  default_backend b
backend b
  http-reuse always
  server o 127.0.0.1:1980
CONF

# The body of an upload case, and wrk's script to send it.
size_of() { case "$1" in *-1k) echo 1024 ;; *-64k) echo 65536 ;; *-1m) echo 1048576 ;; esac; }
conns_of() { case "$1" in *-1k) echo 50 ;; *-64k) echo 20 ;; *-1m) echo 8 ;; esac; }

for c in $CASES; do
  case "$c" in
    up-*)
      python3 - "$OUT/$c.lua" "$(size_of "$c")" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write('wrk.method = "POST"\n')
    f.write('wrk.headers["Content-Type"] = "application/octet-stream"\n')
    f.write(f'wrk.body = string.rep("x", {n})\n')
PY
      ;;
  esac
done

# wrk_case PROXY CASE SECONDS [extra wrk args]: runs wrk for CASE against PROXY's port.
wrk_case() {
  local proxy=$1 c=$2 secs=$3; shift 3
  local port path script=()
  port=$(port_of "$proxy")
  case "$c" in
    down-*) path="/bytes/$(size_of "$c")" ;;
    up-*) path=/hello; script=(-s "$OUT/$c.lua") ;;
  esac
  taskset -c 1 wrk -t1 -c"$(conns_of "$c")" -d"${secs}s" "${script[@]}" "$@" "http://127.0.0.1:$port$path"
}

for c in $CASES; do
  case "$c" in
    down-1k|down-64k|down-1m|up-1k|up-64k|up-1m) ;;
    *) echo "unknown case $c: expected down-1k, down-64k, down-1m, up-1k, up-64k or up-1m" >&2; exit 2 ;;
  esac
done

PROXIES=(sluice nginx haproxy)
: > "$OUT/results.tsv"
for round in $(seq 1 "$ROUNDS"); do
  # Rotate the order: each proxy runs first, second and third in turn.
  k=$(( (round - 1) % 3 ))
  order=("${PROXIES[@]:k}" "${PROXIES[@]:0:k}")
  for proxy in "${order[@]}"; do
    start_proxy "$proxy"
    pid=$STARTED
    for c in $CASES; do
      wrk_case "$proxy" "$c" 2 >/dev/null
      before=$(cpu_tree "$pid")
      wrk_case "$proxy" "$c" "$DURATION" --latency > "$OUT/wrk-$round-$c-$proxy.txt"
      after=$(cpu_tree "$pid")
      IFS=$'\t' read -r rps p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$round-$c-$proxy.txt" "$((after - before))")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$proxy" "$rps" "$cpu" "$errors" >> "$OUT/results.tsv"
      echo "round $round $c $proxy: $rps req/s, $cpu µs CPU/request, errors $errors" >&2
    done
    stop_proxy "$pid"
    sleep 0.5
  done
done

if [ "$SYSCALLS" = 1 ]; then
  : > "$OUT/syscalls.tsv"
  for proxy in "${PROXIES[@]}"; do
    start_proxy "$proxy"
    pid=$STARTED
    for c in $CASES; do
      wrk_case "$proxy" "$c" 1 >/dev/null
      # NGINX: trace its worker (the master only waits).
      target=$pid
      [ "$proxy" = nginx ] && target=$(pgrep -P "$pid" | head -1)
      timeout 3 strace -c -f -qq -p "$target" -o "$OUT/strace-$c-$proxy.txt" &
      spid=$!
      sleep 0.3
      wrk_case "$proxy" "$c" 2 > "$OUT/strace-wrk-$c-$proxy.txt"
      wait "$spid" 2>/dev/null || true
      python3 - "$OUT/strace-$c-$proxy.txt" "$OUT/strace-wrk-$c-$proxy.txt" "$proxy" "$c" >> "$OUT/syscalls.tsv" <<'PY'
import re, sys
calls = 0
for line in open(sys.argv[1]):
    m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)", line)
    if m and m.group(2) != "total":
        calls += int(m.group(1))
reqs = int(re.search(r"(\d+) requests in", open(sys.argv[2]).read()).group(1))
print(f"{sys.argv[3]}\t{sys.argv[4]}\t{calls / max(reqs, 1):.1f}")
PY
    done
    stop_proxy "$pid"
    sleep 0.5
  done
fi

python3 - "$OUT/results.tsv" "$CASES" "$ROUNDS" "$DURATION" > "$OUT/results.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cases = sys.argv[2].split()
med = {}
for case in cases:
    for proxy in ("sluice", "nginx", "haproxy"):
        rs = [r for r in rows if r[1] == case and r[2] == proxy]
        if rs:
            med[case, proxy] = (statistics.median(float(r[3]) for r in rs),
                                statistics.median(float(r[4]) for r in rs),
                                sum(int(r[5]) for r in rs))
print(f"{sys.argv[3]} rounds of {sys.argv[4]} s, medians; CPU = the proxy's µs per request\n")
print("| case | Sluice req/s | CPU | NGINX req/s | CPU | HAProxy req/s | CPU | Sluice/NGINX CPU | Sluice/HAProxy CPU | errors S/N/H |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
for case in cases:
    s, n, h = (med.get((case, p)) for p in ("sluice", "nginx", "haproxy"))
    if not (s and n and h):
        continue
    print(f"| {case} | {s[0]:,.0f} | {s[1]:.1f} | {n[0]:,.0f} | {n[1]:.1f} | {h[0]:,.0f} | {h[1]:.1f} "
          f"| {s[1] / n[1]:.2f} | {s[1] / h[1]:.2f} | {s[2]}/{n[2]}/{h[2]} |")
PY
if [ -s "$OUT/syscalls.tsv" 2>/dev/null ]; then
  { echo; echo "system calls per request (strace -c -f, 2 s):"; echo; cat "$OUT/syscalls.tsv"; } >> "$OUT/results.md"
fi
cat "$OUT/results.md"
echo "results in $OUT" >&2
