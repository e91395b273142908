#!/usr/bin/env bash
# proxy-cache hits (issue 26): Sluice's memory and disk zones beside NGINX's `proxy_cache`,
# and beside forwarding the same answer to the local origin (a hit must cost less).
#
#   bench/proxy_cache.sh [--rounds N] [--duration SECONDS] [--size BYTES]
#
# Cases: fwd (no cache: every request goes to the origin), mem (Sluice: a memory zone;
# NGINX: proxy_cache_path on tmpfs, /dev/shm, its nearest to a memory cache), disk (both: a
# cache directory under the bench's output, on disk). Every case asks one URL, so after the
# first request every cached case is a hit (checked with curl before measuring: Sluice's
# Apisix-Cache-Status, NGINX's $upstream_cache_status). The built-in origin answers
# /<case>/json/<size> with a JSON document of <size> bytes (4096 by default).
#
# Layout as bench/run.sh: the proxy (one worker) pinned to CPU 0, the origin and wrk on CPU 1;
# rounds alternate which proxy runs first. Reported: median req/s, the proxy's CPU µs per
# request, and Sluice's CPU over NGINX's. Traffic to 127.0.0.1 only; stops everything it
# started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/proxy_cache.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=8
SIZE=4096
CONNS=16
CASES="fwd mem disk"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --size) SIZE=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out proxy_cache
ensure nginx:nginx wrk:wrk python3:python3 curl:curl
build_sluice
start_origin "$SLUICE"
SHM=$(mktemp -d /dev/shm/sluice-bench-cache.XXXXXX)
trap 'bench_cleanup; rm -rf "$SHM"' EXIT INT TERM
mkdir -p "$OUT/sluice-disk" "$OUT/nginx-disk" "$OUT/nginx-tmp"

cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
admin: {enabled: false}
plugin_attr:
  proxy-cache:
    cache_ttl: 600
    zones:
      - {name: mem, memory_size: 64m}
      - {name: disk, memory_size: 8m, disk_size: 256m, disk_path: "$OUT/sluice-disk", cache_levels: "1:2"}
upstreams:
  - {id: o, nodes: {"127.0.0.1:1980": 1}}
routes:
  - {uri: /fwd/*, upstream_id: o}
  - {uri: /mem/*, upstream_id: o, plugins: {proxy-cache: {cache_strategy: memory, cache_zone: mem, cache_ttl: 600}}}
  - {uri: /disk/*, upstream_id: o, plugins: {proxy-cache: {cache_strategy: disk, cache_zone: disk}}}
YAML
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  keepalive_requests 100000;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  proxy_cache_path $SHM levels=1:2 keys_zone=mem:64m max_size=256m inactive=1d use_temp_path=off;
  proxy_cache_path $OUT/nginx-disk levels=1:2 keys_zone=disk:8m max_size=256m inactive=1d use_temp_path=off;
  upstream origin { server 127.0.0.1:1980; keepalive 64; }
$(nginx_proxy_headers)
  proxy_cache_key \$scheme\$host\$request_uri;
  proxy_cache_valid 200 10m;
  server {
    listen 127.0.0.1:9090;
    location /fwd/ { proxy_pass http://origin; }
    location /mem/ { proxy_cache mem; add_header X-Cache \$upstream_cache_status; proxy_pass http://origin; }
    location /disk/ { proxy_cache disk; add_header X-Cache \$upstream_cache_status; proxy_pass http://origin; }
  }
}
CONF

url() { echo "http://127.0.0.1:$(port_of "$1")/$2/json/$SIZE"; }

: > "$OUT/results.tsv"
for round in $(seq 1 "$ROUNDS"); do
  order=(sluice nginx)
  [ $((round % 2)) = 0 ] && order=(nginx sluice)
  for proxy in "${order[@]}"; do
    start_proxy "$proxy"
    pid=$STARTED
    for c in $CASES; do
      if [ "$c" != fwd ]; then
        # Filled, then a hit (the second request's status, as each proxy reports it).
        curl -s -o /dev/null "$(url "$proxy" "$c")"
        status=$(curl -s -D - -o /dev/null "$(url "$proxy" "$c")" | tr -d '\r' \
          | awk -F': ' 'tolower($1)=="apisix-cache-status" || tolower($1)=="x-cache" {print $2}')
        if [ "$status" != HIT ]; then
          echo "$proxy $c: the second request was not a hit (\"$status\")" >&2
          exit 1
        fi
      fi
      taskset -c 1 wrk -t1 -c"$CONNS" -d2s "$(url "$proxy" "$c")" >/dev/null
      before=$(cpu_tree "$pid")
      taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "$(url "$proxy" "$c")" > "$OUT/wrk-$round-$c-$proxy.txt"
      after=$(cpu_tree "$pid")
      IFS=$'\t' read -r rps _ _ errors cpu < <(wrk_row "$OUT/wrk-$round-$c-$proxy.txt" "$((after - before))")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$proxy" "$rps" "$cpu" "$errors" >> "$OUT/results.tsv"
      echo "round $round $c $proxy: $rps req/s, $cpu µs CPU/request, errors $errors" >&2
    done
    stop_proxy "$pid"
    sleep 0.5
  done
done

python3 - "$OUT/results.tsv" "$CASES" "$ROUNDS" "$DURATION" "$SIZE" > "$OUT/results.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
cases = sys.argv[2].split()
def med(case, proxy):
    rs = [r for r in rows if r[1] == case and r[2] == proxy]
    return (statistics.median(float(r[3]) for r in rs), statistics.median(float(r[4]) for r in rs),
            sum(int(r[5]) for r in rs))
print(f"{sys.argv[3]} rounds of {sys.argv[4]} s, {sys.argv[5]}-byte answers, medians; "
      "CPU = the proxy's µs per request\n")
print("| case | Sluice req/s | CPU | NGINX req/s | CPU | Sluice/NGINX CPU | hit/forward CPU (Sluice, NGINX) | errors S/N |")
print("|---|---:|---:|---:|---:|---:|---:|---|")
fs, fn = med("fwd", "sluice"), med("fwd", "nginx")
for case in cases:
    s, n = med(case, "sluice"), med(case, "nginx")
    rel = "-" if case == "fwd" else f"{s[1] / fs[1]:.2f}, {n[1] / fn[1]:.2f}"
    print(f"| {case} | {s[0]:,.0f} | {s[1]:.1f} | {n[0]:,.0f} | {n[1]:.1f} | {s[1] / n[1]:.2f} | {rel} | {s[2]}/{n[2]} |")
PY
cat "$OUT/results.md"
echo "results in $OUT" >&2
