#!/usr/bin/env bash
# User-space instructions per streamed answer through Sluice's `ai-proxy` and through a route
# without plugins, counted by callgrind (the same count for the same binary and inputs whatever
# else the machine does, unlike the timings of bench/ai.sh).
#
#   bench/ai-callgrind.sh [--seconds S] [--events E]
#
# bench/llm-stream serves OpenAI-shaped streams of E events (3 by default) 1 ms apart, with the
# usage chunk; its client runs one stream after another for S seconds (5) per route. Sluice
# (one worker) runs under `valgrind --tool=callgrind` with instrumentation off; after a warm-up
# it is switched on for the measured run, then off; the instructions are divided by the
# streams completed. A fresh process per route.
# Traffic to 127.0.0.1 only; stops everything it started.
set -euo pipefail

SECS=5
EVENTS=3
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) SECS=$2; shift 2 ;;
    --events) EVENTS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out ai-callgrind
ensure valgrind:valgrind
build_sluice
build_llm_stream

"$LLM" serve --listen 127.0.0.1:1990 --events "$EVENTS" --interval-ms 1 >"$OUT/llm.log" 2>&1 &
PIDS+=($!)
wait_port 1990

cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
routes:
  - uri: /v1/chat/completions
    plugins:
      ai-proxy: {provider: openai-compatible, auth: {header: {Authorization: "Bearer bench"}}, override: {endpoint: "http://127.0.0.1:1990"}}
  - uri: /stream
    upstream: {nodes: {"127.0.0.1:1990": 1}}
YAML

for run in "ai-proxy /v1/chat/completions" "plain /stream"; do
  read -r name path <<<"$run"
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$name.callgrind" \
    "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/$name.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port 9080 600
  "$LLM" load --addr 127.0.0.1:9080 --path "$path" --streams 1 --seconds 2 >/dev/null
  callgrind_control -i on "$pid" >/dev/null
  "$LLM" load --addr 127.0.0.1:9080 --path "$path" --streams 1 --seconds "$SECS" > "$OUT/$name.json"
  callgrind_control -i off "$pid" >/dev/null
  callgrind_control -d "$pid" >/dev/null
  kill "$pid"; wait "$pid" 2>/dev/null || true
  ir=$(cat "$OUT/$name".callgrind* | awk '/^totals:/ {s += $2} END {print s}')
  streams=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["streams"])' "$OUT/$name.json")
  echo "$name $ir $streams" >> "$OUT/counts"
  echo "$name: $ir instructions / $streams streams = $((ir / streams)) per stream" >&2
done

awk '{per[$1] = $2 / $3} END {
  printf "| route | user-space instructions per stream |\n|---|---:|\n";
  printf "| ai-proxy | %d |\n| without plugins | %d |\n| ratio | %.2f |\n", per["ai-proxy"], per["plain"], per["ai-proxy"] / per["plain"] }' "$OUT/counts" | tee "$OUT/results.md"
echo "results in $OUT" >&2
