#!/usr/bin/env bash
# Response compression (issue 26): a 64 KiB JSON answer compressed by Sluice's gzip beside
# NGINX's `gzip on` at the same level, and Sluice's brotli beside its gzip.
#
#   bench/compression.sh [--rounds N] [--duration SECONDS] [--cases "gzip-1 gzip-6 br-1 ..."]
#
# Cases: plain (no compression: the proxying cost alone), gzip-1, gzip-6 (both proxies),
# br-1, br-4, br-5 (Sluice only: Debian's NGINX has no Brotli module). The origin (the built-in
# one) answers /<case>/json/65536 with the same 64 KiB JSON document; each proxy has one
# location or route per case. wrk -t1 -c16 with `Accept-Encoding: gzip` (or `br`).
#
# Layout as bench/run.sh: the proxy (one worker) pinned to CPU 0, the origin and wrk on CPU 1;
# rounds alternate which proxy runs first. Reported: median req/s, the proxy's CPU µs per
# request, the bytes of one compressed answer (curl), and Sluice's CPU over NGINX's. Traffic
# to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/compression.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=8
CASES="plain gzip-1 gzip-6 br-1 br-4 br-5"
CONNS=16
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --cases) CASES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out compression
ensure nginx:nginx wrk:wrk python3:python3 curl:curl
build_sluice
start_origin "$SLUICE"

cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
admin: {enabled: false}
upstreams:
  - {id: o, nodes: {"127.0.0.1:1980": 1}}
routes:
  - {uri: /plain/*, upstream_id: o}
  - {uri: /gzip-1/*, upstream_id: o, plugins: {gzip: {types: [application/json], comp_level: 1}}}
  - {uri: /gzip-6/*, upstream_id: o, plugins: {gzip: {types: [application/json], comp_level: 6}}}
  - {uri: /br-1/*, upstream_id: o, plugins: {brotli: {types: [application/json], comp_level: 1}}}
  - {uri: /br-4/*, upstream_id: o, plugins: {brotli: {types: [application/json], comp_level: 4}}}
  - {uri: /br-5/*, upstream_id: o, plugins: {brotli: {types: [application/json], comp_level: 5}}}
YAML
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  keepalive_requests 100000;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:1980; keepalive 64; }
$(nginx_proxy_headers)
  gzip_types application/json;
  gzip_min_length 20;
  server {
    listen 127.0.0.1:9090;
    location /plain/ { proxy_pass http://origin; }
    location /gzip-1/ { gzip on; gzip_comp_level 1; proxy_pass http://origin; }
    location /gzip-6/ { gzip on; gzip_comp_level 6; proxy_pass http://origin; }
  }
}
CONF

coding_of() { case "$1" in br-*) echo br ;; gzip-*) echo gzip ;; *) echo identity ;; esac; }
proxies_of() { case "$1" in br-*) echo sluice ;; *) echo sluice nginx ;; esac; }

wrk_case() {
  local proxy=$1 c=$2 secs=$3; shift 3
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${secs}s" -H "Accept-Encoding: $(coding_of "$c")" "$@" \
    "http://127.0.0.1:$(port_of "$proxy")/$c/json/65536"
}

: > "$OUT/results.tsv"
: > "$OUT/sizes.tsv"
for round in $(seq 1 "$ROUNDS"); do
  order=(sluice nginx)
  [ $((round % 2)) = 0 ] && order=(nginx sluice)
  for proxy in "${order[@]}"; do
    start_proxy "$proxy"
    pid=$STARTED
    for c in $CASES; do
      case " $(proxies_of "$c") " in *" $proxy "*) ;; *) continue ;; esac
      if [ "$round" = 1 ]; then
        # The answer as a client gets it: its bytes, and that it decodes to the document.
        size=$(curl -s -H "Accept-Encoding: $(coding_of "$c")" "http://127.0.0.1:$(port_of "$proxy")/$c/json/65536" | wc -c)
        got=$(curl -s --compressed "http://127.0.0.1:$(port_of "$proxy")/$c/json/65536" | wc -c)
        printf '%s\t%s\t%s\t%s\n' "$c" "$proxy" "$size" "$got" >> "$OUT/sizes.tsv"
      fi
      wrk_case "$proxy" "$c" 2 >/dev/null
      before=$(cpu_tree "$pid")
      wrk_case "$proxy" "$c" "$DURATION" --latency > "$OUT/wrk-$round-$c-$proxy.txt"
      after=$(cpu_tree "$pid")
      IFS=$'\t' read -r rps _ _ errors cpu < <(wrk_row "$OUT/wrk-$round-$c-$proxy.txt" "$((after - before))")
      printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$proxy" "$rps" "$cpu" "$errors" >> "$OUT/results.tsv"
      echo "round $round $c $proxy: $rps req/s, $cpu µs CPU/request, errors $errors" >&2
    done
    stop_proxy "$pid"
    sleep 0.5
  done
done

python3 - "$OUT/results.tsv" "$OUT/sizes.tsv" "$CASES" "$ROUNDS" "$DURATION" > "$OUT/results.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
sizes = {(r[0], r[1]): (int(r[2]), int(r[3])) for r in (l.split() for l in open(sys.argv[2]) if l.strip())}
cases = sys.argv[3].split()
def med(case, proxy):
    rs = [r for r in rows if r[1] == case and r[2] == proxy]
    if not rs:
        return None
    return (statistics.median(float(r[3]) for r in rs), statistics.median(float(r[4]) for r in rs),
            sum(int(r[5]) for r in rs))
print(f"{sys.argv[4]} rounds of {sys.argv[5]} s, medians; CPU = the proxy's µs per request; "
      "bytes = one answer as sent (decoded size in brackets)\n")
print("| case | Sluice req/s | CPU | bytes | NGINX req/s | CPU | bytes | Sluice/NGINX CPU | errors S/N |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for case in cases:
    s, n = med(case, "sluice"), med(case, "nginx")
    if not s:
        continue
    sb = sizes.get((case, "sluice"), (0, 0))
    line = f"| {case} | {s[0]:,.0f} | {s[1]:.1f} | {sb[0]:,} ({sb[1]:,}) "
    if n:
        nb = sizes.get((case, "nginx"), (0, 0))
        line += f"| {n[0]:,.0f} | {n[1]:.1f} | {nb[0]:,} ({nb[1]:,}) | {s[1] / n[1]:.2f} | {s[2]}/{n[2]} |"
    else:
        line += f"| - | - | - | - | {s[2]}/- |"
    print(line)
PY
cat "$OUT/results.md"
echo "results in $OUT" >&2
