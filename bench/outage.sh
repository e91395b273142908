#!/usr/bin/env bash
# An outage: a route whose only node is down (nothing listens on 127.0.0.1:1), under wrk
# (10 connections). Every request fails the same way. Reported per proxy: req/s, CPU µs per
# request, and what the error log grew by, in bytes per 1,000 failed requests, over the
# warm-up and the measured run.
#
#   sluice-summary: Sluice as shipped (log.failure_summary: 10s: the first failure of a kind
#                   on a route and node is logged, then one line per 10 s with the count)
#   sluice-each:    log.failure_summary: 0 (every failure logged: how Sluice logged before)
#   nginx:          its error_log (at `warn`: each failure is an error, "connect() failed (111: ...)")
#
#   bench/outage.sh [--rounds N] [--duration S] [--callgrind]
#
# --callgrind also counts user-space instructions per failed request of each (valgrind; the
# same count for the same binary whatever else the machine does, unlike CPU time).
#
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail

ROUNDS=2
DURATION=5
CONNS=10
CALLGRIND=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --callgrind) CALLGRIND=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out outage
ensure nginx:nginx wrk:wrk
build_sluice

for every in 10s 0; do
  cat > "$OUT/sluice-$every.yaml" <<EOF
listen: 127.0.0.1:9080
workers: 1
admin: {enabled: false}
log: {failure_summary: $every}
routes:
  - {id: down, uri: /down, upstream: {nodes: {"127.0.0.1:1": 1}, retries: 0}}
EOF
done

cat > "$OUT/nginx.conf" <<EOF
$(nginx_head 1024)
master_process off;
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream down { server 127.0.0.1:1; }
$(nginx_proxy_headers)
  server {
    listen 127.0.0.1:9080;
    location = /down { proxy_pass http://down; }
  }
}
EOF

# round NAME LOG COMMAND...: the proxy on CPU 0, wrk on CPU 1; appends "round proxy req/s
# cpu-µs/request log-bytes-per-1000-requests log-lines" to $OUT/results.tsv.
round() {
  local name=$1 log=$2; shift 2
  : > "$log"
  taskset -c 0 "$@" >>"$OUT/$name.stdout" 2>>"$log" &
  local pid=$!
  PIDS+=("$pid")
  wait_port 9080
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:9080/down" > "$OUT/warm-$r-$name.txt"
  local before after rps cpu
  before=$(cpu_tree "$pid")
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:9080/down" > "$OUT/wrk-$r-$name.txt"
  after=$(cpu_tree "$pid")
  stop_proxy "$pid"
  IFS=$'\t' read -r rps _ _ _ cpu < <(wrk_row "$OUT/wrk-$r-$name.txt" "$((after - before))")
  local reqs bytes per lines
  reqs=$(( $(awk '/requests in/ {print $1}' "$OUT/warm-$r-$name.txt") + $(awk '/requests in/ {print $1}' "$OUT/wrk-$r-$name.txt") ))
  bytes=$(stat -c %s "$log")
  lines=$(wc -l < "$log")
  per=$(python3 -c "print(f'{$bytes * 1000 / $reqs:.1f}')")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$name" "$rps" "$cpu" "$per" "$lines" >> "$OUT/results.tsv"
  echo "round $r $name: $rps req/s, $cpu µs CPU/request, $per log bytes per 1,000 requests ($lines lines for $reqs requests)" >&2
  sleep 0.5
}

printf 'round\tproxy\treq/s\tcpu_us_per_request\tlog_bytes_per_1000\tlog_lines\n' > "$OUT/results.tsv"
for r in $(seq 1 "$ROUNDS"); do
  round sluice-summary "$OUT/sluice-summary.log" "$SLUICE" run -c "$OUT/sluice-10s.yaml"
  round sluice-each "$OUT/sluice-each.log" "$SLUICE" run -c "$OUT/sluice-0.yaml"
  round nginx "$OUT/nginx-error.log" nginx -c "$OUT/nginx.conf" -e "$OUT/nginx-error.log"
done
column -t -s $'\t' "$OUT/results.tsv"
if [ "$CALLGRIND" = 1 ]; then
  ensure valgrind:valgrind
  export CG_PATH=/down
  callgrind_per_request sluice-summary 9080 5 "$CONNS" "$SLUICE" run -c "$OUT/sluice-10s.yaml"
  callgrind_per_request sluice-each 9080 5 "$CONNS" "$SLUICE" run -c "$OUT/sluice-0.yaml"
  callgrind_per_request nginx 9080 5 "$CONNS" nginx -c "$OUT/nginx.conf" -e "$OUT/nginx-error.log"
  awk '{printf "%s: %d instructions per failed request\n", $1, $2 / $3}' "$OUT/counts"
fi
echo "results in $OUT" >&2
