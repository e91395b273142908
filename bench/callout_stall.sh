#!/usr/bin/env bash
# A stalled authorization service holds only its own route: the p50/p99 of a route without
# plugins, measured alone and while a route whose plugin's service (forward-auth's authorizer,
# opa's policy agent, ldap-auth's directory, openid-connect's introspection endpoint) accepts
# connections and never answers is loaded
# at the same time (each of its requests waits its `timeout`, then is refused).
#
#   bench/callout_stall.sh [--duration SECONDS] [--stalled-connections N]
#                          [--plugin forward-auth|opa|ldap-auth|openid-connect]
#
# One worker on CPU 0; the origin, the stalled service and wrk on CPU 1. Sends traffic to
# 127.0.0.1 only; stops everything it started.
set -euo pipefail

DURATION=8
STALLED=200
PLUGIN=forward-auth
while [ $# -gt 0 ]; do
  case "$1" in
    --duration) DURATION=$2; shift 2 ;;
    --stalled-connections) STALLED=$2; shift 2 ;;
    --plugin) PLUGIN=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out "callout-stall-$PLUGIN"
# The stalled route's plugin, and what its requests carry so that the plugin asks its service.
SLOW_HEADER=()
case "$PLUGIN" in
  forward-auth) SLOW_PLUGIN='forward-auth: {uri: "http://127.0.0.1:1990/auth", timeout: 1000}' ;;
  opa) SLOW_PLUGIN='opa: {host: "http://127.0.0.1:1990", policy: example, timeout: 1000}' ;;
  ldap-auth)
    SLOW_PLUGIN='ldap-auth: {base_dn: "ou=users,dc=example,dc=org", ldap_uri: "127.0.0.1:1990", timeout: 1000}'
    SLOW_HEADER=(-H "Authorization: Basic $(printf 'alice:alice-pw' | base64)") ;;
  openid-connect)
    SLOW_PLUGIN='openid-connect: {client_id: c, client_secret: s, discovery: "http://127.0.0.1:1990/.well-known/openid-configuration", introspection_endpoint: "http://127.0.0.1:1990/introspect", bearer_only: true, timeout: 1}'
    SLOW_HEADER=(-H "Authorization: Bearer an-opaque-token") ;;
  *) echo "unknown plugin $PLUGIN (forward-auth, opa, ldap-auth or openid-connect)" >&2; exit 2 ;;
esac
ensure wrk:wrk python3:python3
build_sluice
start_origin "$SLUICE"

# The stalled service: accepts, reads nothing, answers nothing.
taskset -c 1 python3 -c '
import socket, time
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 1990)); s.listen(4096); held = []
while True:
    c, _ = s.accept(); held.append(c)
' &
PIDS+=($!)
wait_port 1990

cat > "$OUT/sluice.yaml" <<EOF2
listen: 127.0.0.1:9080
workers: 1
log: {level: error}
routes:
  - uri: /hello
    upstream: {nodes: {"127.0.0.1:1980": 1}}
  - uri: /slow
    upstream: {nodes: {"127.0.0.1:1980": 1}}
    plugins:
      $SLOW_PLUGIN
EOF2
taskset -c 0 "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
PIDS+=($!)
wait_port 9080

row() { # wrk output file: "p50_ms p99_ms req/s non2xx"
  python3 - "$1" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def ms(label):
    m = re.search(r"^\s+" + label + r"\s+([\d.]+)(us|ms|s)", t, re.M)
    v, u = float(m.group(1)), m.group(2)
    return v / 1000 if u == "us" else v * 1000 if u == "s" else v
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
non = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
print(f"{ms('50%'):.3f} {ms('99%'):.3f} {rps:.0f} {non.group(1) if non else 0}")
PY
}

taskset -c 1 wrk -t1 -c50 -d2s http://127.0.0.1:9080/hello >/dev/null
taskset -c 1 wrk -t1 -c50 -d"${DURATION}s" --latency http://127.0.0.1:9080/hello > "$OUT/alone.txt"
taskset -c 1 wrk -t1 -c"$STALLED" -d"$((DURATION + 4))s" --timeout 5s --latency "${SLOW_HEADER[@]}" http://127.0.0.1:9080/slow > "$OUT/stalled.txt" &
STALL=$!
PIDS+=($STALL)
sleep 2
taskset -c 1 wrk -t1 -c50 -d"${DURATION}s" --latency http://127.0.0.1:9080/hello > "$OUT/beside.txt"
wait "$STALL" || true

{
  echo "| /hello | p50 ms | p99 ms | req/s |"
  echo "|---|---:|---:|---:|"
  read -r p50 p99 rps _ < <(row "$OUT/alone.txt"); echo "| alone | $p50 | $p99 | $rps |"
  read -r p50 p99 rps _ < <(row "$OUT/beside.txt"); echo "| beside $STALLED stalled /slow connections | $p50 | $p99 | $rps |"
  read -r p50 p99 rps non < <(row "$OUT/stalled.txt")
  echo
  echo "/slow ($PLUGIN, service stalled, timeout 1000 ms): p50 $p50 ms, p99 $p99 ms, $non answers not 2xx of $(awk '/requests in/ {print $1}' "$OUT/stalled.txt")"
} | tee "$OUT/results.md"
