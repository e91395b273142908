"""SIGKILLs a process, then counts the connection attempts that fail on this host (the kernel's
TcpAttemptFails: on loopback, each connect to the dead node's closed port is one), sampled
every 20 ms for SECONDS. Prints a JSON summary: attempts in all, in the first second and the
time of the last one in it (how long the proxy went on trying the dead node), the times of
later attempts (periodic re-tries), and every sample that changed.
Usage: failover_probe.py PID SECONDS"""
import json
import os
import signal
import sys
import time


def attempt_fails():
    with open("/proc/net/snmp") as f:
        lines = [l.split() for l in f if l.startswith("Tcp:")]
    names, values = lines[0], lines[1]
    return int(values[names.index("AttemptFails")])


pid, seconds = int(sys.argv[1]), float(sys.argv[2])
before = attempt_fails()
t0 = time.monotonic()
os.kill(pid, signal.SIGKILL)
last = before
events = []  # (seconds after the kill, new failed attempts)
while (now := time.monotonic()) - t0 < seconds:
    v = attempt_fails()
    if v != last:
        events.append((round(now - t0, 3), v - last))
        last = v
    time.sleep(0.02)
total = last - before
# The first second: the requests in flight at the kill and the retries they cause; the time of
# the last attempt in it is how long the proxy went on trying the dead node. Later attempts
# are re-tries (NGINX after fail_timeout, Sluice's active health probes).
first = [(t, n) for t, n in events if t < 1.0]
print(json.dumps({
    "attempts": total,
    "first_second": sum(n for _, n in first),
    "stopped_trying_after_s": first[-1][0] if first else 0.0,
    "later_attempts_at_s": [t for t, _ in events if t >= 1.0][:20],
    "events": events,
}))
