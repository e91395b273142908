#!/usr/bin/env python3
"""Reconnects to a TLS server N times with Python's ssl module (OpenSSL), offering the session
of the previous connection each time, one `Connection: close` request per connection.

    bench/tls_resume.py PORT [N]

Prints how many reconnections resumed their session and the median time of each phase.
OpenSSL resumes a session only if the previous connection ended cleanly (with a TLS
close_notify alert), so this also checks that the server sends one. 127.0.0.1 only.
"""
import socket
import ssl
import statistics
import sys
import time

port = int(sys.argv[1])
n = int(sys.argv[2]) if len(sys.argv) > 2 else 400
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
ctx.check_hostname = False
ctx.verify_mode = ssl.CERT_NONE
session = None
resumed = 0
phases = {"connect": [], "handshake": [], "request": [], "total": []}
for i in range(n):
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    t1 = time.perf_counter()
    tls = ctx.wrap_socket(s, server_hostname="localhost", session=session)
    t2 = time.perf_counter()
    tls.sendall(b"GET /hello HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
    while tls.recv(65536):
        pass
    t3 = time.perf_counter()
    if i > 0 and tls.session_reused:
        resumed += 1
    session = tls.session
    tls.close()
    for k, v in (("connect", t1 - t0), ("handshake", t2 - t1), ("request", t3 - t2), ("total", t3 - t0)):
        phases[k].append(v * 1e6)
print(
    f"port {port}: {resumed} of {n - 1} reconnections resumed; medians "
    + " ".join(f"{k} {statistics.median(v):.0f} µs" for k, v in phases.items())
)
