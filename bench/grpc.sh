#!/usr/bin/env bash
# gRPC unary calls through the gateway, beside NGINX (`grpc_pass`) in the same run.
#
#   bench/grpc.sh [--rounds N] [--duration SECONDS] [--baseline BINARY] [--callgrind]
#
# The origin is bench/grpc-origin (Go, google.golang.org/grpc: one method, /bench.Echo/Say,
# answering each call with the message it was sent), built here with `go build` (its modules
# come from the Go module proxy). The client is h2load sending gRPC-framed 11-byte messages
# (`content-type: application/grpc`, `te: trailers`), `-c16 -m10`, over cleartext HTTP/2 to the
# proxy, which calls the origin over HTTP/2: Sluice's route to a `scheme: grpc` upstream, NGINX's
# `grpc_pass` with upstream keep-alive. Each proxy: one worker on CPU 0; origin and h2load on
# CPU 1. Reported: calls/s and CPU µs per call (the proxy's process), medians of interleaved
# rounds, ratios to NGINX; with --baseline, another Sluice build measured in the same rounds and
# this build's CPU per call relative to it. --callgrind: also user-space instructions per call
# (callgrind, 20,000 calls after 2,000) for each Sluice build.
# Traffic to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/grpc.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=8
BASELINE=
CALLGRIND=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --baseline) BASELINE=$(realpath "$2"); shift 2 ;;
    --callgrind) CALLGRIND=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out grpc
ensure nginx:nginx h2load:nghttp2-client go:golang-go curl:curl
[ "$CALLGRIND" = 1 ] && ensure valgrind:valgrind
NGINX=$(command -v nginx)
build_sluice --bin sluice
ORIGIN_PORT=50051
SLUICE_PORT=9445
NGINX_PORT=9446

(cd "$ROOT/bench/grpc-origin" && go build -o "$OUT/grpc-origin" .)
printf '\x00\x00\x00\x00\x0bhello world' > "$OUT/message"

cat > "$OUT/sluice.yaml" <<YAML
listen:
  - {addr: 127.0.0.1:$SLUICE_PORT, http2: true}
workers: 1
log: {level: warn}
admin: {enabled: false}
limits: {keepalive_requests: 1000000}
upstreams:
  - {id: echo, scheme: grpc, nodes: {"127.0.0.1:$ORIGIN_PORT": 1}}
routes:
  - {id: echo, uri: /bench.Echo/*, upstream_id: echo}
YAML

cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  upstream echo { server 127.0.0.1:$ORIGIN_PORT; keepalive 320; }
  server {
    listen 127.0.0.1:$NGINX_PORT http2;
    keepalive_requests 1000000;
    location /bench.Echo/ { grpc_pass grpc://echo; }
  }
}
CONF

taskset -c 1 "$OUT/grpc-origin" --listen 127.0.0.1:$ORIGIN_PORT >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port $ORIGIN_PORT

calls() { # $1 port, $2 h2load -n or -D args...: gRPC calls with h2load
  local port=$1; shift
  taskset -c 1 h2load -t1 -c16 -m10 "$@" -d "$OUT/message" \
    -H 'content-type: application/grpc' -H 'te: trailers' \
    "http://127.0.0.1:$port/bench.Echo/Say"
}

start_proxy() { # $1 proxy; sets MAIN, PORT
  case "$1" in
    sluice|base)
      local bin=$SLUICE
      [ "$1" = base ] && bin=$BASELINE
      taskset -c 0 "$bin" run -c "$OUT/sluice.yaml" >"$OUT/$1.log" 2>&1 &
      MAIN=$!; PORT=$SLUICE_PORT ;;
    nginx)
      taskset -c 0 "$NGINX" -c "$OUT/nginx.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 &
      MAIN=$!; PORT=$NGINX_PORT ;;
  esac
  PIDS+=("$MAIN")
  wait_port "$PORT"
}

RESULTS="$OUT/results.tsv"
echo -e "round\tproxy\tcalls_per_s\tfailed\tcpu_us_per_call" > "$RESULTS"
PROXIES="sluice${BASELINE:+ base} nginx"
for round in $(seq 1 "$ROUNDS"); do
  for proxy in $PROXIES; do
    start_proxy "$proxy"
    # h2load counts HTTP statuses only: one call checked for its gRPC status and answer.
    if [ "$round" = 1 ]; then
      got=$(curl -sS --http2-prior-knowledge -H 'content-type: application/grpc' \
        -H 'te: trailers' --data-binary @"$OUT/message" -D "$OUT/check-$proxy.head" \
        "http://127.0.0.1:$PORT/bench.Echo/Say" | od -An -c | tr -d ' \n')
      grep -qi '^grpc-status: 0' "$OUT/check-$proxy.head" \
        || { echo "$proxy: no grpc-status 0" >&2; cat "$OUT/check-$proxy.head" >&2; exit 1; }
      [ "$got" = '\0\0\0\0\vhelloworld' ] || { echo "$proxy: answer $got" >&2; exit 1; }
    fi
    calls "$PORT" -D 2 >/dev/null
    before=$(cpu_tree "$MAIN")
    calls "$PORT" -D "$DURATION" > "$OUT/h2load-$round-$proxy.txt"
    after=$(cpu_tree "$MAIN")
    kill "$MAIN"; wait "$MAIN" 2>/dev/null || true
    python3 - "$OUT/h2load-$round-$proxy.txt" "$((after - before))" "$HZ" "$round" "$proxy" >> "$RESULTS" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
secs = float(re.search(r"finished in ([\d.]+)s", t).group(1))
ok = int(re.search(r"(\d+) succeeded", t).group(1))
failed = int(re.search(r"(\d+) failed", t).group(1))
non2xx = sum(int(n) for n in re.findall(r"(\d+) [345]xx", t))
cpu_us = int(sys.argv[2]) * 1e6 / int(sys.argv[3]) / max(ok, 1)
print(f"{sys.argv[4]}\t{sys.argv[5]}\t{ok / secs:.0f}\t{failed + non2xx}\t{cpu_us:.2f}")
PY
    tail -1 "$RESULTS" >&2
  done
done

if [ "$CALLGRIND" = 1 ]; then
  for proxy in sluice${BASELINE:+ base}; do
    bin=$SLUICE
    [ "$proxy" = base ] && bin=$BASELINE
    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$proxy.callgrind" \
      "$bin" run -c "$OUT/sluice.yaml" >"$OUT/$proxy-callgrind.log" 2>&1 &
    pid=$!; PIDS+=("$pid")
    wait_port $SLUICE_PORT 6000
    calls $SLUICE_PORT -n 2000 >/dev/null
    callgrind_control -i on "$pid" >/dev/null
    calls $SLUICE_PORT -n 20000 > "$OUT/$proxy.h2load"
    callgrind_control -i off "$pid" >/dev/null
    callgrind_control -d "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
    ir=$(cat "$OUT/$proxy".callgrind* | awk '/^totals:/ {s += $2} END {print s}')
    n=$(awk '/^requests:/ {print $8}' "$OUT/$proxy.h2load")
    echo -e "$proxy\t$((ir / n))" >> "$OUT/instructions.tsv"
  done
fi

python3 - "$RESULTS" "$ROUNDS" "$DURATION" "$OUT/instructions.tsv" > "$OUT/summary.md" <<'PY'
import csv, os, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = statistics.median
print(f"{sys.argv[2]} interleaved rounds of {sys.argv[3]} s, h2load -c16 -m10, gRPC unary calls; medians\n")
print("| proxy | calls/s | failed | CPU µs/call | calls/s ratio | CPU/call ratio |")
print("|---|---:|---:|---:|---:|---:|")
agg = {}
for p in dict.fromkeys(r["proxy"] for r in rows):
    rs = [r for r in rows if r["proxy"] == p]
    agg[p] = {k: med([float(r[k]) for r in rs]) for k in ("calls_per_s", "failed", "cpu_us_per_call")}
for p, a in agg.items():
    ratio = " | "
    if p != "nginx":
        n = agg["nginx"]
        ratio = f"{a['calls_per_s'] / n['calls_per_s']:.2f} | {a['cpu_us_per_call'] / n['cpu_us_per_call']:.2f}"
        if p == "sluice" and "base" in agg:
            ratio += f" ({a['cpu_us_per_call'] / agg['base']['cpu_us_per_call']:.2f}x base)"
    print(f"| {p} | {a['calls_per_s']:.0f} | {a['failed']:.0f} | {a['cpu_us_per_call']:.2f} | {ratio} |")
if os.path.exists(sys.argv[4]):
    print("\ninstructions per call (callgrind): " + ", ".join(
        f"{l.split()[0]} {int(l.split()[1]):,}" for l in open(sys.argv[4])))
PY
cat "$OUT/summary.md"
echo "raw results: $OUT"
