"""Holds N idle keep-alive connections to a proxy, each after one request, for memory figures.

Usage: idle_conns.py PORT N [MODE]
MODE: http1 (default, plain HTTP/1.1), tls (HTTP/1.1 over TLS), h2 (HTTP/2 over TLS, ALPN h2:
one stream, then the connection stays open with no stream). Certificates are not verified (a
self-signed one on 127.0.0.1). Prints "READY <n>" once N connections each got one full
response and stay open, then waits for a line (or end) on stdin and closes them. Traffic to
127.0.0.1 only."""
import asyncio
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


async def one(port, held, sem, mode):
    async with sem:
        if mode == "http1":
            r, w = await asyncio.open_connection("127.0.0.1", port)
            await http1(r, w)
        elif mode == "tls":
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls_context("http/1.1"))
            await http1(r, w)
        elif mode == "h2":
            r, w = await asyncio.open_connection("127.0.0.1", port, ssl=tls_context("h2"))
            await h2(r, w)
        else:
            raise SystemExit(f"unknown mode {mode}")
        held.append(w)


async def main():
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
