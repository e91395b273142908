"""Holds N idle keep-alive connections to a proxy, each after one request, for memory figures.

Usage: idle_conns.py PORT N
Prints "READY <n>" once N connections each got one full response and stay open, then waits
for a line (or end) on stdin and closes them. Traffic to 127.0.0.1 only."""
import asyncio
import sys


async def one(port, held, sem):
    async with sem:
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /hello HTTP/1.1\r\nHost: x\r\n\r\n")
        await w.drain()
        head = await r.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        await r.readexactly(length)
        held.append(w)


async def main():
    port, n = int(sys.argv[1]), int(sys.argv[2])
    held = []
    sem = asyncio.Semaphore(200)
    await asyncio.gather(*(one(port, held, sem) for _ in range(n)))
    print(f"READY {len(held)}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)
    for w in held:
        w.close()


asyncio.run(main())
