#!/usr/bin/env bash
# Scenario 1 (GET /hello, 10 keep-alive connections) over two nodes with each balancer, and
# with active health checks on, beside NGINX round-robin over the same two nodes:
#   - user-space instructions per request, counted by callgrind (exact, repeatable);
#   - CPU time per request and req/s under wrk (noisy on a shared machine: read the ratios).
#
#   bench/balancers.sh [--seconds S] [--rounds N]
#
# One worker each, pinned nowhere (2 cores: wrk and the proxy share them). Traffic to
# 127.0.0.1 only; stops everything it started.
set -euo pipefail

SECONDS_=5
ROUNDS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECONDS_=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out balancers
ensure valgrind:valgrind nginx:nginx wrk:wrk
build_sluice

for p in 1980 1981; do
  "$SLUICE" origin --listen 127.0.0.1:$p >"$OUT/origin-$p.log" 2>&1 &
  PIDS+=($!)
  wait_port $p
done

two='nodes: {"127.0.0.1:1980": 1, "127.0.0.1:1981": 1}'
checks='checks: {active: {http_path: /hello, healthy: {interval: 1}, unhealthy: {interval: 1}}}'
variants=(
  "rr-one-node|type: roundrobin, nodes: {\"127.0.0.1:1980\": 1}"
  "roundrobin|type: roundrobin, $two"
  "roundrobin+checks|type: roundrobin, $two, $checks"
  "least_conn|type: least_conn, $two"
  "ewma|type: ewma, $two"
  "chash|type: chash, key: remote_addr, $two"
)

for v in "${variants[@]}"; do
  name=${v%%|*}
  cat > "$OUT/$name.yaml" <<EOF
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
routes:
  - uri: /hello
    upstream: {${v#*|}}
EOF
done

cat > "$OUT/nginx.conf" <<EOF
$(nginx_head 1024)
master_process off;
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:1980; server 127.0.0.1:1981; keepalive 320; }
$(nginx_proxy_headers)
  server {
    listen 127.0.0.1:9080;
    location = /hello { proxy_pass http://origin; }
  }
}
EOF

# cpu NAME ROUND COMMAND...: req/s and CPU µs per request under wrk.
cpu() {
  local name=$1 round=$2; shift 2
  "$@" >"$OUT/$name.$round.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port 9080
  wrk -t1 -c10 -d1s http://127.0.0.1:9080/hello >/dev/null
  local t0 t1
  t0=$(cpu_tree "$pid")
  wrk -t1 -c10 -d"${SECONDS_}s" --latency http://127.0.0.1:9080/hello > "$OUT/$name.$round.wrk"
  t1=$(cpu_tree "$pid")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  printf '%s\t%s\n' "$name" "$(wrk_row "$OUT/$name.$round.wrk" $((t1 - t0)))" >> "$OUT/cpu"
}

for v in "${variants[@]}"; do
  name=${v%%|*}
  callgrind_per_request "$name" 9080 "$SECONDS_" 10 "$SLUICE" run -c "$OUT/$name.yaml"
done
callgrind_per_request nginx 9080 "$SECONDS_" 10 "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"

for round in $(seq 1 "$ROUNDS"); do
  for v in "${variants[@]}"; do
    name=${v%%|*}
    cpu "$name" "$round" "$SLUICE" run -c "$OUT/$name.yaml"
  done
  cpu nginx "$round" "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"
done

python3 - "$OUT" <<'EOF' | tee "$OUT/results.md"
import sys, statistics
out = sys.argv[1]
ins = {n: int(i) // int(r) for n, i, r in (l.split() for l in open(f"{out}/counts"))}
cpu = {}
for l in open(f"{out}/cpu"):
    name, rps, p50, p99, errors, us = l.rstrip("\n").split("\t")
    cpu.setdefault(name, []).append((float(rps), float(us)))
base_i = int(ins["roundrobin"])
base_c = statistics.median(u for _, u in cpu["roundrobin"])
nginx_c = statistics.median(u for _, u in cpu["nginx"])
print("| two nodes | instructions/request | vs roundrobin | CPU µs/request (median) | vs roundrobin | vs NGINX | req/s (median) |")
print("|---|---:|---:|---:|---:|---:|---:|")
for name in list(ins):
    c = statistics.median(u for _, u in cpu[name])
    r = statistics.median(r for r, _ in cpu[name])
    print(f"| {name} | {int(ins[name])} | {int(ins[name]) / base_i:.3f} | {c:.1f} | {c / base_c:.2f} | {c / nginx_c:.2f} | {r:.0f} |")
EOF
