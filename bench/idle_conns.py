"""Holds N idle keep-alive connections to a proxy, each after one request, for memory figures.

Usage: idle_conns.py PORT N [MODE]
       idle_conns.py --ws-origin PORT
MODE: http1 (default, plain HTTP/1.1), tls (HTTP/1.1 over TLS), h2 (HTTP/2 over TLS, ALPN h2:
one stream, then the connection stays open with no stream), ws (a WebSocket upgrade of
GET /ws, one message echoed, then the tunnel stays open). Certificates are not verified (a
self-signed one on 127.0.0.1). Prints "READY <n>" once N connections each got one full
response and stay open, then waits for a line (or end) on stdin and closes them.
--ws-origin serves the WebSocket echo the ws mode goes through the proxy to (every message
back, as it came). Traffic to 127.0.0.1 only."""
import asyncio
import base64
import hashlib
import ssl
import struct
import sys


def tls_context(alpn):
    ctx = ssl.create_default_context()
    ctx.check_hostname = False
    ctx.verify_mode = ssl.CERT_NONE
    ctx.set_alpn_protocols([alpn])
    return ctx


async def http1(r, w):
    w.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    await r.readexactly(length)


def frame(kind, flags, stream, payload=b""):
    return struct.pack(">I", len(payload))[1:] + bytes([kind, flags]) + struct.pack(">I", stream) + payload


async def h2(r, w):
    # HPACK, static table only: :method GET (2), :scheme https (7), :path (4) and
    # :authority (1) as literals without indexing.
    block = b"\x82\x87" + b"\x04\x06/hello" + b"\x01\x01x"
    w.write(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + frame(4, 0, 0) + frame(1, 0x5, 1, block))
    await w.drain()
    while True:
        head = await r.readexactly(9)
        length = int.from_bytes(head[:3], "big")
        kind, flags = head[3], head[4]
        stream = int.from_bytes(head[5:9], "big") & 0x7FFFFFFF
        payload = await r.readexactly(length)
        if kind == 4 and not flags & 1:
            w.write(frame(4, 1, 0))  # SETTINGS ACK
        if kind == 0 and stream == 1 and length:
            # Give the window back, as a client that keeps the connection does.
            inc = struct.pack(">I", length)
            w.write(frame(8, 0, 0, inc) + frame(8, 0, 1, inc))
        if stream == 1 and kind in (0, 1) and flags & 1:
            await w.drain()
            return
        if kind == 7:
            raise RuntimeError("GOAWAY")


WS_KEY = b"dGhlIHNhbXBsZSBub25jZQ=="


async def ws(r, w):
    w.write(b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            b"Sec-WebSocket-Key: " + WS_KEY + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 101"):
        raise RuntimeError(f"no upgrade: {head[:40]!r}")
    mask = b"\x01\x02\x03\x04"
    payload = b"hi"
    w.write(b"\x81" + bytes([0x80 | len(payload)]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
    await w.drain()
    echo = await r.readexactly(2 + len(payload))
    if echo[2:] != payload:
        raise RuntimeError(f"echo {echo!r}")


async def ws_origin_conn(r, w):
    try:
        head = await r.readuntil(b"\r\n\r\n")
        key = next(l.split(b":", 1)[1].strip() for l in head.split(b"\r\n")
                   if l.lower().startswith(b"sec-websocket-key:"))
        accept = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        w.write(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                b"Sec-WebSocket-Accept: " + accept + b"\r\n\r\n")
        while True:
            first, second = await r.readexactly(2)
            length = second & 0x7F  # small messages only: this is a benchmark's echo
            mask = await r.readexactly(4) if second & 0x80 else b"\0\0\0\0"
            data = bytes(b ^ mask[i % 4] for i, b in enumerate(await r.readexactly(length)))
            w.write(bytes([first, length]) + data)
            await w.drain()
    except (asyncio.IncompleteReadError, ConnectionError, StopIteration):
        w.close()


async def ws_origin(port):
    server = await asyncio.start_server(ws_origin_conn, "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


async def one(port, held, sem, mode):
    async with sem:
        if mode == "http1":
            r, w = await asyncio.open_connection("127.0.0.1", port)
            await http1(r, w)
        elif mode == "tls":
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls_context("http/1.1"))
            await http1(r, w)
        elif mode == "ws":
            r, w = await asyncio.open_connection("127.0.0.1", port)
            await ws(r, w)
        elif mode == "h2":
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls_context("h2"))
            await h2(r, w)
        else:
            raise SystemExit(f"unknown mode {mode}")
        held.append(w)


async def main():
    if sys.argv[1] == "--ws-origin":
        await ws_origin(int(sys.argv[2]))
        return
    port, n = int(sys.argv[1]), int(sys.argv[2])
    mode = sys.argv[3] if len(sys.argv) > 3 else "http1"
    held = []
    sem = asyncio.Semaphore(200)
    await asyncio.gather(*(one(port, held, sem, mode) for _ in range(n)))
    print(f"READY {len(held)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for w in held:
        w.close()


asyncio.run(main())
