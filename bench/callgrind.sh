#!/usr/bin/env bash
# User-space instructions per proxied request, Sluice vs NGINX, counted by callgrind: the same
# count for the same binary and inputs whatever else the machine does (unlike timings).
#
#   bench/callgrind.sh [--requests-seconds S] [--connections C] [--scenario 1|5]
#
# Each proxy runs under `valgrind --tool=callgrind` with instrumentation off; after a warm-up,
# it is switched on for a wrk run of S seconds, then off. Instructions counted are
# divided by the requests wrk completed. Scenario 1 of bench/run.sh (one route, /hello); with
# --scenario 5, its scenario 5 (real-ip, hmac-auth and request-validation on the route; NGINX
# with its realip module and the header check).
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail

SECONDS_=5
SCENARIO=1
CONNS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --requests-seconds) SECONDS_=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --scenario) SCENARIO=$2; shift 2 ;;
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

if [ "$SCENARIO" = 5 ]; then
  { printf 'listen: 127.0.0.1:9080\nworkers: 1\nlog: {level: warn}\n'; plugins5_routes 1980; } > "$OUT/sluice.yaml"
  cat > "$OUT/nginx.conf" <<EOF
$(nginx_head 1024)
master_process off;
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:1980; keepalive 1024; }
$(nginx_proxy_headers)
  server {
    listen 127.0.0.1:9090;
    set_real_ip_from 127.0.0.1; real_ip_header X-Real-IP;
    location = /hello { if (\$http_x_api_version !~ "^v[0-9]+\$") { return 400; } proxy_pass http://origin; }
  }
}
EOF
  plugins5_headers
  CG_WRK=("${H5[@]}")
else
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
$(nginx_hello)
}
EOF
fi
mkdir -p "$OUT/nginx-tmp"

callgrind_per_request sluice 9080 "$SECONDS_" "$CONNS" "$SLUICE" run -c "$OUT/sluice.yaml"
callgrind_per_request nginx 9090 "$SECONDS_" "$CONNS" "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"

awk '{per[$1] = $2 / $3} END {
  printf "| proxy | user-space instructions per request |\n|---|---:|\n";
  printf "| sluice | %d |\n| nginx | %d |\n| ratio | %.2f |\n", per["sluice"], per["nginx"], per["sluice"] / per["nginx"] }' "$OUT/counts" | tee "$OUT/results.md"
