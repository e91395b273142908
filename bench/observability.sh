#!/usr/bin/env bash
# What observability costs, scenario 1 (one route, /hello), against NGINX in the same run.
#
#   bench/observability.sh [--rounds N] [--duration SECONDS] [--skip-callgrind] [--skip-scrape]
#
# 1. Instructions per request (callgrind, repeatable): Sluice with metrics off, metrics on
#    (the default), metrics + access log (file, default format), tracing at ratio 1.0 and
#    0.01 (opentelemetry plugin, spans exported to a local OTLP sink); NGINX with access_log
#    off and on.
# 2. CPU per request (interleaved rounds, proxy pinned to CPU 0, wrk and the origin on CPU 1)
#    for the same variants.
# 3. A scrape with 5,000 routes' series: how long /metrics takes to render, and wrk's p99
#    with a scrape every second against without.
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail
set -o errtrace
trap 'echo "bench/observability.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=8
CONNS=50
CALLGRIND=1
SCRAPE=1
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --skip-callgrind) CALLGRIND=0; shift ;;
    --skip-scrape) SCRAPE=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out observability
ensure valgrind:valgrind nginx:nginx wrk:wrk python3:python3
NGINX=$(command -v nginx)
build_sluice

ORIGIN_PORT=1980
OTLP_PORT=4318
taskset -c 1 "$SLUICE" origin --listen 127.0.0.1:$ORIGIN_PORT >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port $ORIGIN_PORT
# An OTLP/HTTP sink: answers every export with 200 and counts the bytes.
python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        n = int(self.headers.get("content-length", 0)); self.rfile.read(n)
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
' $OTLP_PORT >"$OUT/otlp.log" 2>&1 &
PIDS+=($!)
wait_port $OTLP_PORT

# --- configurations ------------------------------------------------------------------------
sluice_conf() { # $1 name, $2 extra top-level YAML, $3 route plugins YAML (flow)
  cat > "$OUT/sluice-$1.yaml" <<EOF
listen: 127.0.0.1:9080
workers: 1
$2
routes:
  - uri: /hello
    upstream: {nodes: {"127.0.0.1:$ORIGIN_PORT": 1}, type: roundrobin}
    plugins: {$3}
EOF
}
sluice_conf metrics-off "log: {level: warn}
metrics: {enabled: false}" ""
sluice_conf metrics-on "log: {level: warn}" ""
sluice_conf access-log "log: {level: warn, access: {path: $OUT/sluice-access.log}}" ""
otel_attr="plugin_attr: {opentelemetry: {collector: {address: 127.0.0.1:$OTLP_PORT}}}"
sluice_conf trace-1 "log: {level: warn}
$otel_attr" "opentelemetry: {sampler: {name: always_on}}"
sluice_conf trace-0.01 "log: {level: warn}
$otel_attr" "opentelemetry: {sampler: {name: trace_id_ratio, options: {fraction: 0.01}}}"

nginx_conf() { # $1 name, $2 access_log line
  cat > "$OUT/nginx-$1.conf" <<EOF
$(nginx_head 1024)
http {
  $2
$(nginx_hello)
}
EOF
}
nginx_conf log-off "access_log off;"
nginx_conf log-on "access_log $OUT/nginx-access.log;"

SLUICE_VARIANTS=${SLUICE_VARIANTS:-"metrics-off metrics-on access-log trace-1 trace-0.01"}
NGINX_VARIANTS=${NGINX_VARIANTS:-"log-off log-on"}

# --- 1. instructions per request ---------------------------------------------------------------
if [ "$CALLGRIND" = 1 ]; then
  for v in $SLUICE_VARIANTS; do
    # callgrind_per_request wants a master_process-off NGINX; Sluice runs as it is.
    callgrind_per_request "sluice-$v" 9080 5 10 "$SLUICE" run -c "$OUT/sluice-$v.yaml"
  done
  for v in $NGINX_VARIANTS; do
    sed -i 's/^events/master_process off;\nevents/' "$OUT/nginx-$v.conf"
    callgrind_per_request "nginx-$v" 9090 5 10 "$NGINX" -c "$OUT/nginx-$v.conf" -p "$OUT"
    sed -i '/^master_process off;$/d' "$OUT/nginx-$v.conf"
  done
  awk '{printf "%s\t%d\n", $1, $2 / $3}' "$OUT/counts" > "$OUT/instructions.tsv"
fi

# --- 2. CPU per request --------------------------------------------------------------------
RESULTS="$OUT/results.tsv"
: > "$RESULTS"
run_one() { # $1 round, $2 proxy, $3 variant
  local main port
  if [ "$2" = sluice ]; then
    taskset -c 0 "$SLUICE" run -c "$OUT/sluice-$3.yaml" >"$OUT/sluice.log" 2>&1 &
    main=$!; port=9080
  else
    taskset -c 0 "$NGINX" -c "$OUT/nginx-$3.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 &
    main=$!; port=9090
  fi
  PIDS+=("$main")
  wait_port "$port"
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port/hello" >/dev/null
  local before after
  before=$(cpu_tree "$main")
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port/hello" > "$OUT/wrk-$1-$2-$3.txt"
  after=$(cpu_tree "$main")
  kill "$main"; wait "$main" 2>/dev/null || true
  local rps p50 p99 errors cpu
  IFS=$'\t' read -r rps p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$1-$2-$3.txt" "$((after - before))")
  echo -e "$1\t$2-$3\t$rps\t$p99\t$cpu" | tee -a "$RESULTS" >&2
}
for round in $(seq 1 "$ROUNDS"); do
  # Every other round in reverse order, so that no variant always follows the same one.
  order="$SLUICE_VARIANTS"
  [ $((round % 2)) = 0 ] && order=$(echo "$SLUICE_VARIANTS" | tr ' ' '\n' | tac | tr '\n' ' ')
  for v in $order; do run_one "$round" sluice "$v"; done
  for v in $NGINX_VARIANTS; do run_one "$round" nginx "$v"; done
done

# --- 3. a scrape with 5,000 routes' series -------------------------------------------------------
if [ "$SCRAPE" = 1 ]; then
  {
    echo "listen: 127.0.0.1:9080"
    echo "workers: 1"
    echo "log: {level: warn}"
    echo "status: {listen: 127.0.0.1:9091}"
    echo "metrics: {max_label_values: 10000}"
    echo "upstreams: [{id: o, nodes: {\"127.0.0.1:$ORIGIN_PORT\": 1}}]"
    echo "routes:"
    for i in $(seq 1 5000); do echo "  - {id: r$i, uri: /hello$i, upstream_id: o}"; done
  } > "$OUT/sluice-5000.yaml"
  taskset -c 0 "$SLUICE" run -c "$OUT/sluice-5000.yaml" >"$OUT/sluice-5000.log" 2>&1 &
  main=$!; PIDS+=("$main")
  wait_port 9080
  wait_port 9091
  # One request per route, so that every route has its series.
  python3 - <<'EOF'
import http.client
c = http.client.HTTPConnection("127.0.0.1", 9080)
for i in range(1, 5001):
    c.request("GET", f"/hello{i}")
    c.getresponse().read()
EOF
  for i in 1 2 3 4 5; do
    curl -s -o "$OUT/metrics.txt" -w "%{time_total}\n" http://127.0.0.1:9091/metrics >> "$OUT/scrape-times.txt"
  done
  series=$(grep -vc '^#' "$OUT/metrics.txt")
  bytes=$(wc -c < "$OUT/metrics.txt")
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency http://127.0.0.1:9080/hello1 > "$OUT/wrk-noscrape.txt"
  ( end=$((SECONDS + DURATION)); while [ $SECONDS -lt $end ]; do curl -s -o /dev/null http://127.0.0.1:9091/metrics; sleep 1; done ) &
  scraper=$!
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency http://127.0.0.1:9080/hello1 > "$OUT/wrk-scrape.txt"
  wait $scraper || true
  kill "$main"; wait "$main" 2>/dev/null || true
  IFS=$'\t' read -r _ _ p99_no _ _ < <(wrk_row "$OUT/wrk-noscrape.txt" 0)
  IFS=$'\t' read -r _ _ p99_sc _ _ < <(wrk_row "$OUT/wrk-scrape.txt" 0)
  {
    echo "scrape with 5,000 routes: $series samples, $bytes bytes"
    echo "render time (s, 5 scrapes): $(tr '\n' ' ' < "$OUT/scrape-times.txt")"
    echo "p99 without scrapes: $p99_no ms; with a scrape every second: $p99_sc ms"
  } | tee "$OUT/scrape.txt"
fi

# --- summary -----------------------------------------------------------------------------
python3 - "$OUT" <<'EOF'
import collections, statistics, sys, os
out = sys.argv[1]
rows = collections.defaultdict(list)
for line in open(f"{out}/results.tsv"):
    r, name, rps, p99, cpu = line.split("\t")
    rows[name].append((float(rps), float(p99), float(cpu)))
instr = {}
if os.path.exists(f"{out}/instructions.tsv"):
    for line in open(f"{out}/instructions.tsv"):
        n, v = line.split("\t"); instr[n] = int(v)
med = {n: [statistics.median(x[i] for x in v) for i in range(3)] for n, v in rows.items()}
for n in instr:
    med.setdefault(n, [0.0, 0.0, 0.0])
base_cpu = med.get("nginx-log-off", [0, 0, 0])[2] or 1.0
print("| variant | req/s | p99 ms | CPU µs/request | vs NGINX (no log) | instructions/request |")
print("|---|---:|---:|---:|---:|---:|")
for n, (rps, p99, cpu) in med.items():
    ins = instr.get(n, 0)
    print(f"| {n} | {rps:,.0f} | {p99:.2f} | {cpu:.2f} | {cpu / base_cpu:.2f}x | {ins:,} |")
EOF
echo "results in $OUT" >&2
