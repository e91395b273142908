#!/usr/bin/env bash
# An hour under load (docs/benchmarks.md, "An hour under load"): mixed traffic at a steady
# rate while the configuration changes and an upstream node dies, sampling the gateway's
# resident memory, open files and threads every 10 s and each minute's latency.
#
#   bench/soak.sh [--minutes N] [--kill-every SECONDS]     (60 minutes, 300 s by default)
#
# Traffic, each client paced (wrk's delay(), so the machine is not saturated and latency
# means something):
#   - HTTP/1.1 keep-alive: wrk, 16 connections, 1,600 requests/s, one run per minute (its
#     --latency report is the minute's p50/p99);
#   - HTTP/1.1 a connection per request (`Connection: close`): 4 connections, 200/s;
#   - HTTPS (TLS 1.3, keep-alive) to a route with key-auth and limit-count: 8 connections,
#     400/s, the key in each request;
#   - HTTP/2 (prior knowledge): h2load, 4 connections, 200 requests/s;
#   - WebSockets: 20 clients in sessions of 2 s, a message every 50 ms, each echo checked.
# Faults and changes:
#   - every 10 s an admin API write (a route changed, alternately with and without a plugin);
#   - every minute a reload (SIGHUP);
#   - every 5 minutes one of the two upstream nodes is killed, and started again 30 s later
#     (passive and active health checks take it out and bring it back).
# Sampled every 10 s from /proc: resident memory (less what was freed lazily: lib.sh's
# resident_kib), open file descriptors, threads (Linux's tasks); and from
# the status listener the requests counted and the client connections open. Written:
# $OUT/samples.tsv, $OUT/minutes.tsv, $OUT/summary.txt and the plot $OUT/soak-memory.png
# (gnuplot), which docs/benchmarks.md shows.
#
# One release build (`build_sluice`), two workers. Traffic to 127.0.0.1 only; stops every
# process it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/soak.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

MINUTES=60
KILL_EVERY=300
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) MINUTES=$2; shift 2 ;;
    --kill-every) KILL_EVERY=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out soak
ensure wrk:wrk h2load:nghttp2-client python3:python3 gnuplot:gnuplot-nox openssl:openssl curl:curl
build_sluice

# Two origins (the upstream's nodes; the second is the one killed), the WebSocket echo node.
"$SLUICE" origin --listen 127.0.0.1:1980 >"$OUT/origin-a.log" 2>&1 &
PIDS+=($!)
start_b() {
  "$SLUICE" origin --listen 127.0.0.1:1981 >>"$OUT/origin-b.log" 2>&1 &
  ORIGIN_B=$!
  PIDS+=("$ORIGIN_B")
  wait_port 1981
}
start_b
python3 "$ROOT/bench/ws_echo.py" 1990 >"$OUT/ws_echo.log" 2>&1 &
PIDS+=($!)
wait_port 1980
wait_port 1990

openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
  -subj /CN=localhost -addext subjectAltName=DNS:localhost,IP:127.0.0.1 \
  -keyout "$OUT/key.pem" -out "$OUT/cert.pem" 2>/dev/null

KEY=soak-admin-key-0123456789
cat > "$OUT/sluice.yaml" <<YAML
listen:
  - {addr: 127.0.0.1:9080, http2: true}
  - {addr: 127.0.0.1:9443, tls: true, http2: true}
workers: 2
admin: {listen: 127.0.0.1:9180, key: $KEY}
status: {listen: 127.0.0.1:9091}
timeouts: {drain: 10s}
ssls:
  - {id: local, default: true, cert: $OUT/cert.pem, key: $OUT/key.pem}
upstreams:
  - id: pair
    nodes: {"127.0.0.1:1980": 1, "127.0.0.1:1981": 1}
    checks:
      active: {type: http, http_path: /hello, healthy: {interval: 1}, unhealthy: {interval: 1}}
      passive: {unhealthy: {tcp_failures: 1}}
routes:
  - {id: hello, uri: /hello, upstream_id: pair}
  - id: limited
    uri: /limited
    upstream_id: pair
    plugins:
      key-auth: {}
      limit-count: {count: 999999999, time_window: 60, rejected_code: 503, key: remote_addr}
      proxy-rewrite: {uri: /hello}
  - {id: ws, uri: /ws, enable_websocket: true, upstream: {nodes: {"127.0.0.1:1990": 1}}}
  - {id: churn, uri: /churn, upstream_id: pair}
consumers:
  - username: jack
    plugins:
      key-auth: {key: user-key}
YAML
"$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
GW=$!
PIDS+=("$GW")
wait_port 9080
wait_port 9443

# Paced wrk clients: each connection waits DELAY ms after each answer.
cat > "$OUT/paced.lua" <<'LUA'
local pause = tonumber(os.getenv("SOAK_DELAY") or "10")
function delay() return pause end
LUA
cat > "$OUT/paced-key.lua" <<'LUA'
local pause = tonumber(os.getenv("SOAK_DELAY") or "10")
wrk.headers["apikey"] = "user-key"
function delay() return pause end
LUA

SECS=$((MINUTES * 60))
END=$(($(date +%s) + SECS))
# Keep-alive: one wrk run per minute, for each minute's latency.
(
  for m in $(seq 1 "$MINUTES"); do
    SOAK_DELAY=10 wrk -t1 -c16 -d60s --latency -s "$OUT/paced.lua" http://127.0.0.1:9080/hello \
      >"$OUT/wrk-keepalive-$m.txt" 2>&1 || true
  done
) &
PIDS+=($!)
SOAK_DELAY=20 wrk -t1 -c4 -d"${SECS}s" -s "$OUT/paced.lua" -H "Connection: close" \
  http://127.0.0.1:9080/hello >"$OUT/wrk-close.txt" 2>&1 &
PIDS+=($!)
SOAK_DELAY=20 wrk -t1 -c8 -d"${SECS}s" -s "$OUT/paced-key.lua" \
  https://127.0.0.1:9443/limited >"$OUT/wrk-https.txt" 2>&1 &
PIDS+=($!)
h2load -c4 -m1 --rps 50 -D "$SECS" http://127.0.0.1:9080/hello >"$OUT/h2load.txt" 2>&1 &
PIDS+=($!)
python3 "$ROOT/bench/ws_clients.py" "$SECS" 20 9080 >"$OUT/ws.txt" 2>&1 &
PIDS+=($!)

admin_change() {
  local n=$1 body
  if [ $((n % 2)) -eq 0 ]; then
    body='{"uri": "/churn", "upstream_id": "pair", "plugins": {"response-rewrite": {"headers": {"set": {"X-Churn": "'"$n"'"}}}}}'
  else
    body='{"uri": "/churn", "upstream_id": "pair"}'
  fi
  curl -s -o /dev/null -w '%{http_code}' -X PUT -H "X-API-KEY: $KEY" \
    -d "$body" http://127.0.0.1:9180/admin/routes/churn
}

# The requests the status listener counted, and the client connections open now (each is a
# task on a worker; /proc's tasks are the threads).
counted() {
  curl -s http://127.0.0.1:9091/metrics |
    awk '/^sluice_http_requests_total\{/ {r += $NF} /^sluice_connections\{/ {c += $NF}
         END {printf "%d\t%d", r, c}'
}

printf 't_s\trss_kib\tfds\tthreads\trequests\tconnections\tevent\n' >"$OUT/samples.tsv"
START=$(date +%s)
tick=0
admin_failed=0
while [ "$(date +%s)" -lt "$END" ]; do
  now=$(($(date +%s) - START))
  event=""
  if [ $((tick % (KILL_EVERY / 10))) -eq 0 ] && [ "$tick" -gt 0 ]; then
    kill "$ORIGIN_B" 2>/dev/null || true
    wait "$ORIGIN_B" 2>/dev/null || true
    event="node-b-killed"
  elif [ $((tick % (KILL_EVERY / 10))) -eq 3 ] && [ "$tick" -gt 3 ]; then
    start_b
    event="node-b-started"
  fi
  if [ $((tick % 6)) -eq 0 ] && [ "$tick" -gt 0 ]; then
    kill -HUP "$GW"
    event="${event:+$event,}reload"
  fi
  code=$(admin_change "$tick")
  [ "$code" = 200 ] || [ "$code" = 201 ] || admin_failed=$((admin_failed + 1))
  rss=$(resident_kib "$GW")
  fds=$(find "/proc/$GW/fd" -mindepth 1 -maxdepth 1 | wc -l)
  threads=$(find "/proc/$GW/task" -mindepth 1 -maxdepth 1 | wc -l)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$now" "$rss" "$fds" "$threads" "$(counted)" \
    "${event:--}" >>"$OUT/samples.tsv"
  tick=$((tick + 1))
  sleep $((START + tick * 10 - $(date +%s) > 0 ? START + tick * 10 - $(date +%s) : 0))
done
wait_clients() {
  # The clients run for SECS; the per-minute wrk loop may end a little later.
  for _ in $(seq 1 120); do
    pgrep -f "bench/ws_clients.py $SECS" >/dev/null || pgrep -x wrk >/dev/null || pgrep -x h2load >/dev/null || return 0
    sleep 1
  done
}
wait_clients

# Each minute's keep-alive latency, and the totals.
printf 'minute\treq_s\tp50_ms\tp99_ms\terrors\n' >"$OUT/minutes.tsv"
for m in $(seq 1 "$MINUTES"); do
  f="$OUT/wrk-keepalive-$m.txt"
  [ -f "$f" ] || continue
  python3 - "$f" "$m" >>"$OUT/minutes.tsv" <<'PY'
import re, sys
t = open(sys.argv[1]).read()
def ms(v, u):
    return float(v) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[u]
rps = re.search(r"Requests/sec:\s+([\d.]+)", t)
p50 = re.search(r"50%\s+([\d.]+)(us|ms|s)", t)
p99 = re.search(r"99%\s+([\d.]+)(us|ms|s)", t)
err = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", t))
non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
err += int(non2xx.group(1)) if non2xx else 0
print("%s\t%s\t%.3f\t%.3f\t%d" % (sys.argv[2], rps.group(1) if rps else "0",
      ms(*p50.groups()) if p50 else 0, ms(*p99.groups()) if p99 else 0, err))
PY
done

cat > "$OUT/plot.gp" <<GP
set terminal pngcairo size 960,480 font ",11"
set output "$OUT/soak-memory.png"
set title "Sluice under mixed load for $MINUTES minutes: resident memory (2 workers)"
set xlabel "minutes"
set ylabel "resident memory (MiB)"
set y2label "open file descriptors"
set ytics nomirror
set y2tics
set yrange [0:*]
set y2range [0:*]
set grid
set key bottom right box opaque
plot "$OUT/samples.tsv" using (\$1/60):(\$2/1024) skip 1 with lines lw 2 title "resident", \
     "$OUT/samples.tsv" using (\$1/60):3 skip 1 axes x1y2 with lines lw 1 title "open fds"
GP
gnuplot "$OUT/plot.gp" 2>"$OUT/gnuplot.log" || echo "gnuplot failed: see $OUT/gnuplot.log" >&2

python3 - "$OUT" "$admin_failed" <<'PY' | tee "$OUT/summary.txt"
import re, sys
out, admin_failed = sys.argv[1], int(sys.argv[2])
rows = [l.rstrip("\n").split("\t") for l in open(out + "/samples.tsv")][1:]
warm = [r for r in rows if int(r[0]) >= 300]  # after 5 minutes
def span(col):
    v = [int(r[col]) for r in warm]
    return (min(v), max(v)) if v else (0, 0)
rss, fds, thr, conns = span(1), span(2), span(3), span(5)
first_half = [int(r[1]) for r in warm if int(r[0]) < (int(rows[-1][0]) + 300) // 2]
second_half = [int(r[1]) for r in warm if int(r[0]) >= (int(rows[-1][0]) + 300) // 2]
mins = [l.rstrip("\n").split("\t") for l in open(out + "/minutes.tsv")][1:]
p99 = sorted(float(m[3]) for m in mins)
print("samples: %d (every 10 s), after the 5-minute warm-up: %d" % (len(rows), len(warm)))
print("resident memory after warm-up: %.1f to %.1f MiB (spread %.1f MiB); first half max %.1f, second half max %.1f"
      % (rss[0] / 1024, rss[1] / 1024, (rss[1] - rss[0]) / 1024,
         max(first_half or [0]) / 1024, max(second_half or [0]) / 1024))
print("open fds after warm-up: %d to %d; threads: %d to %d; client connections: %d to %d"
      % (fds + thr + conns))
if p99:
    print("keep-alive p99 per minute: median %.2f ms, min %.2f, max %.2f (p50 median %.2f ms)"
          % (p99[len(p99) // 2], p99[0], p99[-1], sorted(float(m[2]) for m in mins)[len(mins) // 2]))
    print("keep-alive errors (wrk, all minutes): %d; requests/s median %s"
          % (sum(int(m[4]) for m in mins), sorted(float(m[1]) for m in mins)[len(mins) // 2]))
def wrk_errors(f):
    t = open(f).read()
    e = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", t))
    n = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    total = re.search(r"(\d+) requests in", t)
    return (int(total.group(1)) if total else 0, e, int(n.group(1)) if n else 0)
for name in ("close", "https"):
    print("wrk %-6s requests %d, socket errors %d, non-2xx %d" % ((name,) + wrk_errors("%s/wrk-%s.txt" % (out, name))))
h2 = open(out + "/h2load.txt").read()
m = re.search(r"requests: .*", h2)
print("h2load: %s" % (m.group(0) if m else "no report"))
print("websocket: %s" % open(out + "/ws.txt").read().strip().replace("\n", "; "))
print("admin writes failed: %d" % admin_failed)
PY
echo "plot: $OUT/soak-memory.png" >&2
