"""SIGKILLs a process, then counts the connection attempts that fail on this host (the kernel's
TcpAttemptFails: on loopback, each connect to the dead node's closed port is one), sampled
every 20 ms for SECONDS. Prints a JSON summary: attempts in all, in the first second, the
time of the last attempt of the first burst (how long until the proxy stopped trying the dead
node), and the times of later attempts (periodic re-tries).
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
first = sum(n for t, n in events if t < 1.0)
# The first burst ends at the first gap of more than 500 ms without a failed attempt.
burst_end = 0.0
for t, _ in events:
    if t - burst_end > 0.5 and burst_end > 0:
        break
    burst_end = t
later = [t for t, _ in events if t > burst_end]
print(json.dumps({
    "attempts": total,
    "first_second": first,
    "stopped_trying_after_s": burst_end,
    "later_attempts_at_s": later[:20],
}))
