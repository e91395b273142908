#!/usr/bin/env bash
# Binary upgrades under load (docs/upgrade.md): SIGUSR2 N times in a row (20 by default) while
# wrk keeps connections alive, a second wrk opens a connection per request (`Connection:
# close`), a third sends POSTs, h2load runs HTTP/2 streams (prior knowledge), and a population
# of WebSocket clients (Python, stdlib) each sends a message every 50 ms and checks its echo,
# in sessions of 2 s. Reported: what each client counted, and the failures (wrk's socket
# errors and non-2xx answers, h2load's failed and errored requests, WebSocket messages not
# echoed and sessions cut); the pass condition is 0 of all of them.
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

# A WebSocket echo node (RFC 6455, unmasked server frames), on 127.0.0.1:1990.
cat > "$OUT/ws_echo.py" <<'PY'
import base64, hashlib, socket, threading
GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
def serve(c):
    try:
        head = b""
        while b"\r\n\r\n" not in head:
            d = c.recv(4096)
            if not d: return
            head += d
        key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key:")][0]
        acc = base64.b64encode(hashlib.sha1(key + GUID).digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        f = c.makefile("rb")
        while True:
            h = f.read(2)
            if len(h) < 2: return
            op, n = h[0] & 15, h[1] & 127
            if n == 126: n = int.from_bytes(f.read(2), "big")
            elif n == 127: n = int.from_bytes(f.read(8), "big")
            mask = f.read(4) if h[1] & 128 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(f.read(n)))
            if op == 8:
                c.sendall(b"\x88\x00"); return
            hdr = bytes([0x80 | op]) + (bytes([n]) if n < 126 else b"\x7e" + n.to_bytes(2, "big"))
            c.sendall(hdr + data)
    except OSError:
        pass
    finally:
        c.close()
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", 1990)); s.listen(512)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
PY
python3 "$OUT/ws_echo.py" >"$OUT/ws_echo.log" 2>&1 &
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

# WebSocket clients: sessions of 2 s, a message every 50 ms, each echo checked.
cat > "$OUT/ws_clients.py" <<'PY'
import os, socket, sys, threading, time
stop_at = time.time() + float(sys.argv[1])
clients = int(sys.argv[2])
lock = threading.Lock()
tally = {"sessions": 0, "messages": 0, "failed_sessions": 0, "lost": 0}
errors = []
def session():
    s = socket.create_connection(("127.0.0.1", 9080), timeout=10)
    s.sendall(b"GET /ws HTTP/1.1\r\nHost: a\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
              b"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n")
    head = b""
    while b"\r\n\r\n" not in head:
        d = s.recv(4096)
        if not d: raise OSError("closed before 101")
        head += d
    if not head.startswith(b"HTTP/1.1 101"): raise OSError(head.split(b"\r\n")[0].decode())
    f = s.makefile("rb")
    end = time.time() + 2
    n = 0
    while time.time() < end:
        msg = os.urandom(16).hex().encode()
        mask = os.urandom(4)
        s.sendall(bytes([0x81, 0x80 | len(msg)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(msg)))
        h = f.read(2)
        if len(h) < 2: raise OSError("closed mid-session")
        got = f.read(h[1] & 127)
        if got != msg:
            with lock: tally["lost"] += 1
        n += 1
        time.sleep(0.05)
    s.sendall(b"\x88\x80\0\0\0\0")
    f.read(2)
    s.close()
    return n
def client():
    while time.time() < stop_at:
        try:
            n = session()
            with lock: tally["sessions"] += 1; tally["messages"] += n
        except OSError as e:
            with lock:
                tally["failed_sessions"] += 1
                errors.append(str(e))
threads = [threading.Thread(target=client) for _ in range(clients)]
for t in threads: t.start()
for t in threads: t.join()
print(" ".join(f"{k}={v}" for k, v in tally.items()))
for e in errors[:10]: print("error:", e)
PY

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
h2load -c8 -m10 -D "$SECS" http://127.0.0.1:9080/hello >"$OUT/h2load.txt" 2>&1 &
W4=$!
python3 "$OUT/ws_clients.py" "$SECS" 20 >"$OUT/ws.txt" 2>&1 &
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
  echo "h2load:          $(grep '^requests:' "$OUT/h2load.txt")"
  echo "websocket:       $(cat "$OUT/ws.txt")"
  echo "processes left:  $(pgrep -c -f "sluice run -c $OUT/sluice.yaml" || true) (the last one)"
} | tee "$OUT/summary.txt"
kill -TERM "$serving" 2>/dev/null || true
