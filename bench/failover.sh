#!/usr/bin/env bash
# Fail-over: two nodes (`sluice origin` processes) behind Sluice and behind NGINX; under wrk
# (GET /hello, 20 keep-alive connections, 16 s), one node is SIGKILLed 3 s in. Reported per
# proxy: failed requests (non-2xx and socket errors, target 0 for GETs), req/s, p99, and the
# connection attempts to the dead node (the kernel's TcpAttemptFails on loopback): how long
# until the proxy stopped trying it, and when it tried again.
#
#   Sluice: retries (nodes - 1), passive marks (a refused connect takes a node out of rotation
#           for every worker for 10 s), active checks (APISIX's defaults, interval 1 s).
#   NGINX:  max_fails=1 fail_timeout=10s, proxy_next_upstream error timeout (its default).
#
#   bench/failover.sh [--rounds N]
#
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail

ROUNDS=2
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out failover
ensure nginx:nginx wrk:wrk
build_sluice

cat > "$OUT/sluice.yaml" <<EOF
listen: 127.0.0.1:9080
workers: 1
log: {level: error}
upstreams:
  - id: two
    nodes: {"127.0.0.1:1980": 1, "127.0.0.1:1981": 1}
    checks: {active: {http_path: /hello}}
routes:
  - uri: /hello
    upstream_id: two
EOF

cat > "$OUT/nginx.conf" <<EOF
$(nginx_head 1024)
master_process off;
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin {
    server 127.0.0.1:1980 max_fails=1 fail_timeout=10s;
    server 127.0.0.1:1981 max_fails=1 fail_timeout=10s;
    keepalive 320;
  }
$(nginx_proxy_headers)
  proxy_next_upstream error timeout;
  server {
    listen 127.0.0.1:9080;
    location = /hello { proxy_pass http://origin; }
  }
}
EOF

# one NAME ROUND COMMAND...
one() {
  local name=$1 round=$2; shift 2
  local origins=()
  for p in 1980 1981; do
    "$SLUICE" origin --listen 127.0.0.1:$p >"$OUT/origin-$p.log" 2>&1 &
    origins+=($!); PIDS+=($!)
    wait_port $p
  done
  "$@" >"$OUT/$name.$round.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port 9080
  wrk -t1 -c20 -d1s http://127.0.0.1:9080/hello >/dev/null
  wrk -t2 -c20 -d16s --latency http://127.0.0.1:9080/hello > "$OUT/$name.$round.wrk" &
  local load=$!
  sleep 3
  python3 "$ROOT/bench/failover_probe.py" "${origins[0]}" 12.5 > "$OUT/$name.$round.probe"
  wait "$load"
  kill "$pid" "${origins[1]}" 2>/dev/null || true
  wait "$pid" "${origins[1]}" "${origins[0]}" 2>/dev/null || true
  echo "$name $round $(tr -d '\n' < "$OUT/$name.$round.probe")" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  one sluice "$round" "$SLUICE" run -c "$OUT/sluice.yaml"
  one nginx "$round" "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT"
done

python3 - "$OUT" "$ROUNDS" <<'EOF' | tee "$OUT/results.md"
import json, re, sys
out, rounds = sys.argv[1], int(sys.argv[2])
print("| proxy | round | requests | failed | req/s | p99 ms | connects to the dead node | in the first second, the last at | later ones at (s after the kill) |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---|")
for name in ("sluice", "nginx"):
    for r in range(1, rounds + 1):
        w = open(f"{out}/{name}.{r}.wrk").read()
        p = json.load(open(f"{out}/{name}.{r}.probe"))
        reqs = int(re.search(r"(\d+) requests in", w).group(1))
        rps = float(re.search(r"Requests/sec:\s+([\d.]+)", w).group(1))
        failed = 0
        m = re.search(r"Non-2xx or 3xx responses: (\d+)", w)
        failed += int(m.group(1)) if m else 0
        m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", w)
        failed += sum(map(int, m.groups())) if m else 0
        p99 = re.search(r"^\s+99%\s+(\S+)", w, re.M).group(1)
        later = ", ".join(f"{t:.1f}" for t in p["later_attempts_at_s"][:8])
        print(f"| {name} | {r} | {reqs} | {failed} | {rps:.0f} | {p99} | {p['attempts']} | {p['first_second']}, {p['stopped_trying_after_s']:.2f} s | {later} |")
EOF
