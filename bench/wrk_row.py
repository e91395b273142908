"""One row of figures from a wrk --latency report: req/s, p50 ms, p99 ms, errors (non-2xx and
socket errors), CPU µs per request (from the proxy's CPU ticks over the run). Tab-separated.
Usage: wrk_row.py FILE TICKS HZ"""
import re
import sys

text = open(sys.argv[1]).read()
ticks, hz = int(sys.argv[2]), int(sys.argv[3])


def ms(v):
    n, u = re.match(r"([\d.]+)(us|ms|s)", v).groups()
    return float(n) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[u]


def pct(p):
    # Anchored to the latency-distribution lines: "87.50%" also appears in the stdev column.
    m = re.search(rf"^\s+{p}%\s+(\S+)", text, re.M)
    return ms(m.group(1)) if m else 0.0


reqs = int(re.search(r"(\d+) requests in", text).group(1))
rps = float(re.search(r"Requests/sec:\s+([\d.]+)", text).group(1))
errors = 0
m = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
if m:
    errors += int(m.group(1))
m = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
if m:
    errors += sum(int(x) for x in m.groups())
cpu_us = ticks / hz * 1e6 / max(reqs, 1)
print(f"{rps:.0f}\t{pct(50):.3f}\t{pct(99):.3f}\t{errors}\t{cpu_us:.2f}")
