#!/usr/bin/env python3
# WebSocket clients for the benchmarks (stdlib only): CLIENTS clients, each opening sessions of
# 2 s on ws://127.0.0.1:PORT/ws one after another until SECONDS have passed, a message every
# 50 ms, each echo checked. Prints the tally (sessions, messages, failed sessions, echoes lost)
# and the first errors:
#   bench/ws_clients.py SECONDS CLIENTS [PORT]     (9080 by default)
import os, socket, sys, threading, time
stop_at = time.time() + float(sys.argv[1])
clients = int(sys.argv[2])
port = int(sys.argv[3]) if len(sys.argv) > 3 else 9080
lock = threading.Lock()
tally = {"sessions": 0, "messages": 0, "failed_sessions": 0, "lost": 0}
errors = []
def session():
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
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
