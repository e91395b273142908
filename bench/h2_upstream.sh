#!/usr/bin/env bash
# HTTP/1.1 clients through Sluice to the same origin over HTTP/1.1 (pooled keep-alive) and over
# HTTP/2 (`http2: true`: one multiplexed connection per worker and node), in the same run.
#
#   bench/h2_upstream.sh [--rounds N] [--duration SECONDS] [--callgrind]
#
# --callgrind: then also user-space instructions per request of each path (callgrind, 5 s of
# wrk -c50 after 3 s of warm-up): the same count for the same build whatever else the machine
# does, where CPU time on a shared machine moves by 10% between runs.
#
# The origin is NGINX on CPU 1 answering `return 200` on an HTTP/1.1 port and an h2c port
# (NGINX cannot proxy to HTTP/2 itself, so there is no NGINX row); Sluice has one worker on
# CPU 0; wrk -t1 -c50 on CPU 1. Reported: req/s, p99, Sluice's CPU µs per request, medians over
# interleaved rounds, and the ratio HTTP/2 / HTTP/1.1. Traffic to 127.0.0.1 only; stops
# everything it started, also on Ctrl-C. Needs nginx and wrk.
set -euo pipefail
set -o errtrace
trap 'echo "bench/h2_upstream.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=10
CALLGRIND=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --callgrind) CALLGRIND=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out h2-upstream
ensure nginx:nginx wrk:wrk
build_sluice --bin sluice

cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  keepalive_requests 1000000;
  http2_max_requests 1000000;
  server { listen 127.0.0.1:1990; location / { return 200 "hello world"; } }
  server { listen 127.0.0.1:1991 http2; location / { return 200 "hello world"; } }
}
CONF
cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
admin: {enabled: false}
limits: {keepalive_requests: 1000000}
upstreams:
  - {id: h1, nodes: {"127.0.0.1:1990": 1}}
  - {id: h2, nodes: {"127.0.0.1:1991": 1}, http2: true}
routes:
  - {id: h1, uri: /h1, upstream_id: h1}
  - {id: h2, uri: /h2, upstream_id: h2}
YAML

taskset -c 1 nginx -c "$OUT/nginx.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 &
PIDS+=($!)
wait_port 1990; wait_port 1991
taskset -c 0 "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
MAIN=$!; PIDS+=("$MAIN")
wait_port 9080

RESULTS="$OUT/results.tsv"
echo -e "round\tupstream\trps\tp99_ms\terrors\tcpu_us_per_req" > "$RESULTS"
for round in $(seq 1 "$ROUNDS"); do
  for up in h1 h2; do
    taskset -c 1 wrk -t1 -c50 -d2s "http://127.0.0.1:9080/$up" >/dev/null
    before=$(cpu_tree "$MAIN")
    taskset -c 1 wrk -t1 -c50 -d"${DURATION}s" --latency "http://127.0.0.1:9080/$up" > "$OUT/wrk-$round-$up.txt"
    after=$(cpu_tree "$MAIN")
    IFS=$'\t' read -r rps _p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$round-$up.txt" "$((after - before))")
    echo -e "$round\t$up\t$rps\t$p99\t$errors\t$cpu" >> "$RESULTS"
    tail -1 "$RESULTS" >&2
  done
done
echo "upstream connections to the HTTP/2 port: $(ss -tn state established '( dport = :1991 )' | tail -n +2 | wc -l)" > "$OUT/conns.txt"

python3 - "$RESULTS" "$ROUNDS" "$DURATION" "$OUT/conns.txt" > "$OUT/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = statistics.median
print(f"{sys.argv[2]} interleaved rounds of {sys.argv[3]} s, wrk -t1 -c50, Sluice one worker; medians\n")
print("| upstream | req/s | p99 ms | errors | Sluice CPU µs/req |")
print("|---|---:|---:|---:|---:|")
agg = {}
for up in ("h1", "h2"):
    rs = [r for r in rows if r["upstream"] == up]
    agg[up] = {k: med([float(r[k]) for r in rs]) for k in ("rps", "p99_ms", "errors", "cpu_us_per_req")}
    a = agg[up]
    name = "HTTP/1.1 (pooled)" if up == "h1" else "HTTP/2 (`http2: true`)"
    print(f"| {name} | {a['rps']:.0f} | {a['p99_ms']:.2f} | {a['errors']:.0f} | {a['cpu_us_per_req']:.2f} |")
print(f"\nHTTP/2 / HTTP/1.1: req/s {agg['h2']['rps'] / agg['h1']['rps']:.2f}, "
      f"CPU/req {agg['h2']['cpu_us_per_req'] / agg['h1']['cpu_us_per_req']:.2f}; "
      + open(sys.argv[4]).read().strip())
PY
if [ -n "$CALLGRIND" ]; then
  ensure valgrind:valgrind
  kill "$MAIN"; wait "$MAIN" 2>/dev/null || true
  for up in h1 h2; do
    CG_PATH=/$up callgrind_per_request "$up" 9080 5 50 "$SLUICE" run -c "$OUT/sluice.yaml"
  done
  awk '{per[$1] = $2 / $3} END {
    printf "\ninstructions per request (callgrind): HTTP/1.1 %d, HTTP/2 %d, ratio %.2f\n", per["h1"], per["h2"], per["h2"] / per["h1"] }' \
    "$OUT/counts" >> "$OUT/summary.md"
fi
cat "$OUT/summary.md"
echo "raw results: $OUT"
