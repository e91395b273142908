#!/usr/bin/env bash
# What the routing table costs per request, in user-space instructions (callgrind: the same
# count for the same binary and inputs whatever else the machine does):
#
#   one     1 prefix route /r1/*, request /r1/x
#   5k      5,000 prefix routes /r{i}/*, request on the last (/r5000/x)
#   one-5k  the last of them alone, the same request (the baseline of 5k: same path length)
#   100k    100,000 prefix routes, request on the last (/r100000/x)
#   one-100k  its last route alone, the same request
#   vars3   the one route with three vars conditions that hold (a header, a query argument
#           by regex, the client address by CIDR), request /r1/x?b=2 with X-A: 1
#   vars0   the same request on the route without vars
#
#   bench/router_cost.sh [--requests-seconds S] [--count "WARM REST N"] [--connections C]
#                        [--shared] [--only "one 5k ..."]
#
# --count: short counts instead of S seconds of wrk: WARM requests, REST seconds of nothing,
# then N requests counted (h2load), as issue 24 asks ("1000 10 5000" with 50 connections).
# --shared: every route names one upstream (`upstream_id`) instead of an inline one each.
# --connections: client connections (default 10).
#
# SLUICE_BIN=PATH measures another build (to compare two). Traffic to 127.0.0.1 only; stops
# everything it started.
set -euo pipefail

SECONDS_=5
CONNS=10
SHARED=
ONLY="one-5k 5k one-100k 100k vars0 vars3"
while [ $# -gt 0 ]; do
  case "$1" in
    --requests-seconds) SECONDS_=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    --count) export CG_COUNT=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --shared) SHARED=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out router-cost
ensure valgrind:valgrind wrk:wrk h2load:nghttp2-client python3:python3 curl:curl
build_sluice

"$SLUICE" origin --listen 127.0.0.1:1980 >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port 1980

# routes N [VARS] [FROM]: a configuration of the prefix routes /r{i}/* for i from FROM
# (default 1) to N, flow style, one line each.
routes() {
  python3 - "$1" "${2:-}" "${3:-1}" "$SHARED" <<'PY'
import sys
n, vars_, first, shared = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
print("listen: 127.0.0.1:9080\nworkers: 1\nlog: {level: warn}\nmetrics: {routes: plugin}")
if shared:
    print('upstreams:\n  - {id: origin, nodes: {"127.0.0.1:1980": 1}}')
up = "upstream_id: origin" if shared else 'upstream: {nodes: {"127.0.0.1:1980": 1}}'
print("routes:")
for i in range(first, n + 1):
    extra = f", vars: {vars_}" if vars_ else ""
    print(f'  - {{id: r{i}, uri: "/r{i}/*", {up}{extra}}}')
PY
}

VARS='[["http_x_a", "==", "1"], ["arg_b", "~~", "^2"], ["remote_addr", "ipmatch", "127.0.0.0/8"]]'
for sc in $ONLY; do
  CG_WRK=()
  CG_WARM=3
  case $sc in
    one) routes 1 > "$OUT/$sc.yaml"; CG_PATH=/r1/x ;;
    one-5k) routes 5000 "" 5000 > "$OUT/$sc.yaml"; CG_PATH=/r5000/x ;;
    5k) routes 5000 > "$OUT/$sc.yaml"; CG_PATH=/r5000/x ;;
    one-100k) routes 100000 "" 100000 > "$OUT/$sc.yaml"; CG_PATH=/r100000/x ;;
    100k) routes 100000 > "$OUT/$sc.yaml"; CG_PATH=/r100000/x; CG_WARM=15 ;;
    vars0) routes 1 > "$OUT/$sc.yaml"; CG_PATH="/r1/x?b=2"; CG_WRK=(-H "X-A: 1") ;;
    vars3) routes 1 "$VARS" > "$OUT/$sc.yaml"; CG_PATH="/r1/x?b=2"; CG_WRK=(-H "X-A: 1") ;;
    *) echo "unknown scenario $sc" >&2; exit 2 ;;
  esac
  # The route must take the request to the origin (its 404 for /rN/x is fine; the gateway's
  # "Route Not Found" would measure the wrong path). Checked on a native run first.
  "$SLUICE" run -c "$OUT/$sc.yaml" >"$OUT/$sc.check.log" 2>&1 &
  check=$!
  wait_port 9080
  hdr=(); [ ${#CG_WRK[@]} -gt 0 ] && hdr=(-H "${CG_WRK[1]}")
  body=$(curl -s "${hdr[@]+"${hdr[@]}"}" "http://127.0.0.1:9080$CG_PATH")
  kill "$check"; wait "$check" 2>/dev/null || true
  if [[ $body == *"Route Not Found"* ]]; then
    echo "$sc: $CG_PATH is not routed: $body" >&2; exit 1
  fi
  CG_PATH=$CG_PATH CG_WARM=$CG_WARM callgrind_per_request "$sc" 9080 "$SECONDS_" "$CONNS" "$SLUICE" run -c "$OUT/$sc.yaml"
done

# Each against its baseline: 5k against one-5k, 100k against one-100k, vars3 against vars0.
awk '{per[$1] = $2 / $3; order[NR] = $1} END {
  base["5k"] = "one-5k"; base["100k"] = "one-100k"; base["vars3"] = "vars0";
  printf "| scenario | instructions per request | against | difference |\n|---|---:|---|---:|\n";
  for (i = 1; i <= NR; i++) { s = order[i]; b = base[s];
    if (b != "" && (b in per)) printf "| %s | %d | %s | %+d (%+.1f%%) |\n", s, per[s], b, per[s] - per[b], (per[s] / per[b] - 1) * 100;
    else printf "| %s | %d | | |\n", s, per[s] } }' "$OUT/counts" | tee "$OUT/results.md"
