#!/usr/bin/env bash
# A logger on every request never slows it (issue 26): the same load on a route without a
# logger, with http-logger sending to a healthy log server, and with its log server stalled
# (it accepts connections and never answers) for the whole run.
#
#   bench/logger_stall.sh [--duration SECONDS] [--rounds N]
#
# Reported per case: median req/s, p50 and p99 (wrk -t1 -c50), the proxy's CPU µs per request,
# and, from the gateway's metrics after the stalled run, the entries sent, dropped (the queue
# was full) and waiting: dropped must be the entries beyond `max_pending_entries` (8192 per
# worker) that the stalled server never took. One worker on CPU 0; the origin, the log server
# and wrk on CPU 1. Traffic to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/logger_stall.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

DURATION=10
ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out logger-stall
ensure wrk:wrk python3:python3 curl:curl
build_sluice
start_origin "$SLUICE"

# log_server MODE: a log server on 127.0.0.1:1990 on CPU 1: `ok` answers every batch 200,
# `stall` accepts connections and never reads or answers them.
log_server() {
  taskset -c 1 python3 - "$1" <<'PY' &
import socket, sys, threading
mode = sys.argv[1]
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 1990)); s.listen(4096); held = []
def serve(c):
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        head, buf = buf.split(b"\r\n\r\n", 1)
        n = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                n = int(line.split(b":")[1])
        while len(buf) < n:
            d = c.recv(65536)
            if not d:
                return
            buf += d
        buf = buf[n:]
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
while True:
    c, _ = s.accept()
    if mode == "stall":
        held.append(c)
    else:
        threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
  LOG_PID=$!
  PIDS+=("$LOG_PID")
  wait_port 1990
}

cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: error}
admin: {enabled: false}
status: {listen: 127.0.0.1:9091}
upstreams:
  - {id: o, nodes: {"127.0.0.1:1980": 1}}
routes:
  - {uri: /plain, upstream_id: o, plugins: {proxy-rewrite: {uri: /hello}}}
  - uri: /logged
    upstream_id: o
    plugins:
      proxy-rewrite: {uri: /hello}
      http-logger: {uri: "http://127.0.0.1:1990/logs", name: bench, timeout: 30, batch_max_size: 1000, inactive_timeout: 1}
YAML

: > "$OUT/results.tsv"
: > "$OUT/metrics.txt"
for round in $(seq 1 "$ROUNDS"); do
  for c in plain logged stalled; do
    case "$c" in plain|logged) log_server ok ;; stalled) log_server stall ;; esac
    taskset -c 0 "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice-$round-$c.log" 2>&1 &
    pid=$!
    PIDS+=("$pid")
    wait_port 9080
    path=/plain; [ "$c" != plain ] && path=/logged
    taskset -c 1 wrk -t1 -c50 -d2s "http://127.0.0.1:9080$path" >/dev/null
    before=$(cpu_tree "$pid")
    taskset -c 1 wrk -t1 -c50 -d"${DURATION}s" --latency "http://127.0.0.1:9080$path" > "$OUT/wrk-$round-$c.txt"
    after=$(cpu_tree "$pid")
    IFS=$'\t' read -r rps p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$round-$c.txt" "$((after - before))")
    sleep 1.5
    metrics=$(curl -s http://127.0.0.1:9091/metrics | grep '^sluice_logger' || true)
    { echo "# round $round $c"; echo "$metrics"; } >> "$OUT/metrics.txt"
    num() { echo "$metrics" | awk -v k="$1" 'index($0, k) == 1 {print $2}' | head -1; }
    sent=$(num 'sluice_logger_entries_total{plugin="http-logger",name="bench",result="sent"}')
    dropped=$(num 'sluice_logger_entries_total{plugin="http-logger",name="bench",result="dropped"}')
    queued=$(num 'sluice_logger_queue_entries{plugin="http-logger",name="bench"}')
    total=$(awk '/requests in/ {print $1}' "$OUT/wrk-$round-$c.txt")
    printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$c" "$rps" "$p50" "$p99" "$cpu" "$errors" \
      "${sent:-0}" "${dropped:-0}" "${queued:-0}" >> "$OUT/results.tsv"
    echo "round $round $c: $rps req/s, p99 $p99 ms, $cpu µs CPU/request; sent ${sent:-0}, dropped ${dropped:-0}, waiting ${queued:-0} (of $total measured + warm-up)" >&2
    stop_proxy "$pid"
    kill "$LOG_PID" 2>/dev/null || true
    wait "$LOG_PID" 2>/dev/null || true
    sleep 0.5
  done
done

python3 - "$OUT/results.tsv" "$ROUNDS" "$DURATION" > "$OUT/results.md" <<'PY'
import statistics, sys
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1]) if l.strip()]
print(f"{sys.argv[2]} rounds of {sys.argv[3]} s (after a 2 s warm-up), medians; CPU = the proxy's µs per request; "
      "entries over warm-up and run, from the last round\n")
print("| case | req/s | p50 ms | p99 ms | CPU µs/req | errors | sent | dropped | waiting |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for case in ("plain", "logged", "stalled"):
    rs = [r for r in rows if r[1] == case]
    if not rs:
        continue
    m = lambda i: statistics.median(float(r[i]) for r in rs)
    last = rs[-1]
    print(f"| {case} | {m(2):,.0f} | {m(3):.2f} | {m(4):.2f} | {m(5):.1f} | {sum(int(r[6]) for r in rs)} "
          f"| {int(float(last[7])):,} | {int(float(last[8])):,} | {int(float(last[9])):,} |")
PY
cat "$OUT/results.md"
echo "results in $OUT" >&2
