#!/usr/bin/env python3
# A WebSocket echo node for the benchmarks (RFC 6455, unmasked server frames, stdlib only):
#   bench/ws_echo.py [PORT]     (127.0.0.1, 1990 by default)
import base64, hashlib, socket, sys, threading
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
s.bind(("127.0.0.1", int(sys.argv[1]) if len(sys.argv) > 1 else 1990)); s.listen(512)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
