#!/usr/bin/env python3
"""The driver of bench/cluster.sh: runs its scenarios from the hub namespace against the
cluster the script built, and writes their figures (Markdown) and plots (SVG) to its output
directory. Standard library only. Every address is inside the script's namespaces.

    cluster.py OUT NODES CHANGES KEY SCENARIO...

Scenarios: convergence, partition, etcd, redis, upgrade (see bench/cluster.sh).
"""

import http.client
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time

OUT, NODES, CHANGES, KEY = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
SCENARIOS = sys.argv[5:]
ADDRS = [f"10.77.0.2{i}" for i in range(1, NODES + 1)]
ETCD = [f"10.77.0.1{i}" for i in range(1, 4)]
REDIS = [f"10.77.0.3{i}" for i in range(1, 4)]
LB = "10.77.0.5"
RUN = int(time.time())
report = open(os.path.join(OUT, "results.md"), "a")


def say(line=""):
    print(line)
    report.write(line + "\n")
    report.flush()


def pct(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]


def netns(ns, *cmd, check=True):
    return subprocess.run(["ip", "netns", "exec", ns, *cmd], check=check,
                          capture_output=True, text=True)


class Http:
    """One keep-alive connection; a request that fails is tried once more on a new one."""

    def __init__(self, host, port, timeout=2.0, retry=True):
        self.host, self.port, self.timeout = host, port, timeout
        self.tries = 2 if retry else 1
        self.c = None

    def request(self, method, path, body=None, headers=None):
        """(status, body); status 0 when no answer came."""
        for attempt in range(self.tries):
            try:
                if self.c is None:
                    self.c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
                self.c.request(method, path, body, headers or {})
                r = self.c.getresponse()
                data = r.read()
                return r.status, data
            except (http.client.HTTPException, OSError) as e:
                if self.c is not None:
                    self.c.close()
                self.c = None
                if attempt == self.tries - 1:
                    return 0, str(e).encode()
        return 0, b""


def admin_put(conn, kind, rid, obj):
    return conn.request("PUT", f"/apisix/admin/{kind}/{rid}", json.dumps(obj),
                        {"X-API-KEY": KEY, "Content-Type": "application/json"})


def mock_route(path):
    return {"uri": path, "plugins": {"mocking": {"response_example": "ok"}}}


def wait_served(conns, path, deadline_s=30.0, status=200):
    """Polls every node (dict addr -> Http) every ms until each answers `status` on `path`;
    returns {addr: ms from now} (None for the nodes that did not within the deadline)."""
    t0 = time.perf_counter()
    got = {a: None for a in conns}
    while any(v is None for v in got.values()):
        for a, c in conns.items():
            if got[a] is None and c.request("GET", path)[0] == status:
                got[a] = (time.perf_counter() - t0) * 1000
        if time.perf_counter() - t0 > deadline_s:
            break
        time.sleep(0.001)
    return got


# --- plots: hand-written SVG, no plotting library on the machine -----------------------------

def svg_plot(path, title, series, events, xlabel, ylabel, ymax=None, ylabels=None):
    """series: [(label, colour, [(x, y)], 'line'|'dots')]; events: [(x, label)]; ylabels:
    {y: text} in place of the numbers on the y axis."""
    W, H, L, R, T, B = 900, 380, 150, 20, 60, 50
    xs = [x for _, _, pts, _ in series for x, _ in pts] + [x for x, _ in events]
    ys = [y for _, _, pts, _ in series for _, y in pts]
    x0, x1 = min(xs + [0]), max(xs + [1])
    y1 = ymax if ymax is not None else max(ys + [1]) * 1.1
    sx = lambda x: L + (x - x0) / (x1 - x0 or 1) * (W - L - R)
    sy = lambda y: H - B - min(y, y1) / y1 * (H - T - B)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" font-family="sans-serif" font-size="12">',
           '<rect width="100%" height="100%" fill="white"/>',
           f'<text x="{W/2}" y="20" text-anchor="middle" font-size="14">{title}</text>',
           f'<line x1="{L}" y1="{H-B}" x2="{W-R}" y2="{H-B}" stroke="black"/>',
           f'<line x1="{L}" y1="{T}" x2="{L}" y2="{H-B}" stroke="black"/>',
           f'<text x="{W/2}" y="{H-12}" text-anchor="middle">{xlabel}</text>',
           f'<text x="16" y="{H/2}" text-anchor="middle" transform="rotate(-90 16 {H/2})">{ylabel}</text>']
    ticks = ylabels or {y1 * i / 5: f"{y1 * i / 5:.0f}" for i in range(6)}
    for y, text in ticks.items():
        out.append(f'<text x="{L-6}" y="{sy(y)+4:.1f}" text-anchor="end">{text}</text>')
        out.append(f'<line x1="{L}" y1="{sy(y):.1f}" x2="{W-R}" y2="{sy(y):.1f}" stroke="#eee"/>')
    for i in range(11):
        x = x0 + (x1 - x0) * i / 10
        out.append(f'<text x="{sx(x):.1f}" y="{H-B+16}" text-anchor="middle">{x:.0f}</text>')
    for x, label in events:
        out.append(f'<line x1="{sx(x):.1f}" y1="{T}" x2="{sx(x):.1f}" y2="{H-B}" stroke="#999" stroke-dasharray="4 3"/>')
        out.append(f'<text x="{sx(x)+3:.1f}" y="{T+12}" fill="#555">{label}</text>')
    for k, (label, colour, pts, kind) in enumerate(series):
        if kind == "line" and pts:
            d = " ".join(f"{sx(x):.1f},{sy(y):.1f}" for x, y in pts)
            out.append(f'<polyline points="{d}" fill="none" stroke="{colour}" stroke-width="1.5"/>')
        else:
            out += [f'<circle cx="{sx(x):.1f}" cy="{sy(y):.1f}" r="2.5" fill="{colour}"/>' for x, y in pts]
        # The legend in one row between the title and the plot.
        lx = L + sum(len(l) * 7 + 40 for l, _, _, _ in series[:k])
        out.append(f'<rect x="{lx}" y="{T-24}" width="10" height="10" fill="{colour}"/>')
        out.append(f'<text x="{lx+15}" y="{T-15}">{label}</text>')
    out.append("</svg>")
    with open(os.path.join(OUT, path), "w") as f:
        f.write("\n".join(out))


# --- scenarios ---------------------------------------------------------------------------

def convergence():
    conns = {a: Http(a, 9080) for a in ADDRS}
    admin = Http(ADDRS[0], 9180, timeout=5)
    converge, writes, per_node = [], [], {a: [] for a in ADDRS}
    for i in range(CHANGES):
        path = f"/c{RUN}-{i}"
        t0 = time.perf_counter()
        s, body = admin_put(admin, "routes", f"c{RUN}-{i}", mock_route(path))
        writes.append((time.perf_counter() - t0) * 1000)
        if s not in (200, 201):
            sys.exit(f"PUT {path}: {s} {body[:200]}")
        got = wait_served(conns, path, 10)
        if any(v is None for v in got.values()):
            sys.exit(f"{path}: not served by every node after 10 s: {got}")
        done = max(got.values()) + writes[-1]
        converge.append(done)
        for a, v in got.items():
            per_node[a].append(v + writes[-1])
    say(f"## One admin change until every node serves it ({NODES} nodes, 3 etcd members, {CHANGES} changes)\n")
    say("| | p50 | p99 | max |")
    say("|---|---:|---:|---:|")
    say(f"| the admin call (PUT on node 1, written to etcd) | {pct(writes, .5):.1f} ms | {pct(writes, .99):.1f} ms | {max(writes):.1f} ms |")
    say(f"| every node serves it (from the PUT's start) | {pct(converge, .5):.1f} ms | {pct(converge, .99):.1f} ms | {max(converge):.1f} ms |")
    for a in ADDRS:
        say(f"| node {a} serves it | {pct(per_node[a], .5):.1f} ms | {pct(per_node[a], .99):.1f} ms | {max(per_node[a]):.1f} ms |")
    say("\nPolled every millisecond on every node (HTTP keep-alive from the hub namespace); the figures include the poll's own delay (about 1 ms).\n")


class Prober(threading.Thread):
    """GETs `path` on every node every `every` s, recording (t, addr, status)."""

    def __init__(self, path, every=0.02, addrs=None):
        super().__init__(daemon=True)
        self.path, self.every = path, every
        self.addrs = addrs or ADDRS
        self.log, self.stop = [], threading.Event()

    def run(self):
        # Not tried again: a failure counts.
        conns = {a: Http(a, 9080, timeout=1, retry=False) for a in self.addrs}
        while not self.stop.is_set():
            t = time.time()
            for a, c in conns.items():
                self.log.append((t, a, c.request("GET", self.path)[0]))
            time.sleep(self.every)


def readyz(addr):
    s, body = Http(addr, 9091, timeout=1).request("GET", "/readyz")
    return s, body.decode(errors="replace").strip()


def partition(seconds=30):
    victim, victim_ns = ADDRS[1], "slc-n2"
    others = [a for a in ADDRS if a != victim]
    admin = Http(ADDRS[0], 9180, timeout=5)
    base = f"/p{RUN}-base"
    admin_put(admin, "routes", f"p{RUN}-base", mock_route(base))
    wait_served({a: Http(a, 9080) for a in ADDRS}, base, 10)
    prober = Prober(base)
    prober.start()
    rule = ["iptables", "-A", "OUTPUT", "-p", "tcp", "-m", "iprange", "--dst-range",
            f"{ETCD[0]}-{ETCD[-1]}", "--dport", "2379", "-j", "DROP"]
    t_cut = time.time()
    netns(victim_ns, *rule)
    # Until the node says it is stale.
    stale_at, ready_text = None, ""
    while time.time() - t_cut < seconds:
        s, text = readyz(victim)
        if "stale" in text:
            stale_at, ready_text = time.time() - t_cut, f"{s} {text}"
            break
        time.sleep(0.05)
    # A change during the partition: the others serve it, the victim cannot.
    time.sleep(max(0, 5 - (time.time() - t_cut)))
    during = f"/p{RUN}-during"
    s, _ = admin_put(admin, "routes", f"p{RUN}-during", mock_route(during))
    t_put = time.time()
    got = wait_served({a: Http(a, 9080) for a in others}, during, 10)
    others_ms = max(v for v in got.values() if v is not None) if all(got.values()) else None
    victim_404 = Http(victim, 9080).request("GET", during)[0]
    time.sleep(max(0, seconds - (time.time() - t_cut)))
    metric = Http(victim, 9091).request("GET", "/metrics")[1].decode(errors="replace")
    stale_metric = next((l for l in metric.splitlines() if l.startswith("sluice_config_stale_seconds ")), "")
    # Healed.
    netns(victim_ns, "iptables", "-D", *rule[2:])
    t_heal = time.time()
    caught = wait_served({victim: Http(victim, 9080)}, during, 60)[victim]
    in_step = None
    while time.time() - t_heal < 60:
        if readyz(victim)[1] == "ready":
            in_step = time.time() - t_heal
            break
        time.sleep(0.05)
    time.sleep(1)
    prober.stop.set()
    prober.join()
    fails = {a: sum(1 for t, x, s in prober.log if x == a and s != 200) for a in ADDRS}
    total = {a: sum(1 for t, x, s in prober.log if x == a) for a in ADDRS}
    say(f"## Node {victim} cut off from etcd for {seconds} s (iptables DROP of its packets to the three members)\n")
    say("| | figure |")
    say("|---|---|")
    say(f"| it says it is stale after | {stale_at:.1f} s (`/readyz`: `{ready_text}`) |" if stale_at else "| it says it is stale | **never** |")
    say(f"| `/metrics` just before the heal | `{stale_metric}` |")
    say(f"| a change made through node 1 {t_put - t_cut:.0f} s in: served by the {len(others)} others, after the PUT returned, within | {others_ms:.1f} ms |" if others_ms else "| a change during the partition | **not served by every other node** |")
    say(f"| the same change on the cut-off node during the partition | {victim_404} (its last configuration) |")
    say(f"| after the heal, the cut-off node serves the change after | {caught/1000:.1f} s |" if caught else "| after the heal | **the change never arrived** |")
    say(f"| after the heal, `/readyz` says `ready` after | {in_step:.1f} s |" if in_step else "| after the heal | **`/readyz` never said ready** |")
    for a in ADDRS:
        say(f"| requests to a route in service on {a}, every 20 ms throughout: failed | {fails[a]} of {total[a]} |")
    say()


def leader():
    """(member index of the leader, {index: member_id}) from /v3/maintenance/status."""
    ids, lead = {}, None
    for i, ip in enumerate(ETCD):
        s, body = Http(ip, 2379, timeout=1).request("POST", "/v3/maintenance/status", "{}")
        if s == 200:
            v = json.loads(body)
            ids[i] = v["header"]["member_id"]
            lead = v.get("leader")
    for i, m in ids.items():
        if m == lead:
            return i
    return None


def etcd_failures(pids):
    """pids: {member index: pid}, kept up to date as members are restarted."""
    admin = Http(ADDRS[0], 9180, timeout=5)
    conns = {a: Http(a, 9080, timeout=1) for a in ADDRS}
    log, events = [], []
    t_start = time.time()
    stop = threading.Event()

    def writer():
        i = 0
        while not stop.is_set():
            path = f"/e{RUN}-{i}"
            t0 = time.perf_counter()
            s, _ = admin_put(admin, "routes", f"e{RUN}-{i}", mock_route(path))
            w = (time.perf_counter() - t0) * 1000
            conv = None
            if s in (200, 201):
                got = wait_served(conns, path, 10)
                if all(v is not None for v in got.values()):
                    conv = w + max(got.values())
            log.append((time.time() - t_start, s, w, conv))
            i += 1
            time.sleep(0.1)

    th = threading.Thread(target=writer, daemon=True)
    th.start()
    phase = 10
    time.sleep(phase)

    def kill_and_restart(i, role):
        """Member i killed, back after a phase, then a phase to settle."""
        events.append((time.time() - t_start, f"e{i+1} ({role}) killed"))
        os.kill(pids[i], signal.SIGKILL)
        time.sleep(phase)
        events.append((time.time() - t_start, f"e{i+1} back"))
        pids[i] = restart_member(i)
        time.sleep(phase)

    lead = leader()
    kill_and_restart(next(i for i in range(3) if i != lead), "follower")
    kill_and_restart(leader(), "leader")
    stop.set()
    th.join()
    bounds = [0] + [t for t, _ in events] + [time.time() - t_start]
    names = ["all three members", events[0][1], f"{events[1][1]}", events[2][1], events[3][1]]
    say(f"## etcd members killed ({NODES} nodes; a change through node 1 every 100 ms, each waited for on every node)\n")
    say("| phase | changes | refused | admin call p50 / p99 | every node serves it p50 / p99 / max |")
    say("|---|---:|---:|---:|---:|")
    for k in range(len(names)):
        rows = [r for r in log if bounds[k] <= r[0] < bounds[k + 1]]
        ok = [r for r in rows if r[3] is not None]
        bad = [r for r in rows if r[1] not in (200, 201)]
        w = [r[2] for r in ok]
        c = [r[3] for r in ok]
        say(f"| {names[k]} ({bounds[k]:.0f}-{bounds[k+1]:.0f} s) | {len(rows)} | {len(bad)} ({', '.join(sorted(set(str(r[1]) for r in bad))) or '-'}) | "
            f"{pct(w, .5):.1f} / {pct(w, .99):.1f} ms | {pct(c, .5):.1f} / {pct(c, .99):.1f} / {max(c or [float('nan')]):.1f} ms |")
    refused = [r for r in log if r[1] not in (200, 201)]
    if refused:
        say(f"\nRefused changes (time, status, call ms): {', '.join(f'{r[0]:.1f} s {r[1]} {r[2]:.0f} ms' for r in refused[:12])}")
    say()
    svg_plot("etcd-failures.svg", f"An admin change until every node serves it, etcd members killed ({NODES} nodes)",
             [("every node serves it (ms)", "#1f77b4", [(r[0], r[3]) for r in log if r[3] is not None], "dots"),
              ("refused (503)", "#d62728", [(r[0], 0) for r in log if r[1] not in (200, 201)], "dots")],
             events, "seconds", "ms", ymax=max([r[3] for r in log if r[3]] + [10]) * 1.1)
    with open(os.path.join(OUT, "etcd-failures.json"), "w") as f:
        json.dump({"log": log, "events": events}, f)


def restart_member(i):
    """Starts member i again (same data directory), returns its pid."""
    ip = ETCD[i]
    cluster = ",".join(f"e{k+1}=http://{ETCD[k]}:2380" for k in range(3))
    log = open(os.path.join(OUT, f"etcd-e{i+1}.log"), "a")
    p = subprocess.Popen(["ip", "netns", "exec", f"slc-e{i+1}", "etcd", "--name", f"e{i+1}",
                          "--data-dir", os.path.join(OUT, f"etcd-e{i+1}"),
                          "--listen-client-urls", f"http://{ip}:2379", "--advertise-client-urls", f"http://{ip}:2379",
                          "--listen-peer-urls", f"http://{ip}:2380", "--initial-advertise-peer-urls", f"http://{ip}:2380",
                          "--initial-cluster", cluster, "--initial-cluster-state", "existing",
                          "--initial-cluster-token", "slc", "--log-level", "warn"], stdout=log, stderr=log)
    with open(os.path.join(OUT, "pids"), "a") as f:
        f.write(f"{p.pid}\n")
    return p.pid


def redis_cli(ns, *args, port=6379, host=None):
    r = netns(ns, "redis-cli", "-h", host or "127.0.0.1", "-p", str(port), *args, check=False)
    return r.stdout.strip()


def burst(path, phase, total, threads=8):
    """`total` GETs of `path` with X-Phase: `phase`, spread over every node by `threads`
    threads; returns the count of each status."""
    counts, lock = {}, threading.Lock()
    per = total // threads

    def run(k):
        conns = [Http(a, 9080, timeout=2, retry=False) for a in ADDRS]
        for j in range(per):
            s = conns[(k + j) % len(conns)].request("GET", path, headers={"X-Phase": phase})[0]
            with lock:
                counts[s] = counts.get(s, 0) + 1

    ths = [threading.Thread(target=run, args=(k,)) for k in range(threads)]
    [t.start() for t in ths]
    [t.join() for t in ths]
    return counts


def redis_failover(redis_pids):
    admin = Http(ADDRS[0], 9180, timeout=5)
    sentinels = [{"host": ip, "port": 26379} for ip in REDIS]
    for rid, degrade in (("strict", False), ("degrade", True)):
        # To the node's built-in origin (`mocking` would answer before limit-count runs: its
        # priority is higher, as in APISIX).
        route = {"uri": f"/limited-{rid}", "upstream": {"nodes": {"127.0.0.1:1980": 1}}, "plugins": {
            "limit-count": {"count": 1000, "time_window": 60, "key_type": "var", "key": "http_x_phase",
                            "policy": "redis-sentinel", "redis_sentinels": sentinels,
                            "redis_master_name": "slc", "redis_timeout": 500, "rejected_code": 429,
                            "allow_degradation": degrade},
            "proxy-rewrite": {"uri": "/hello"}}}
        s, body = admin_put(admin, "routes", f"lim-{rid}-{RUN}", route)
        if s not in (200, 201):
            sys.exit(f"limit route: {s} {body[:300]}")
    wait_served({a: Http(a, 9080) for a in ADDRS}, "/limited-strict", 10)
    before = burst("/limited-strict", f"a{RUN}", 1600)
    # The master killed; requests go on (X-Phase: b, 1000 a minute: nobody over the limit).
    master = redis_cli("slc-r1", "sentinel", "get-master-addr-by-name", "slc", port=26379).split()
    t_kill = time.time()
    os.kill(redis_pids[0], signal.SIGKILL)
    timeline = []
    failed_over = None
    conns = {a: Http(a, 9080, timeout=2) for a in ADDRS}
    k = 0
    while time.time() - t_kill < 20:
        t = time.time() - t_kill
        for rid in ("strict", "degrade"):
            a = ADDRS[k % len(ADDRS)]
            s = conns[a].request("GET", f"/limited-{rid}", headers={"X-Phase": f"b{RUN}-{k}"})[0]
            timeline.append((t, rid, s))
        k += 1
        if failed_over is None and k % 10 == 0:
            now = redis_cli("slc-r2", "sentinel", "get-master-addr-by-name", "slc", port=26379).split()
            if now and now[0] != master[0]:
                failed_over = time.time() - t_kill
        time.sleep(0.02)
    after = burst("/limited-strict", f"c{RUN}", 1600)
    new_master = redis_cli("slc-r2", "sentinel", "get-master-addr-by-name", "slc", port=26379).split()
    say(f"## Redis with three Sentinels: the master killed ({NODES} nodes, limit-count 1,000 a minute, policy redis-sentinel)\n")
    ok_b = lambda c: c.get(200, 0)
    over = lambda c: (ok_b(c) - 1000) / 10
    say("| | 200 | 429 | other | overshoot |")
    say("|---|---:|---:|---:|---:|")
    for name, c in ((f"before: 1,600 requests, one key, across {NODES} nodes", before), (f"after the fail-over: 1,600 more, a new key", after)):
        other = sum(v for s, v in c.items() if s not in (200, 429))
        say(f"| {name} | {c.get(200, 0)} | {c.get(429, 0)} | {other} | {over(c):+.1f}% |")
    say(f"\nMaster {master[0] if master else '?'} killed; the Sentinels named {new_master[0] if new_master else '?'} after "
        + (f"{failed_over:.1f} s." if failed_over else "more than 20 s."))
    say("\nMeanwhile (a request every 20 ms to each route, a new key each: never over the limit), by second:\n")
    say("| second | `allow_degradation: false` | `allow_degradation: true` |")
    say("|---:|---|---|")
    secs = int(max(t for t, _, _ in timeline)) + 1
    for sec in range(secs):
        cell = []
        for rid in ("strict", "degrade"):
            c = {}
            for t, r, s in timeline:
                if r == rid and sec <= t < sec + 1:
                    c[s] = c.get(s, 0) + 1
            cell.append(", ".join(f"{v}× {s}" for s, v in sorted(c.items())))
        say(f"| {sec} | {cell[0]} | {cell[1]} |")
    say()
    with open(os.path.join(OUT, "redis-failover.json"), "w") as f:
        json.dump({"timeline": timeline, "failed_over": failed_over}, f)
    svg_plot("redis-failover.svg", "Answers while the Redis master is killed (limit-count, policy redis-sentinel)",
             [("200", "#2ca02c", [(t, 1 if r == "strict" else 2) for t, r, s in timeline if s == 200], "dots"),
              ("503 (Redis unreachable)", "#d62728", [(t, 1 if r == "strict" else 2) for t, r, s in timeline if s != 200], "dots")],
             [(0, "master killed")] + ([(failed_over, "new master named")] if failed_over else []),
             "seconds after the kill", "", ymax=3,
             ylabels={1: "allow_degradation: false", 2: "allow_degradation: true"})


def gateways(i):
    """The pids of the `sluice run` processes in node i's namespace."""
    out = subprocess.run(["ip", "netns", "pids", f"slc-n{i}"], capture_output=True, text=True).stdout.split()
    pids = []
    for p in out:
        try:
            argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[1] == b"run":
            pids.append(int(p))
    return pids


def haproxy_stats():
    """The backend's counters from HAProxy's stats socket: retries, redispatches, connection
    and response errors."""
    s = socket.socket(socket.AF_UNIX)
    s.connect(os.path.join(OUT, "haproxy.sock"))
    s.sendall(b"show stat\n")
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    s.close()
    lines = data.decode().splitlines()
    cols = lines[0].lstrip("# ").split(",")
    for l in lines[1:]:
        row = dict(zip(cols, l.split(",")))
        if row.get("pxname") == "sluice" and row.get("svname") == "BACKEND":
            return {k: int(row.get(k) or 0) for k in ("wretr", "wredis", "econ", "eresp", "hrsp_5xx")}
    return {}


def upgrade():
    """Every node replaced in turn (USR2, the same binary) while wrk sends through HAProxy."""
    node_pid = {i: gateways(i) for i in range(1, NODES + 1)}
    secs = NODES * 5 + 6
    wrk = subprocess.Popen(["wrk", "-t2", "-c64", f"-d{secs}s", "--latency", f"http://{LB}/hello"],
                           stdout=subprocess.PIPE, text=True)
    time.sleep(3)
    took = []
    for i in range(1, NODES + 1):
        old = node_pid[i][0]
        t0 = time.time()
        os.kill(old, signal.SIGUSR2)
        while os.path.exists(f"/proc/{old}") and open(f"/proc/{old}/stat").read().split()[2] != "Z":
            if time.time() - t0 > 30:
                sys.exit(f"node {i}: the old process {old} did not exit within 30 s")
            time.sleep(0.05)
        took.append(time.time() - t0)
        time.sleep(max(0, 5 - (time.time() - t0)))
    out = wrk.communicate()[0]
    hs = haproxy_stats()
    with open(os.path.join(OUT, "upgrade-wrk.txt"), "w") as f:
        f.write(out)
    reqs = next((l.split()[0] for l in out.splitlines() if "requests in" in l), "?")
    non2xx = next((l.split(":")[1].strip() for l in out.splitlines() if "Non-2xx" in l), "0")
    errors = next((l.split(":", 1)[1].strip() for l in out.splitlines() if "Socket errors" in l), "none")
    new_pids = {i: gateways(i) for i in range(1, NODES + 1)}
    replaced = sum(1 for i in node_pid if new_pids[i] and new_pids[i][0] != node_pid[i][0])
    say(f"## A rolling binary upgrade behind HAProxy ({NODES} nodes, `kill -USR2` one after another, wrk -c64 through HAProxy for {secs} s)\n")
    say("| | figure |")
    say("|---|---|")
    say(f"| requests | {reqs} |")
    say(f"| non-2xx answers | {non2xx} |")
    say(f"| socket errors (wrk) | {errors} |")
    say(f"| HAProxy: requests it retried, sent to another node, connection errors, response errors, 5xx from the nodes | {hs.get('wretr')}, {hs.get('wredis')}, {hs.get('econ')}, {hs.get('eresp')}, {hs.get('hrsp_5xx')} |")
    say(f"| nodes whose process was replaced | {replaced} of {NODES} |")
    say(f"| USR2 until the old process exited, per node | {', '.join(f'{t:.1f} s' for t in took)} |")
    say()


def hello_route():
    """The route the upgrade's load goes to: the built-in origin of each node."""
    admin = Http(ADDRS[0], 9180, timeout=5)
    s, body = admin_put(admin, "routes", "hello", {"uri": "/hello", "upstream": {"nodes": {"127.0.0.1:1980": 1}}})
    if s not in (200, 201):
        sys.exit(f"hello route: {s} {body[:300]}")
    wait_served({a: Http(a, 9080) for a in ADDRS}, "/hello", 10)


pids = {}
if "upgrade" in SCENARIOS:
    hello_route()
if os.path.exists(os.path.join(OUT, "etcd-pids")):
    pids = {i: int(p) for i, p in enumerate(open(os.path.join(OUT, "etcd-pids")).read().split())}
redis_pids = [int(p) for p in open(os.path.join(OUT, "redis-pids")).read().split()] if os.path.exists(os.path.join(OUT, "redis-pids")) else []
for s in SCENARIOS:
    print(f"scenario {s}", file=sys.stderr)
    {"convergence": convergence, "partition": partition, "etcd": lambda: etcd_failures(pids),
     "redis": lambda: redis_failover(redis_pids), "upgrade": upgrade}[s]()
