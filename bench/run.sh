#!/usr/bin/env bash
# Sluice vs NGINX, the seeds' scenarios (seeds/003): interleaved rounds on a 2-core machine.
#
#   bench/run.sh [--rounds N] [--duration SECONDS] [--connections C] [--scenarios "1 2 3 4"]
#                [--with-hyper]
#
# Layout: the proxy under test (one worker) is pinned to CPU 0; the origin (`sluice origin`)
# and wrk share CPU 1. Each round runs every scenario against Sluice and then NGINX, so both
# see the same machine noise. Reported per scenario and proxy: median requests/s, p50/p99
# latency, proxy CPU microseconds per request ((utime+stime) from /proc over the wrk run,
# divided by requests), resident memory idle and after load, and each figure's ratio to NGINX.
#
# Scenarios (the APISIX configurations of seeds/003, as published): 1 = one route, no plugins;
# 2 = one route + limit-count (limit never reached); 3 = one route + limit-count + key-auth
# (requests carry the consumer's key); 4 = 5,000 routes (generated exactly as the APISIX
# benchmark does), the last one hit; 5 = one route + real-ip + hmac-auth + request-validation
# (issue 25's cost; not in the default set). NGINX does the same work: limit_req with a huge rate for
# limit-count, a map on the apikey header for key-auth; for 5, its realip module and a check of
# the validated header (it has no HMAC check of its own: it does less work there). --with-hyper adds a third contender in scenario 1: a
# straightforward hyper proxy (bench/hyper-baseline), the design Sluice's HTTP/1.1 engine
# replaced. Sends traffic to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/run.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=5
DURATION=10
CONNS=50
SCENARIOS="1 2 3 4"
WITH_HYPER=0
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    --with-hyper) WITH_HYPER=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out ""
ORIGIN_PORT=1980
SLUICE_PORT=9080
NGINX_PORT=9090
HYPER_PORT=9091

ensure nginx:nginx wrk:wrk
NGINX=$(command -v nginx)
build_sluice
if [ "$WITH_HYPER" = 1 ]; then
  (cd "$ROOT/bench/hyper-baseline" && cargo build --release -q)
  HYPER="$ROOT/bench/hyper-baseline/target/release/hyper-baseline"
fi


# --- configurations ---------------------------------------------------------------------
sluice_common="listen: 127.0.0.1:$SLUICE_PORT
workers: 1
log: {level: warn}
"
{ echo "$sluice_common"; cat <<EOF
routes:
  - uri: /hello
    upstream:
      nodes:
        "127.0.0.1:$ORIGIN_PORT": 1
      type: roundrobin
#END
EOF
} > "$OUT/sluice-1.yaml"
{ echo "$sluice_common"; cat <<EOF
routes:
  - uri: /hello
    upstream:
      nodes:
        "127.0.0.1:$ORIGIN_PORT": 1
      type: roundrobin
    plugins:
      limit-count:
        count: 999999999
        time_window: 60
        rejected_code: 503
        key: remote_addr
#END
EOF
} > "$OUT/sluice-2.yaml"
{ echo "$sluice_common"; cat <<EOF
routes:
  - uri: /hello
    upstream:
      nodes:
        "127.0.0.1:$ORIGIN_PORT": 1
      type: roundrobin
    plugins:
      key-auth:
      limit-count:
        count: 999999999
        time_window: 60
        rejected_code: 503
        key: remote_addr
consumers:
  - username: jack
    plugins:
      key-auth:
        key: user-key
#END
EOF
} > "$OUT/sluice-3.yaml"
{ echo "$sluice_common"; echo "routes:"
  for i in $(seq 1 5000); do
    printf '\n  - id: %d\n    uri: /hello%d\n    upstream:\n      nodes:\n        "127.0.0.1:%d": 1\n      type: roundrobin\n' "$i" "$i" "$ORIGIN_PORT"
  done
  echo "#END"
} > "$OUT/sluice-4.yaml"
{ echo "$sluice_common"; plugins5_routes "$ORIGIN_PORT"; } > "$OUT/sluice-5.yaml"
plugins5_headers

nginx_conf() { # $1 = scenario
  local locations
  case "$1" in
    4) locations=$(for i in $(seq 1 5000); do echo "    location = /hello$i { proxy_pass http://origin; }"; done) ;;
    2) locations="    location = /hello { limit_req zone=perip burst=1000000 nodelay; limit_req_status 503; proxy_pass http://origin; }" ;;
    3) locations="    location = /hello { if (\$consumer = \"\") { return 401; } limit_req zone=perip burst=1000000 nodelay; limit_req_status 503; proxy_pass http://origin; }" ;;
    5) locations="    set_real_ip_from 127.0.0.1; real_ip_header X-Real-IP;
    location = /hello { if (\$http_x_api_version !~ \"^v[0-9]+\$\") { return 400; } proxy_pass http://origin; }" ;;
    *) locations="    location = /hello { proxy_pass http://origin; }" ;;
  esac
  cat <<EOF
$(nginx_head)
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 320; }
  limit_req_zone \$binary_remote_addr zone=perip:10m rate=100000000r/s;
  map \$http_apikey \$consumer { default ""; "user-key" "jack"; }
$(nginx_proxy_headers)
  server {
    listen 127.0.0.1:$NGINX_PORT;
$locations
  }
}
EOF
}
mkdir -p "$OUT/nginx-tmp"
for s in $SCENARIOS; do nginx_conf "$s" > "$OUT/nginx-$s.conf"; done

# --- measurement ------------------------------------------------------------------------
rss_kib() { local t=0; for p in "$@"; do t=$((t + $(resident_kib "$p"))); done; echo "$t"; }
taskset -c 1 "$SLUICE" origin --listen 127.0.0.1:$ORIGIN_PORT >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port $ORIGIN_PORT

RESULTS="$OUT/results.tsv"
echo -e "round\tscenario\tproxy\trps\tp50_ms\tp99_ms\tcpu_us_per_req\tidle_rss_kib\trss_kib" > "$RESULTS"

run_one() { # $1 round, $2 scenario, $3 proxy
  local round=$1 s=$2 proxy=$3 port pids=() main
  if [ "$proxy" = sluice ]; then
    taskset -c 0 "$SLUICE" run -c "$OUT/sluice-$s.yaml" >"$OUT/sluice.log" 2>&1 &
    main=$!; port=$SLUICE_PORT; pids=("$main")
  elif [ "$proxy" = hyper ]; then
    taskset -c 0 "$HYPER" 127.0.0.1:$HYPER_PORT 127.0.0.1:$ORIGIN_PORT >"$OUT/hyper.log" 2>&1 &
    main=$!; port=$HYPER_PORT; pids=("$main")
  else
    taskset -c 0 "$NGINX" -c "$OUT/nginx-$s.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 &
    main=$!; port=$NGINX_PORT
  fi
  PIDS+=("$main")
  wait_port "$port"
  local path=/hello; [ "$s" = 4 ] && path=/hello5000
  local hdr=(); [ "$s" = 3 ] && hdr=(-H "apikey: user-key")
  [ "$s" = 5 ] && hdr=("${H5[@]}")
  if [ "$proxy" = nginx ]; then pids=("$main" $(pgrep -P "$main")); fi
  local idle; idle=$(rss_kib "${pids[@]}")
  # Warm up (pools, caches), then measure.
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "${hdr[@]}" "http://127.0.0.1:$port$path" >/dev/null
  local before after; before=$(cpu_tree "$main")
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "${hdr[@]}" "http://127.0.0.1:$port$path" > "$OUT/wrk-$round-$s-$proxy.txt"
  after=$(cpu_tree "$main")
  local rss; rss=$(rss_kib "${pids[@]}")
  kill "$main"; wait "$main" 2>/dev/null || true
  local rps p50 p99 errors cpu
  IFS=$'\t' read -r rps p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$round-$s-$proxy.txt" "$((after - before))")
  [ "$errors" != 0 ] && echo "warning: $errors errors in $OUT/wrk-$round-$s-$proxy.txt" >&2
  echo -e "$round\t$s\t$proxy\t$rps\t$p50\t$p99\t$cpu\t$idle\t$rss" >> "$RESULTS"
  tail -1 "$RESULTS" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for s in $SCENARIOS; do
    run_one "$round" "$s" sluice
    run_one "$round" "$s" nginx
    if [ "$WITH_HYPER" = 1 ] && [ "$s" = 1 ]; then run_one "$round" "$s" hyper; fi
  done
done

python3 - "$RESULTS" "$ROUNDS" "$DURATION" "$CONNS" > "$OUT/results.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = lambda xs: statistics.median(xs)
keys = sorted({(r["scenario"], r["proxy"]) for r in rows})
agg = {}
for s, p in keys:
    rs = [r for r in rows if r["scenario"] == s and r["proxy"] == p]
    agg[(s, p)] = {k: med([float(r[k]) for r in rs]) for k in ("rps", "p50_ms", "p99_ms", "cpu_us_per_req", "idle_rss_kib", "rss_kib")}
names = {"1": "1: one route", "2": "2: + limit-count", "3": "3: + limit-count + key-auth", "4": "4: 5,000 routes", "5": "5: + real-ip + hmac-auth + request-validation"}
print(f"{sys.argv[2]} interleaved rounds of {sys.argv[3]} s, wrk -t1 -c{sys.argv[4]}; medians; ratio = Sluice / NGINX\n")
print("| scenario | proxy | req/s | p50 ms | p99 ms | CPU µs/req | idle RSS MiB | RSS MiB after load |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for s in sorted({k[0] for k in keys}):
    for p in ("sluice", "nginx", "hyper"):
        if (s, p) not in agg: continue
        a = agg[(s, p)]
        print(f"| {names.get(s, s)} | {p} | {a['rps']:.0f} | {a['p50_ms']:.3f} | {a['p99_ms']:.3f} | {a['cpu_us_per_req']:.1f} | {a['idle_rss_kib']/1024:.1f} | {a['rss_kib']/1024:.1f} |")
    if (s, "sluice") in agg and (s, "nginx") in agg:
        a, b = agg[(s, "sluice")], agg[(s, "nginx")]
        print(f"| {names.get(s, s)} | **Sluice / NGINX** | {a['rps']/b['rps']:.2f} | {a['p50_ms']/b['p50_ms']:.2f} | {a['p99_ms']/b['p99_ms']:.2f} | {a['cpu_us_per_req']/b['cpu_us_per_req']:.2f} | | |")
    if (s, "hyper") in agg and (s, "nginx") in agg:
        a, b = agg[(s, "hyper")], agg[(s, "nginx")]
        print(f"| {names.get(s, s)} | hyper / NGINX | {a['rps']/b['rps']:.2f} | {a['p50_ms']/b['p50_ms']:.2f} | {a['p99_ms']/b['p99_ms']:.2f} | {a['cpu_us_per_req']/b['cpu_us_per_req']:.2f} | | |")
print()
for other in ("2", "3", "4", "5"):
    for p in ("sluice", "nginx"):
        if ("1", p) in agg and (other, p) in agg:
            a, b = agg[(other, p)], agg[("1", p)]
            print(f"- {p} scenario {other} vs 1: req/s {a['rps']/b['rps']:.3f}, CPU/req {a['cpu_us_per_req']/b['cpu_us_per_req']:.3f}")
PY
cat "$OUT/results.md"
echo "raw results: $RESULTS" >&2
