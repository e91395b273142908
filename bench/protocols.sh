#!/usr/bin/env bash
# TLS and L4, measured beside NGINX in the same run (issue 5's benchmark).
#
#   bench/protocols.sh [--rounds N] [--duration SECONDS] [--scenarios "https handshake fullhs h2 l4 ..."]
#                      [--baseline BINARY]
#
# --baseline: also measure another Sluice build (an older commit's, kept aside), interleaved in
# the same rounds with the same configuration, reported as `base` with this build's CPU per
# request relative to it.
#
# Scenarios (each proxy: one worker on CPU 0; origin and wrk on CPU 1, as bench/run.sh):
#   https      HTTPS keep-alive: TLS 1.3, ECDSA P-256 certificate, wrk -t1 -c50, GET /hello
#              proxied to the built-in origin over pooled HTTP/1.1.
#   handshake  A new TLS connection per request (`wrk -H "Connection: close"`): wrk resumes
#              sessions, as browsers do, so most of these are resumed handshakes.
#   fullhs     Full TLS 1.3 handshakes, no resumption: 4 `openssl s_time -new` clients in
#              parallel (connect, handshake, close); connections per second and CPU µs per
#              handshake.
#   h2         HTTP/2 over TLS (ALPN h2): `h2load -c 16 -m 10` (16 connections, 10 streams
#              each), GET /hello, proxied to the origin over pooled HTTP/1.1.
#   h2body     The same with a 1 KiB request body (`h2load -d`, a POST): the stream goes through
#              the HTTP/1.1 engine (h2_down.rs), not the fast path.
#   h2plugins  The same, GET /plugged on a route with proxy-rewrite (a request field set, the
#              path rewritten) and response-rewrite (an answer field set); NGINX with
#              proxy_set_header and add_header.
#   l4         TCP stream proxy: wrk's HTTP/1.1 keep-alive connections carried by Sluice's
#              stream route / NGINX's `stream` module to the origin (bytes copied, not parsed).
#   l4-64k, l4-1m  The same with 64 KiB and 1 MiB responses (wrk -c20 and -c8): bulk transfer.
#   l4splice, l4-64k-splice, l4-1m-splice  The same three through a stream route with
#              `splice: true` (NGINX as in the copying scenarios).
# Reported per scenario: req/s, p99, CPU µs per request (the proxy's process and children),
# medians over interleaved rounds, and Sluice / NGINX ratios. Traffic to 127.0.0.1 only;
# stops everything it started, also on Ctrl-C. Needs nginx with the stream module
# (Debian: libnginx-mod-stream), wrk, openssl.
set -euo pipefail
set -o errtrace
trap 'echo "bench/protocols.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

ROUNDS=3
DURATION=10
SCENARIOS="https handshake fullhs h2 h2body h2plugins l4 l4splice l4-64k l4-64k-splice l4-1m l4-1m-splice"
CONNS=50
BASELINE=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    --baseline) BASELINE=$(realpath "$2"); shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out protocols
ORIGIN_PORT=1980
SLUICE_TLS=9443
SLUICE_L4=9100
SLUICE_SPLICE=9102
NGINX_TLS=9444
NGINX_L4=9101

NGINX_STREAM_MODULE=/usr/lib/nginx/modules/ngx_stream_module.so
ensure nginx:nginx "$NGINX_STREAM_MODULE:libnginx-mod-stream" wrk:wrk openssl:openssl h2load:nghttp2-client
NGINX=$(command -v nginx)
build_sluice --bin sluice

# One certificate for both proxies: ECDSA P-256, as most sites serve today.
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=localhost -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" \
  -keyout "$OUT/site.key" -out "$OUT/site.pem" 2>/dev/null

cat > "$OUT/sluice.yaml" <<YAML
listen:
  - {addr: 127.0.0.1:$SLUICE_TLS, tls: true, http2: true}
workers: 1
log: {level: warn}
admin: {enabled: false}
limits: {keepalive_requests: 1000000}
ssls:
  - {id: site, snis: [localhost], default: true, cert: $OUT/site.pem, key: $OUT/site.key}
$(origin_routes "$ORIGIN_PORT")
stream_routes:
  - {id: l4, listen: 127.0.0.1:$SLUICE_L4, upstream_id: origin}
  - {id: l4-splice, listen: 127.0.0.1:$SLUICE_SPLICE, upstream_id: origin, splice: true}
YAML

cat > "$OUT/nginx.conf" <<CONF
load_module $NGINX_STREAM_MODULE;
$(nginx_head)
stream {
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; }
  server { listen 127.0.0.1:$NGINX_L4; proxy_pass origin; }
}
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:$ORIGIN_PORT; keepalive 320; }
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host \$http_host;
  proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
  proxy_set_header X-Forwarded-Proto \$scheme;
  server {
    listen 127.0.0.1:$NGINX_TLS ssl http2;
    ssl_certificate $OUT/site.pem;
    ssl_certificate_key $OUT/site.key;
    ssl_protocols TLSv1.2 TLSv1.3;
    keepalive_requests 1000000;
    location = /hello { proxy_pass http://origin; }
    location = /plugged {
      proxy_set_header Connection "";
      proxy_set_header Host \$http_host;
      proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      proxy_set_header X-Forwarded-Proto \$scheme;
      proxy_set_header X-Bench 1;
      add_header X-Served-By bench;
      proxy_pass http://origin/hello;
    }
  }
}
CONF

head -c 1024 /dev/zero | tr '\0' x > "$OUT/body-1k"

taskset -c 1 "$SLUICE" origin --listen 127.0.0.1:$ORIGIN_PORT >"$OUT/origin.log" 2>&1 &
PIDS+=($!)
wait_port $ORIGIN_PORT

RESULTS="$OUT/results.tsv"
echo -e "round\tscenario\tproxy\trps\tp99_ms\terrors\tcpu_us_per_req" > "$RESULTS"

start_proxy() { # $1 proxy; sets MAIN
  if [ "$1" = sluice ] || [ "$1" = base ]; then
    local bin=$SLUICE
    [ "$1" = base ] && bin=$BASELINE
    taskset -c 0 "$bin" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
    MAIN=$!; PIDS+=("$MAIN"); wait_port $SLUICE_TLS; wait_port $SLUICE_L4; wait_port $SLUICE_SPLICE
  else
    taskset -c 0 "$NGINX" -c "$OUT/nginx.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 &
    MAIN=$!; PIDS+=("$MAIN"); wait_port $NGINX_TLS; wait_port $NGINX_L4
  fi
}

url() { # $1 scenario, $2 proxy
  case "$1/$2" in
    https/sluice|handshake/sluice|h2/sluice|h2body/sluice) echo "https://127.0.0.1:$SLUICE_TLS/hello" ;;
    https/nginx|handshake/nginx|h2/nginx|h2body/nginx) echo "https://127.0.0.1:$NGINX_TLS/hello" ;;
    h2plugins/sluice) echo "https://127.0.0.1:$SLUICE_TLS/plugged" ;;
    h2plugins/nginx) echo "https://127.0.0.1:$NGINX_TLS/plugged" ;;
    fullhs/sluice) echo "127.0.0.1:$SLUICE_TLS" ;;
    fullhs/nginx) echo "127.0.0.1:$NGINX_TLS" ;;
    l4*-splice/sluice|l4splice/sluice) echo "http://127.0.0.1:$SLUICE_SPLICE$(l4_path "$1")" ;;
    l4*/sluice) echo "http://127.0.0.1:$SLUICE_L4$(l4_path "$1")" ;;
    l4*/nginx) echo "http://127.0.0.1:$NGINX_L4$(l4_path "$1")" ;;
  esac
}

l4_path() { # $1 scenario
  case "$1" in
    l4-64k*) echo /bytes/65536 ;;
    l4-1m*) echo /bytes/1048576 ;;
    *) echo /hello ;;
  esac
}

conns() { # $1 scenario: fewer connections for bulk transfers
  case "$1" in
    l4-64k*) echo 20 ;;
    l4-1m*) echo 8 ;;
    *) echo "$CONNS" ;;
  esac
}

run_one() { # $1 round, $2 scenario, $3 proxy
  local round=$1 sc=$2 proxy=$3 before after u
  local hdr=()
  [ "$sc" = handshake ] && hdr=(-H "Connection: close")
  u=$(url "$sc" "${proxy/base/sluice}")
  start_proxy "$proxy"
  if [ "$sc" = fullhs ]; then
    before=$(cpu_tree "$MAIN")
    local k st=() t0 t1
    t0=$(date +%s.%N)
    for k in 1 2 3 4; do
      taskset -c 1 openssl s_time -connect "$u" -new -time "$DURATION" > "$OUT/stime-$round-$proxy-$k.txt" 2>&1 &
      st+=($!)
    done
    wait "${st[@]}"
    t1=$(date +%s.%N)
    after=$(cpu_tree "$MAIN")
    python3 - "$OUT" "$round" "$proxy" "$t0" "$t1" > "$OUT/wrk-$round-$sc-$proxy.txt" <<'PY'
import glob, re, sys
n = 0
for f in glob.glob(f"{sys.argv[1]}/stime-{sys.argv[2]}-{sys.argv[3]}-*.txt"):
    n += int(re.search(r"(\d+) connections in \d+ real seconds", open(f).read()).group(1))
t = float(sys.argv[5]) - float(sys.argv[4])
# The shape of a wrk report, for the parser below (no latency figures: p99 0).
print(f"  {n} requests in {t}s\nRequests/sec: {n / t:.2f}\n     99%    0.00us")
PY
  elif [ "${sc#h2}" != "$sc" ]; then
    local data=()
    [ "$sc" = h2body ] && data=(-d "$OUT/body-1k")
    taskset -c 1 h2load -t1 -c16 -m10 -D 2 "${data[@]}" "$u" >/dev/null
    before=$(cpu_tree "$MAIN")
    taskset -c 1 h2load -t1 -c16 -m10 -D "$DURATION" "${data[@]}" "$u" > "$OUT/h2load-$round-$sc-$proxy.txt"
    after=$(cpu_tree "$MAIN")
    python3 - "$OUT/h2load-$round-$sc-$proxy.txt" > "$OUT/wrk-$round-$sc-$proxy.txt" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
secs = float(re.search(r"finished in ([\d.]+)s", t).group(1))
ok = int(re.search(r"(\d+) succeeded", t).group(1))
failed = int(re.search(r"(\d+) failed", t).group(1))
print(f"  {ok} requests in {secs}s\nRequests/sec: {ok / secs:.2f}\n     99%    0.00us")
if failed:
    print(f"Non-2xx or 3xx responses: {failed}")
PY
  else
    local c
    c=$(conns "$sc")
    taskset -c 1 wrk -t1 -c"$c" -d2s "${hdr[@]}" "$u" >/dev/null
    before=$(cpu_tree "$MAIN")
    taskset -c 1 wrk -t1 -c"$c" -d"${DURATION}s" --latency "${hdr[@]}" "$u" > "$OUT/wrk-$round-$sc-$proxy.txt"
    after=$(cpu_tree "$MAIN")
  fi
  kill "$MAIN"; wait "$MAIN" 2>/dev/null || true
  local rps p50 p99 errors cpu
  IFS=$'\t' read -r rps p50 p99 errors cpu < <(wrk_row "$OUT/wrk-$round-$sc-$proxy.txt" "$((after - before))")
  echo -e "$round\t$sc\t$proxy\t$rps\t$p99\t$errors\t$cpu" >> "$RESULTS"
  tail -1 "$RESULTS" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for sc in $SCENARIOS; do
    run_one "$round" "$sc" sluice
    [ -n "$BASELINE" ] && run_one "$round" "$sc" base
    run_one "$round" "$sc" nginx
  done
done

python3 - "$RESULTS" "$ROUNDS" "$DURATION" > "$OUT/summary.md" <<'PY'
import csv, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
med = statistics.median
print(f"{sys.argv[2]} interleaved rounds of {sys.argv[3]} s, wrk -t1 (-c50; l4-64k -c20, l4-1m -c8); medians\n")
print("| scenario | proxy | req/s | p99 ms | errors | CPU µs/req | req/s ratio | CPU/req ratio |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
for sc in dict.fromkeys(r["scenario"] for r in rows):
    agg = {}
    proxies = [p for p in ("sluice", "base", "nginx") if any(r["proxy"] == p for r in rows)]
    for p in proxies:
        rs = [r for r in rows if r["scenario"] == sc and r["proxy"] == p]
        agg[p] = {k: med([float(r[k]) for r in rs]) for k in ("rps", "p99_ms", "errors", "cpu_us_per_req")}
    for p in proxies:
        a = agg[p]
        ratio = ""
        if p != "nginx":
            ratio = f"{a['rps'] / agg['nginx']['rps']:.2f} | {a['cpu_us_per_req'] / agg['nginx']['cpu_us_per_req']:.2f}"
            if p == "sluice" and "base" in agg:
                ratio += f" ({a['cpu_us_per_req'] / agg['base']['cpu_us_per_req']:.2f}x base)"
        else:
            ratio = " | "
        print(f"| {sc} | {p} | {a['rps']:.0f} | {a['p99_ms']:.2f} | {a['errors']:.0f} | {a['cpu_us_per_req']:.2f} | {ratio} |")
PY
cat "$OUT/summary.md"
echo "raw results: $OUT"
