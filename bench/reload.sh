#!/usr/bin/env bash
# Live configuration, measured: how long one route change takes to reach service, and what a
# storm of changes costs the traffic, beside NGINX reloading in the same run.
#
#   bench/reload.sh [--rounds N] [--duration SECONDS] [--routes N] [--skip-apply]
#
# Part 1 (apply time): `cargo run --release --example reload_apply` with 1,000, 10,000 and
# 100,000 routes: one route changed through the admin API (the call returns once the change is
# in service, file written and synced) and by editing the file, 20 times each; median, p95, max.
#
# Part 2 (reload storm): one proxy worker on CPU 0, origin and wrk on CPU 1 (as bench/run.sh).
# The configuration holds --routes routes (default 10,000, the seeds' scenario 4 shape) plus
# /hello, which wrk requests. Per round: Sluice without changes; Sluice while a route is changed
# through the admin API every 100 ms; NGINX without reloads; NGINX while `nginx -s reload`
# runs every 100 ms (NGINX has no other way to change its configuration). Reported: req/s,
# p99, errors wrk saw (non-2xx and socket errors), CPU µs per request (the proxy's processes,
# the admin thread's compiling included), and storm / calm ratios.
# Traffic to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/reload.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=10
ROUTES=10000
APPLY=1
CONNS=50
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --routes) ROUTES=$2; shift 2 ;;
    --skip-apply) APPLY=0; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out reload
ORIGIN_PORT=1980
SLUICE_PORT=9080
ADMIN_PORT=9180
NGINX_PORT=9090
KEY=bench-admin-key-0123456789

ensure nginx:nginx wrk:wrk curl:curl
NGINX=$(command -v nginx)
build_sluice --bin sluice --example reload_apply

# --- part 1: apply time ------------------------------------------------------------------
if [ "$APPLY" = 1 ]; then
  for n in 1000 10000 100000; do
    echo "apply time with $n routes" >&2
    taskset -c 0 "$ROOT/target/release/examples/reload_apply" "$n" 20 | tee -a "$OUT/apply.txt"
  done
fi

# --- part 2: reload storm ----------------------------------------------------------------
{
  cat <<EOF
listen: 127.0.0.1:$SLUICE_PORT
workers: 1
log: {level: warn}
admin: {listen: "127.0.0.1:$ADMIN_PORT", key: $KEY}
upstreams:
  - {"id": "origin", "nodes": {"127.0.0.1:$ORIGIN_PORT": 1}}
routes:
  - {"id": "hello", "uri": "/hello", "upstream_id": "origin"}
EOF
  for i in $(seq 1 "$ROUTES"); do
    printf '  - {"id": "r%d", "uri": "/hello%d", "upstream": {"type": "roundrobin", "nodes": {"127.0.0.1:%d": 1}}}\n' "$i" "$i" "$ORIGIN_PORT"
  done
} > "$OUT/sluice.template.yaml"

{
  cat <<EOF
$(nginx_head)
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 320; }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host \$http_host;
  proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    location = /hello { proxy_pass http://origin; }
EOF
  for i in $(seq 1 "$ROUTES"); do echo "    location = /hello$i { proxy_pass http://origin; }"; done
  echo "  }"
  echo "}"
} > "$OUT/nginx.conf"

taskset -c 1 "$SLUICE" origin --listen 127.0.0.1:$ORIGIN_PORT >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port $ORIGIN_PORT

RESULTS="$OUT/storm.tsv"
echo -e "round\tproxy\tstorm\trps\tp99_ms\terrors\tcpu_us_per_req\tchanges" > "$RESULTS"

# Changes a route every 100 ms until killed; counts the changes that succeeded.
sluice_storm() {
  local k=0 ok=0
  trap 'echo "$ok" > "$OUT/storm-count"; exit 0' TERM
  while true; do
    k=$((k + 1))
    code=$(taskset -c 1 curl -s -o /dev/null -w '%{http_code}' -X PUT "http://127.0.0.1:$ADMIN_PORT/admin/routes/storm" \
      -H "X-API-KEY: $KEY" -d "{\"uri\": \"/storm$((k % 50))\", \"upstream_id\": \"origin\"}")
    case "$code" in 200|201) ok=$((ok + 1)) ;; esac
    echo "$ok" > "$OUT/storm-count"
    sleep 0.1
  done
}
nginx_storm() {
  local ok=0
  trap 'echo "$ok" > "$OUT/storm-count"; exit 0' TERM
  while true; do
    taskset -c 1 "$NGINX" -c "$OUT/nginx.conf" -p "$OUT" -s reload 2>>"$OUT/nginx-reload.log" && ok=$((ok + 1))
    echo "$ok" > "$OUT/storm-count"
    sleep 0.1
  done
}

run_one() { # $1 round, $2 proxy, $3 storm (0/1)
  local round=$1 proxy=$2 storm=$3 port main
  if [ "$proxy" = sluice ]; then
    cp "$OUT/sluice.template.yaml" "$OUT/sluice.yaml"
    taskset -c 0 "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
    main=$!; port=$SLUICE_PORT
    PIDS+=("$main"); wait_port "$port"; wait_port "$ADMIN_PORT"
  else
    taskset -c 0 "$NGINX" -c "$OUT/nginx.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 &
    main=$!; port=$NGINX_PORT
    PIDS+=("$main"); wait_port "$port"
  fi
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port/hello" >/dev/null
  local stormer="" before after
  echo 0 > "$OUT/storm-count"
  before=$(cpu_tree "$main")
  if [ "$storm" = 1 ]; then
    if [ "$proxy" = sluice ]; then sluice_storm & else nginx_storm & fi
    stormer=$!
  fi
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port/hello" > "$OUT/wrk-$round-$proxy-$storm.txt"
  after=$(cpu_tree "$main")
  if [ -n "$stormer" ]; then kill "$stormer"; wait "$stormer" 2>/dev/null || true; fi
  local changes; changes=$(cat "$OUT/storm-count")
  kill "$main"; wait "$main" 2>/dev/null || true
  local rps p50 p99 errors cpu
  IFS=$'\t' read -r rps p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$round-$proxy-$storm.txt" "$((after - before))")
  echo -e "$round\t$proxy\t$storm\t$rps\t$p99\t$errors\t$cpu\t$changes" >> "$RESULTS"
  tail -1 "$RESULTS" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  run_one "$round" sluice 0
  run_one "$round" sluice 1
  run_one "$round" nginx 0
  run_one "$round" nginx 1
done

python3 - "$RESULTS" "$ROUNDS" "$DURATION" "$ROUTES" > "$OUT/storm.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = statistics.median
agg = {}
for p in ("sluice", "nginx"):
    for s in ("0", "1"):
        rs = [r for r in rows if r["proxy"] == p and r["storm"] == s]
        if rs:
            agg[(p, s)] = {k: med([float(r[k]) for r in rs]) for k in ("rps", "p99_ms", "errors", "cpu_us_per_req", "changes")}
print(f"{sys.argv[2]} interleaved rounds of {sys.argv[3]} s, {sys.argv[4]} routes + /hello, wrk -t1 -c50; medians\n")
print("| proxy | changes | req/s | p99 ms | errors | CPU µs/req | changes applied |")
print("|---|---|---:|---:|---:|---:|---:|")
label = {"0": "none", "1": "one per 100 ms"}
for p in ("sluice", "nginx"):
    for s in ("0", "1"):
        if (p, s) in agg:
            a = agg[(p, s)]
            print(f"| {p} | {label[s]} | {a['rps']:.0f} | {a['p99_ms']:.2f} | {a['errors']:.0f} | {a['cpu_us_per_req']:.2f} | {a['changes']:.0f} |")
print()
for p in ("sluice", "nginx"):
    if (p, "0") in agg and (p, "1") in agg:
        a, b = agg[(p, "1")], agg[(p, "0")]
        print(f"- {p}: storm / calm req/s {a['rps']/b['rps']:.3f}, CPU/req {a['cpu_us_per_req']/b['cpu_us_per_req']:.3f}, p99 {a['p99_ms']/b['p99_ms']:.2f}")
if ("sluice", "1") in agg and ("nginx", "1") in agg:
    a, b = agg[("sluice", "1")], agg[("nginx", "1")]
    print(f"- during the storm, Sluice / NGINX: req/s {a['rps']/b['rps']:.2f}, CPU/req {a['cpu_us_per_req']/b['cpu_us_per_req']:.2f}")
PY
[ -f "$OUT/apply.txt" ] && { echo "## apply time"; cat "$OUT/apply.txt"; echo; }
cat "$OUT/storm.md"
echo "raw results: $OUT" >&2
