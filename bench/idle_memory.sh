#!/usr/bin/env bash
# Memory per idle keep-alive connection, Sluice beside NGINX and HAProxy, one worker each:
# resident memory (less what was freed lazily) before and after N connections that each made one request and stay open
# (issue 12's first figure). Modes: http1 (plain HTTP/1.1), tls (HTTP/1.1 over TLS 1.3), h2
# (HTTP/2 over TLS, one stream done, the connection open with none), ws (a WebSocket tunnel
# to an echo origin, one message done); bench/idle_conns.py holds the connections (and serves
# the WebSocket echo). Each proxy is started afresh for each mode. Also reported: the CPU time the
# proxy spends in 5 s while the connections wait (timers and checks of idle connections).
#
#   bench/idle_memory.sh [--connections N] [--modes "http1 tls h2 ws"]
#
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail
N=9500
MODES="http1 tls h2 ws"
IDLE_SECONDS=5
while [ $# -gt 0 ]; do
  case "$1" in
    --connections) N=$2; shift 2 ;;
    --modes) MODES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/lib.sh"
bench_out idle-memory
ensure nginx:nginx haproxy:haproxy python3:python3 openssl:openssl
build_sluice
ulimit -n $((N * 3 + 1000)) 2>/dev/null || { echo "ulimit -n $((N * 3 + 1000)) refused" >&2; exit 1; }
ulimit -n "$(ulimit -Hn)" 2>/dev/null || true

"$SLUICE" origin --listen 127.0.0.1:1980 >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port 1980
python3 "$ROOT/bench/idle_conns.py" --ws-origin 1981 >"$OUT/ws-origin.log" 2>&1 &
PIDS+=($!)
wait_port 1981

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$OUT/site.key" -out "$OUT/site.pem" 2>/dev/null
cat "$OUT/site.pem" "$OUT/site.key" > "$OUT/site-haproxy.pem"

cat > "$OUT/sluice.yaml" <<YAML
listen:
  - 127.0.0.1:9080
  - {addr: 127.0.0.1:9081, tls: true}
  - {addr: 127.0.0.1:9082, tls: true, http2: true}
  - 127.0.0.1:9083
ssls:
  - {id: site, snis: [localhost], default: true, cert: $OUT/site.pem, key: $OUT/site.key}
workers: 1
log: {level: warn}
limits: {max_connections: $((N + 1000))}
timeouts: {keepalive: 300s}
admin: {enabled: false}
routes:
  - uri: /hello
    upstream: {nodes: {"127.0.0.1:1980": 1}}
  - uri: /ws
    enable_websocket: true
    timeout: {connect: 5, send: 300, read: 300}
    upstream: {nodes: {"127.0.0.1:1981": 1}}
YAML
hello_server() { # PORT LISTEN-OPTIONS
  cat <<EOF
  server {
    listen 127.0.0.1:$1 $2;
    ssl_certificate $OUT/site.pem;
    ssl_certificate_key $OUT/site.key;
    location = /hello { proxy_pass http://origin; }
  }
EOF
}
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head $((N * 2 + 1000)))
worker_rlimit_nofile $((N * 3 + 1000));
http {
  access_log off;
  keepalive_timeout 300s;
  keepalive_requests 100000;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:1980; keepalive 32; }
$(nginx_proxy_headers)
$(hello_server 9090 "")
$(hello_server 9091 ssl)
$(hello_server 9092 "ssl http2")
  server {
    listen 127.0.0.1:9093;
    location = /ws {
      proxy_pass http://127.0.0.1:1981;
      proxy_http_version 1.1;
      proxy_set_header Upgrade \$http_upgrade;
      proxy_set_header Connection upgrade;
      proxy_read_timeout 300s;
    }
  }
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
  bind 127.0.0.1:9096 ssl crt $OUT/site-haproxy.pem alpn http/1.1
  bind 127.0.0.1:9097 ssl crt $OUT/site-haproxy.pem alpn h2
  bind 127.0.0.1:9098
  timeout tunnel 300s
  use_backend ws if { path /ws }
  default_backend b
backend b
  http-reuse always
  server o 127.0.0.1:1980
backend ws
  timeout tunnel 300s
  server w 127.0.0.1:1981
CONF

# Resident memory of a process and its children, less what they freed lazily (lib.sh).
rss_tree() { local t=0 p; for p in "$@" $(pgrep -P "$1" || true); do t=$((t + $(resident_kib "$p"))); done; echo "$t"; }

measure() { # $1 name, $2 port, $3 mode, then the command
  local name=$1 port=$2 mode=$3; shift 3
  "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  # Warm-up: 100 connections of the same kind, closed.
  python3 "$ROOT/bench/idle_conns.py" "$port" 100 "$mode" </dev/null >/dev/null
  sleep 2
  local before after
  before=$(rss_tree "$pid")
  coproc HOLD { python3 "$ROOT/bench/idle_conns.py" "$port" "$N" "$mode"; }
  local ready
  read -r ready <&"${HOLD[0]}"
  # Sluice trims its pool of request buffers every second.
  sleep 2
  after=$(rss_tree "$pid")
  # CPU the proxy spends while they wait (timers, checks): ticks over IDLE_SECONDS.
  local t0 t1
  t0=$(cpu_tree "$pid")
  sleep "$IDLE_SECONDS"
  t1=$(cpu_tree "$pid")
  echo >&"${HOLD[1]}"
  wait "$HOLD_PID" 2>/dev/null || true
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local idle_ms=$(( (t1 - t0) * 1000 / HZ ))
  echo -e "$name\t$mode\t$ready\t$before\t$after\t$idle_ms" >> "$OUT/results.tsv"
  awk -v n="$N" -v b="$before" -v a="$after" -v name="$name $mode" -v cpu="$idle_ms" -v s="$IDLE_SECONDS" 'BEGIN {printf "%s: %d KiB before, %d KiB with %d idle connections: %.2f KiB each; %d ms CPU in %d s idle\n", name, b, a, n, (a - b) / n, cpu, s}' >&2
}

port_of() { # PROXY MODE
  local base
  case "$1" in sluice) base=9080 ;; nginx) base=9090 ;; haproxy) base=9095 ;; esac
  case "$2" in http1) echo "$base" ;; tls) echo $((base + 1)) ;; h2) echo $((base + 2)) ;; ws) echo $((base + 3)) ;; esac
}

: > "$OUT/results.tsv"
for mode in $MODES; do
  measure sluice "$(port_of sluice "$mode")" "$mode" "$SLUICE" run -c "$OUT/sluice.yaml"
  measure nginx "$(port_of nginx "$mode")" "$mode" "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"
  measure haproxy "$(port_of haproxy "$mode")" "$mode" haproxy -f "$OUT/haproxy.cfg" -db
done
echo "results in $OUT" >&2
