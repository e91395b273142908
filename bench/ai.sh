#!/usr/bin/env bash
# The AI gateway's streaming cost, measured: what Sluice adds to each streamed chunk and to the
# first one with 1,000 streams at once through one worker, and what 1,000 slow streams on that
# worker do to another route's latency.
#
#   bench/ai.sh [--streams N] [--seconds S] [--interval-ms I] [--proxy-cpu C] [--rounds R]
#               [--control-streams M]
#
# bench/llm-stream serves OpenAI-shaped chat completion streams (20 chunks I ms apart, each
# stamped with the time it was written) and is the load client: it keeps N streams going and
# records, for each chunk, how long after its stamp it arrived, and the time to the first chunk
# (apart for a connection's first stream and for the later ones on the kept-alive connection).
# Run straight at the server, then through Sluice's `ai-proxy` (provider openai-compatible:
# each event read for its usage, which is asked for and kept from the client), through a Sluice
# route without plugins, and through NGINX (`proxy_buffering off`), side by side. Every run
# also keeps M control streams (--control-streams, a quarter of N by default) straight to the
# server, from the same client process in the same seconds: what a run is "added" is its
# figure minus its own control streams' figure (then the median over the rounds), so that what
# the machine does to every process at that moment (this shared virtual machine stalls a CPU
# for several ms, a few times a minute) cancels out; the straight run's "added" is the
# method's own error. The CPU time the hypervisor took from the machine in each run (steal,
# /proc/stat) is reported beside. Then wrk on a plain route of the same one-worker gateway, alone and
# beside N slow streams (one chunk a second). Sluice and NGINX on CPU 0 (or C); server and
# clients on CPU 1 (with --proxy-cpu 1, every process on one CPU: no hop between CPUs).
# The four stream runs are repeated R times (3 by default), interleaved, and each figure is the
# median over the rounds: on a shared 2-core machine one run's p99 moves by a millisecond
# from one minute to the next, for the straight run as for the proxies.
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail

STREAMS=1000
SECS=20
INTERVAL=50
PCPU=0
ROUNDS=3
CONTROL=
while [ $# -gt 0 ]; do
  case "$1" in
    --streams) STREAMS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --interval-ms) INTERVAL=$2; shift 2 ;;
    --proxy-cpu) PCPU=$2; shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --control-streams) CONTROL=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

CONTROL=${CONTROL:-$((STREAMS / 4))}
source "$(dirname "$0")/lib.sh"
bench_out ai
ensure wrk:wrk python3:python3 nginx:nginx
build_sluice
build_llm_stream
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

taskset -c 1 "$LLM" serve --listen 127.0.0.1:1990 --events 20 --interval-ms "$INTERVAL" >"$OUT/llm-fast.log" 2>&1 &
PIDS+=($!)
taskset -c 1 "$LLM" serve --listen 127.0.0.1:1991 --events 30 --interval-ms 1000 >"$OUT/llm-slow.log" 2>&1 &
PIDS+=($!)
wait_port 1990
wait_port 1991

cat > "$OUT/sluice.yaml" <<YAML
$(stream_gateway_head)
$(ai_proxy_route /v1/chat/completions http://127.0.0.1:1990)
$(ai_proxy_route /slow/v1/chat/completions http://127.0.0.1:1991)
  - uri: /plain
    upstream: {nodes: {"127.0.0.1:1990": 1}}
  - uri: /stream
    upstream: {nodes: {"127.0.0.1:1990": 1}, keepalive_pool: {size: 2000}}
YAML
cat > "$OUT/nginx.conf" <<NGINX
$(nginx_head 20000)
worker_rlimit_nofile 65536;
http {
  access_log off;
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream llm { server 127.0.0.1:1990; keepalive 2000; }
$(nginx_proxy_headers)
  server {
    listen 127.0.0.1:9090;
    location / { proxy_pass http://llm; proxy_buffering off; }
  }
}
NGINX
taskset -c "$PCPU" nginx -c "$OUT/nginx.conf" >"$OUT/nginx.log" 2>&1 &
NPID=$!
PIDS+=($NPID)
wait_port 9090
taskset -c "$PCPU" "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
SPID=$!
PIDS+=($SPID)
wait_port 9080

# Warm-up: every path once with the full count of streams, so the first measured run does not
# pay alone for what a process does once (its descriptor table and buffers growing, the pools
# filling): without it the first run's time to the first chunk had a tail of 2 to 5 ms.
echo "warm-up" >&2
for p in /v1/chat/completions /stream; do
  taskset -c 1 "$LLM" load --addr 127.0.0.1:9080 --path "$p" --streams "$STREAMS" --seconds 3 >/dev/null
done
taskset -c 1 "$LLM" load --addr 127.0.0.1:9090 --streams "$STREAMS" --seconds 3 >/dev/null

# The machine's CPU time taken by the hypervisor so far (steal, in ticks, both CPUs).
stolen() { awk '/^cpu /{print $9}' /proc/stat; }
# stream_run NAME PORT PATH PID ROUND: STREAMS streams for SECS s (and CONTROL straight to the
# server), with the CPU ticks of PID (none: 0).
stream_run() {
  local name=$1 port=$2 path=$3 pid=$4 round=$5 before=0 after=0 fb=0 fa=0 sb
  echo "$name, round $round: $STREAMS streams for ${SECS}s, $CONTROL control streams" >&2
  [ "$pid" != 0 ] && before=$(cpu_tree "$pid") && fb=$(awk '{print $10}' "/proc/$pid/stat")
  sb=$(stolen)
  taskset -c 1 "$LLM" load --addr "127.0.0.1:$port" --path "$path" --streams "$STREAMS" --seconds "$SECS" \
    --control-addr 127.0.0.1:1990 --control-streams "$CONTROL" > "$OUT/$name.$round.json"
  echo "$(($(stolen) - sb))" > "$OUT/$name.$round.steal"
  [ "$pid" != 0 ] && after=$(cpu_tree "$pid") && fa=$(awk '{print $10}' "/proc/$pid/stat")
  echo "$((after - before))" > "$OUT/$name.$round.ticks"
  # Minor page faults of the proxy (all its threads) during the run: memory it gave back
  # between runs and touches again.
  echo "$((fa - fb))" > "$OUT/$name.$round.faults"
}
for round in $(seq "$ROUNDS"); do
  stream_run direct 1990 /v1/chat/completions 0 "$round"
  stream_run ai-proxy 9080 /v1/chat/completions "$SPID" "$round"
  stream_run plain 9080 /stream "$SPID" "$round"
  stream_run nginx 9090 /v1/chat/completions "$NPID" "$round"
done
RSS_KB=$(awk '/VmHWM/{print $2}' "/proc/$SPID/status")

echo "plain route alone" >&2
taskset -c 1 wrk -t1 -c20 -d"${SECS}s" --latency http://127.0.0.1:9080/plain > "$OUT/wrk-alone.txt"
echo "plain route beside $STREAMS slow streams" >&2
taskset -c 1 "$LLM" load --addr 127.0.0.1:9080 --path /slow/v1/chat/completions --streams "$STREAMS" --seconds "$((SECS + 4))" > "$OUT/slow.json" &
LOADPID=$!
sleep 3
taskset -c 1 wrk -t1 -c20 -d"${SECS}s" --latency http://127.0.0.1:9080/plain > "$OUT/wrk-beside.txt"
wait "$LOADPID"

python3 - "$OUT" "$STREAMS" "$HZ" "$RSS_KB" "$INTERVAL" "$ROUNDS" "$CONTROL" "$PCPU" <<'PY' | tee "$OUT/results.md"
import json, re, statistics, sys
out, streams, hz, rss, interval, rounds, control, pcpu = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], int(sys.argv[6]), int(sys.argv[7]), sys.argv[8]
runs = [("straight to the server", "direct"), ("Sluice, ai-proxy", "ai-proxy"),
        ("Sluice, route without plugins", "plain"), ("NGINX, proxy_buffering off", "nginx")]
def load(k):
    return [json.load(open(f"{out}/{k}.{i}.json")) for i in range(1, rounds + 1)]
def median_run(k):
    xs = load(k)
    m = {f: statistics.median(x[f] for x in xs) for f in xs[0] if f.endswith("_us")}
    # What a run adds: its figure less its own control streams', the median over the rounds.
    m.update({"added_" + f: statistics.median(x[f] - x["control"][f] for x in xs) for f in xs[0] if f.endswith("_us")})
    m.update({"control_" + f: statistics.median(x["control"][f] for x in xs) for f in xs[0] if f.endswith("_us")})
    m["chunks"] = sum(x["chunks"] for x in xs)
    m["errors"] = sum(x["errors"] + x["control"]["errors"] for x in xs)
    return m
r = {k: median_run(k) for _, k in runs}
ticks = {k: sum(int(open(f"{out}/{k}.{i}.ticks").read()) for i in range(1, rounds + 1)) for _, k in runs}
faults = {k: statistics.median(int(open(f"{out}/{k}.{i}.faults").read()) for i in range(1, rounds + 1)) for _, k in runs}
steal = {k: [int(open(f"{out}/{k}.{i}.steal").read()) * 1000 // hz for i in range(1, rounds + 1)] for _, k in runs}
slow = json.load(open(f"{out}/slow.json"))
def ms(us): return f"{us / 1000:.2f}"
where = "every process on CPU 1" if pcpu == "1" else f"the proxy on CPU {pcpu}, server and clients on CPU 1"
print(f"## {streams} streams at once, a chunk every {interval} ms each, one worker ({where}); {control} control streams straight to the server in every run; medians over {rounds} interleaved rounds\n")
print("| | chunks | chunk delay p50 | p99 | p99.9 | control streams' p99 | added p50 | added p99 | first chunk p99 | control streams' | added p99 | on a new connection | on a kept-alive one | CPU per chunk | page faults | CPU stolen a round | errors |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for name, k in runs:
    x = r[k]
    cpu = f"{ticks[k] * 1e6 / hz / max(x['chunks'], 1):.1f} µs" if ticks[k] else ""
    pf = f"{faults[k]:,.0f}" if k != "direct" else ""
    a = lambda f: f"{ms(x['added_' + f])} ms"
    print(f"| {name} | {x['chunks']:,} | {ms(x['delay_p50_us'])} ms | {ms(x['delay_p99_us'])} ms | {ms(x['delay_p999_us'])} ms | {ms(x['control_delay_p99_us'])} ms | {a('delay_p50_us')} | {a('delay_p99_us')} | {ms(x['ttft_p99_us'])} ms | {ms(x['control_ttft_p99_us'])} ms | {a('ttft_p99_us')} | {a('ttft_new_p99_us')} | {a('ttft_reused_p99_us')} | {cpu} | {pf} | {', '.join(f'{v} ms' for v in steal[k])} | {x['errors']} |")
print(f"\nSluice's peak resident memory: {rss / 1024:.1f} MiB. \"Added\" is a run's figure less that of its own control streams (straight to the server, from the same client, in the same seconds), the median over the rounds; the straight run's is the method's own error. Chunks and errors are summed over the rounds (errors of the control streams included); CPU per chunk is the proxy's (user and system) over the rounds, divided by the chunks delivered through it; page faults are the proxy's minor faults in a run; CPU stolen is the machine's steal time (/proc/stat, both CPUs) in each round's run; the rest are the median of the rounds' figures. The first chunk is timed from the request's write; a connection's first stream (opened with the run, its streams spread over the first second) is counted apart from the later ones on the same kept-alive connection.\n")
def wrk(path):
    t = open(path).read()
    def lat(p):
        m = re.search(rf"^\s+{p}%\s+([\d.]+)(us|ms|s)\s*$", t, re.M)
        v, u = float(m.group(1)), m.group(2)
        return v / 1000 if u == "us" else v * 1000 if u == "s" else v
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", t).group(1))
    errs = sum(int(x) for x in re.findall(r"(?:connect|read|write|timeout) (\d+)", t))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", t)
    return rps, lat(50), lat(99), errs + (int(non2xx.group(1)) if non2xx else 0)
print(f"## Another route on the same worker, beside {streams} slow streams (a chunk a second)\n")
print("| plain route (wrk, 20 connections) | req/s | p50 | p99 | errors |")
print("|---|---:|---:|---:|---:|")
for name, f in (("alone", "wrk-alone.txt"), (f"beside {streams} slow streams", "wrk-beside.txt")):
    rps, p50, p99, e = wrk(f"{out}/{f}")
    print(f"| {name} | {rps:,.0f} | {p50:.2f} ms | {p99:.2f} ms | {e} |")
print(f"\nSlow streams meanwhile: {slow['streams']:,} completed, {slow['chunks']:,} chunks, chunk delay p99 {ms(slow['delay_p99_us'])} ms, {slow['errors']} errors.")
PY
echo "results in $OUT" >&2
