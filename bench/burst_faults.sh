#!/usr/bin/env bash
# Memory after an idle spell (issue 28): the page faults of a burst that comes after the gateway
# sat idle, and what the gateway keeps meanwhile. One worker; bench/llm-stream serves streams (20
# chunks 200 ms apart) and is the client. After a warm-up of every path, for each run: IDLE s
# idle, then 1,000 streams for 10 s through `ai-proxy`, then through a route without plugins;
# the gateway's minor page faults during each run and its resident memory (Rss, and LazyFree:
# pages handed back with MADV_FREE, which the kernel takes whenever it needs memory) after the
# runs and after AFTER s more idle. Every process on CPU 1, as `bench/ai.sh --proxy-cpu 1`.
#
#   bench/burst_faults.sh [--idle S] [--after S]
#   _RJEM_MALLOC_CONF=muzzy_decay_ms:0 bench/burst_faults.sh   # jemalloc's own default
#
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail
IDLE=25
AFTER=20
while [ $# -gt 0 ]; do
  case "$1" in
    --idle) IDLE=$2; shift 2 ;;
    --after) AFTER=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/lib.sh"
bench_out burst-faults
build_sluice
build_llm_stream
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"

taskset -c 1 "$LLM" serve --listen 127.0.0.1:1990 --events 20 --interval-ms 200 >"$OUT/llm.log" 2>&1 &
PIDS+=($!)
wait_port 1990
cat > "$OUT/sluice.yaml" <<YAML
$(stream_gateway_head)
$(ai_proxy_route /v1/chat/completions http://127.0.0.1:1990)
  - uri: /stream
    upstream: {nodes: {"127.0.0.1:1990": 1}, keepalive_pool: {size: 2000}}
YAML
taskset -c 1 "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 &
SPID=$!
PIDS+=($SPID)
wait_port 9080
memory() { awk '/^Rss:/ {r = $2} /^LazyFree:/ {l = $2} END {printf "resident %.1f MiB, of which lazily freed %.1f MiB", r / 1024, l / 1024}' "/proc/$SPID/smaps_rollup"; }

for p in /v1/chat/completions /stream; do
  taskset -c 1 "$LLM" load --addr 127.0.0.1:9080 --path "$p" --streams 1000 --seconds 3 >/dev/null
done
{
  echo "allocator settings from the environment: ${_RJEM_MALLOC_CONF:-none}"
  for run in ai-proxy plain; do
    sleep "$IDLE"
    path=/v1/chat/completions; [ "$run" = plain ] && path=/stream
    before=$(awk '{print $10}' "/proc/$SPID/stat")
    taskset -c 1 "$LLM" load --addr 127.0.0.1:9080 --path "$path" --streams 1000 --seconds 10 >"$OUT/$run.json"
    after=$(awk '{print $10}' "/proc/$SPID/stat")
    echo "$run after ${IDLE} s idle: $((after - before)) page faults"
  done
  echo "after the runs: $(memory)"
  sleep "$AFTER"
  echo "after $AFTER s more idle: $(memory)"
} | tee "$OUT/results.txt"
echo "results in $OUT" >&2
