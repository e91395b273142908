#!/usr/bin/env bash
# User-space instructions per proxied request, Sluice vs NGINX, counted by callgrind: the same
# count for the same binary and inputs whatever else the machine does (unlike timings).
#
#   bench/callgrind.sh [--requests-seconds S] [--connections C]
#
# Each proxy runs under `valgrind --tool=callgrind` with instrumentation off; after a warm-up,
# it is switched on for a wrk run of S seconds, then off. Instructions counted are
# divided by the requests wrk completed. Scenario 1 of bench/run.sh (one route, /hello).
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail

SECONDS_=5
CONNS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --requests-seconds) SECONDS_=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out callgrind
ensure valgrind:valgrind nginx:nginx wrk:wrk
build_sluice

"$SLUICE" origin --listen 127.0.0.1:1980 >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port 1980

cat > "$OUT/sluice.yaml" <<EOF
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
routes:
  - uri: /hello
    upstream: {nodes: {"127.0.0.1:1980": 1}, type: roundrobin}
EOF
cat > "$OUT/nginx.conf" <<EOF
$(nginx_head 1024)
master_process off;
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:1980; keepalive 320; }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host \$http_host;
  proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
  proxy_set_header X-Real-IP \$remote_addr;
  proxy_set_header X-Forwarded-Proto \$scheme;
  proxy_set_header X-Forwarded-Host \$http_host;
  server {
    listen 127.0.0.1:9090;
    location = /hello { proxy_pass http://origin; }
  }
}
EOF

measure() { # $1 name, $2 port, rest: command
  local name=$1 port=$2; shift 2
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$name.callgrind" "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port" 1200 # valgrind starts slowly
  wrk -t1 -c"$CONNS" -d3s "http://127.0.0.1:$port/hello" >/dev/null
  callgrind_control -i on "$pid" >/dev/null
  wrk -t1 -c"$CONNS" -d"${SECONDS_}s" "http://127.0.0.1:$port/hello" > "$OUT/$name.wrk"
  callgrind_control -i off "$pid" >/dev/null
  callgrind_control -d "$pid" >/dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local reqs ir
  reqs=$(awk '/requests in/ {print $1}' "$OUT/$name.wrk")
  ir=$(cat "$OUT/$name".callgrind* | awk '/^totals:/ {s += $2} END {print s}')
  echo "$name $ir $reqs" >> "$OUT/counts"
  echo "$name: $ir instructions / $reqs requests = $((ir / reqs)) per request" >&2
}

measure sluice 9080 "$SLUICE" run -c "$OUT/sluice.yaml"
measure nginx 9090 "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"

awk '{per[$1] = $2 / $3} END {
  printf "| proxy | user-space instructions per request |\n|---|---:|\n";
  printf "| sluice | %d |\n| nginx | %d |\n| ratio | %.2f |\n", per["sluice"], per["nginx"], per["sluice"] / per["nginx"] }' "$OUT/counts" | tee "$OUT/results.md"
