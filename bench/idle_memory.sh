#!/usr/bin/env bash
# Memory per idle keep-alive connection (HTTP/1.1), Sluice beside NGINX and HAProxy, one worker
# each: resident memory before and after N connections that each made one request and stay
# open (issue 12's first figure).
#
#   bench/idle_memory.sh [--connections N]
#
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail
N=9500
while [ $# -gt 0 ]; do
  case "$1" in
    --connections) N=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/lib.sh"
bench_out idle-memory
ensure nginx:nginx haproxy:haproxy python3:python3
build_sluice
ulimit -n $((N * 2 + 1000)) 2>/dev/null || { echo "ulimit -n $((N * 2 + 1000)) refused" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

"$SLUICE" origin --listen 127.0.0.1:1980 >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port 1980

cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
limits: {max_connections: $((N + 1000))}
timeouts: {keepalive: 300s}
admin: {enabled: false}
routes:
  - uri: /hello
    upstream: {nodes: {"127.0.0.1:1980": 1}}
YAML
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head $((N + 1000)))
worker_rlimit_nofile $((N * 2 + 1000));
http {
  access_log off;
  keepalive_timeout 300s;
  keepalive_requests 100000;
$(nginx_hello 32)
}
CONF
cat > "$OUT/haproxy.cfg" <<CONF
global
  maxconn $((N + 200))
  nbthread 1
defaults
  mode http
  timeout connect 5s
  timeout client 300s
  timeout server 30s
  timeout http-keep-alive 300s
frontend f
  bind 127.0.0.1:9095
  default_backend b
backend b
  http-reuse always
  server o 127.0.0.1:1980
CONF

rss_tree() { local t=0 p; for p in "$@" $(pgrep -P "$1" || true); do t=$((t + $(awk '/VmRSS/ {print $2}' "/proc/$p/status" 2>/dev/null || echo 0))); done; echo "$t"; }

measure() { # $1 name, $2 port, then the command
  local name=$1 port=$2; shift 2
  "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  python3 - "$port" <<'PY'
import http.client, sys
c = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
for _ in range(100):
    c.request("GET", "/hello"); c.getresponse().read()
PY
  sleep 0.5
  local before after
  before=$(rss_tree "$pid")
  coproc HOLD { python3 "$ROOT/bench/idle_conns.py" "$port" "$N"; }
  local ready
  read -r ready <&"${HOLD[0]}"
  sleep 1
  after=$(rss_tree "$pid")
  echo >&"${HOLD[1]}"
  wait "$HOLD_PID" 2>/dev/null || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  echo -e "$name\t$ready\t$before\t$after" >> "$OUT/results.tsv"
  awk -v n="$N" -v b="$before" -v a="$after" -v name="$name" 'BEGIN {printf "%s: %d KiB before, %d KiB with %d idle connections: %.2f KiB each\n", name, b, a, n, (a - b) / n}' >&2
}

: > "$OUT/results.tsv"
measure sluice 9080 "$SLUICE" run -c "$OUT/sluice.yaml"
measure nginx 9090 "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"
measure haproxy 9095 haproxy -f "$OUT/haproxy.cfg" -db
echo "results in $OUT" >&2
