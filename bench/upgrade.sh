#!/usr/bin/env bash
# Binary upgrades under load (docs/upgrade.md): SIGUSR2 N times in a row (20 by default) while
# wrk keeps connections alive, a second wrk opens a connection per request (`Connection:
# close`), a third sends POSTs, h2load runs HTTP/2 streams (prior knowledge), and a population
# of WebSocket clients (Python, stdlib) each sends a message every 50 ms and checks its echo,
# in sessions of 2 s. Reported: what each client counted, and the failures (wrk's socket
# errors and non-2xx answers, h2load's requests sent and not answered 2xx, WebSocket messages
# not echoed and sessions cut); the pass condition is 0 of all of them.
#
# h2load ends a client at the first GOAWAY it meets: over HTTP/2 it does not reconnect (only
# its HTTP/1.1 session asks for a new connection), and in duration mode it counts the request
# it could then not send as failed and errored (its log shows them with no start time). So it
# runs in rounds of 1 s, one after another, each with --log-file, and the report tells the
# requests it sent and saw fail (the failures) from those it never sent.
#
#   bench/upgrade.sh [--upgrades N] [--every SECONDS]
#
# One release build (`build_sluice`) with two workers in front of the built-in origin; the
# upgrade replaces the process with the same binary (what matters is the hand-over). Traffic
# to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/upgrade.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

UPGRADES=20
EVERY=1.5
while [ $# -gt 0 ]; do
  case "$1" in
    --upgrades) UPGRADES=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out upgrade
ensure wrk:wrk h2load:nghttp2-client python3:python3
build_sluice
start_origin "$SLUICE"

# A WebSocket echo node (bench/ws_echo.py), on 127.0.0.1:1990.
python3 "$ROOT/bench/ws_echo.py" 1990 >"$OUT/ws_echo.log" 2>&1 &
PIDS+=($!)
wait_port 1990

cat > "$OUT/sluice.yaml" <<YAML
listen:
  - {addr: 127.0.0.1:9080, http2: true}
workers: 2
admin: {enabled: false}
status: {listen: 127.0.0.1:9091}
timeouts: {drain: 10s}
routes:
  - {uri: /hello, upstream: {nodes: {"127.0.0.1:1980": 1}}}
  - {uri: /echo, upstream: {nodes: {"127.0.0.1:1980": 1}}}
  - {uri: /ws, enable_websocket: true, upstream: {nodes: {"127.0.0.1:1990": 1}}}
YAML
"$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
FIRST=$!
PIDS+=("$FIRST")
wait_port 9080


SECS=$(python3 -c "import math; print(math.ceil($UPGRADES * $EVERY + 6))")
cat > "$OUT/post.lua" <<'LUA'
wrk.method = "POST"
wrk.body = "{\"upgrade\": true}"
wrk.headers["Content-Type"] = "application/json"
LUA
wrk -t1 -c40 -d"${SECS}s" --latency http://127.0.0.1:9080/hello >"$OUT/wrk-keepalive.txt" 2>&1 &
W1=$!
wrk -t1 -c8 -d"${SECS}s" -H "Connection: close" http://127.0.0.1:9080/hello >"$OUT/wrk-close.txt" 2>&1 &
W2=$!
wrk -t1 -c8 -d"${SECS}s" -s "$OUT/post.lua" http://127.0.0.1:9080/echo >"$OUT/wrk-post.txt" 2>&1 &
W3=$!
(
  h2_end=$(($(date +%s) + SECS))
  round=0
  while [ "$(date +%s)" -lt "$h2_end" ]; do
    round=$((round + 1))
    h2load -c8 -m10 -D 1 --log-file="$OUT/h2load-$round.log" http://127.0.0.1:9080/hello \
      >"$OUT/h2load-$round.txt" 2>&1 || true
  done
) &
W4=$!
python3 "$ROOT/bench/ws_clients.py" "$SECS" 20 9080 >"$OUT/ws.txt" 2>&1 &
W5=$!
PIDS+=("$W1" "$W2" "$W3" "$W4" "$W5")

sleep 2
serving=$FIRST
for i in $(seq 1 "$UPGRADES"); do
  kill -USR2 "$serving"
  # The new process's pid, from the old one's log line.
  for _ in $(seq 1 600); do
    next=$(grep -o 'upgrade: started [^ ]* pid=[0-9]*' "$OUT/sluice.log" | sed -n "${i}p" | grep -o '[0-9]*$' || true)
    [ -n "$next" ] && grep -c 'the new process is ready and serves' "$OUT/sluice.log" | grep -qx "$i" && break
    sleep 0.05
  done
  [ -n "$next" ] || { echo "upgrade $i: no new process" >&2; tail -20 "$OUT/sluice.log" >&2; exit 1; }
  PIDS+=("$next")
  serving=$next
  echo "upgrade $i: now pid $serving" >&2
  sleep "$EVERY"
done
wait "$W1" "$W2" "$W3" "$W4" "$W5" || true

errors() { grep -E 'Socket errors|Non-2xx' "$1" || echo "none"; }
{
  echo "== $UPGRADES upgrades, one every ${EVERY}s, ${SECS}s of traffic"
  echo "wrk keep-alive:  $(grep 'requests in' "$OUT/wrk-keepalive.txt")  errors: $(errors "$OUT/wrk-keepalive.txt")"
  echo "wrk close:       $(grep 'requests in' "$OUT/wrk-close.txt")  errors: $(errors "$OUT/wrk-close.txt")"
  echo "wrk POST:        $(grep 'requests in' "$OUT/wrk-post.txt")  errors: $(errors "$OUT/wrk-post.txt")"
  echo "h2load:          $(python3 - "$OUT" <<'PY'
import glob, sys
sent = ok = failed = unsent = rounds = 0
for f in glob.glob(sys.argv[1] + "/h2load-*.log"):
    rounds += 1
    for line in open(f):
        start, status, _ = line.rstrip("\n").split("\t")
        if start == "0":
            unsent += 1
        else:
            sent += 1
            if status.startswith("2"):
                ok += 1
            else:
                failed += 1
print("%d rounds: %d requests sent, %d answered 2xx, %d failed; %d never sent (a client ended at a GOAWAY)" % (rounds, sent, ok, failed, unsent))
PY
)"
  echo "websocket:       $(cat "$OUT/ws.txt")"
  echo "processes left:  $(pgrep -c -f "sluice run -c $OUT/sluice.yaml" || true) (the last one)"
} | tee "$OUT/summary.txt"
kill -TERM "$serving" 2>/dev/null || true
