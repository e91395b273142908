#!/usr/bin/env bash
# User-space instructions per HTTP/2 stream (callgrind), for the three kinds of stream the
# gateway serves differently: a GET with no plugin (the fast path, `h2_direct.rs`), a POST with
# a 1 KiB body and a GET on a route with plugins (both carried by the engine, `h2_down.rs`).
#
#   bench/h2_streams.sh [--baseline BINARY] [--requests N]
#
# Cleartext HTTP/2 (h2c) to one worker, h2load -c16 -m10: 2,000 streams of warm-up, then N
# (20,000) counted, to the built-in origin. --baseline: the same counts for another build
# (an older commit's, kept aside), one after the other. Counts repeat from run to run where CPU
# time on this shared machine does not. Traffic to 127.0.0.1 only; stops what it started.
set -euo pipefail
set -o errtrace
trap 'echo "bench/h2_streams.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

BASELINE=
REQUESTS=20000
while [ $# -gt 0 ]; do
  case "$1" in
    --baseline) BASELINE=$(realpath "$2"); shift 2 ;;
    --requests) REQUESTS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out h2-streams
ensure h2load:nghttp2-client valgrind:valgrind
build_sluice --bin sluice

PORT=9480
cat > "$OUT/sluice.yaml" <<YAML
listen:
  - {addr: 127.0.0.1:$PORT, http2: true}
workers: 1
log: {level: warn}
admin: {enabled: false}
limits: {keepalive_requests: 1000000}
$(origin_routes 1980)
YAML
head -c 1024 /dev/zero | tr '\0' 'a' > "$OUT/body-1k"
start_origin "$SLUICE"

# count NAME BINARY PATH [h2load args]: appends "NAME instructions streams" to $OUT/counts.
count() {
  local name=$1 bin=$2 path=$3; shift 3
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$name.callgrind" \
    "$bin" run -c "$OUT/sluice.yaml" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$PORT" 6000
  h2load -n 2000 -c 16 -m 10 "$@" "http://127.0.0.1:$PORT$path" >/dev/null 2>&1
  callgrind_control -i on "$pid" >/dev/null 2>&1
  h2load -n "$REQUESTS" -c 16 -m 10 "$@" "http://127.0.0.1:$PORT$path" > "$OUT/$name.h2load"
  callgrind_control -i off "$pid" >/dev/null 2>&1
  callgrind_control -d "$pid" >/dev/null 2>&1
  kill "$pid"; wait "$pid" 2>/dev/null || true
  local ir ok
  ir=$(cat "$OUT/$name".callgrind* | awk '/^totals:/ {s += $2} END {print s}')
  ok=$(awk '/^status codes:/ {print $3}' "$OUT/$name.h2load")
  [ "$ok" = "$REQUESTS" ] || { echo "$name: $ok of $REQUESTS streams answered 2xx" >&2; exit 1; }
  echo "$name $ir $ok" >> "$OUT/counts"
  echo "$name: $((ir / ok)) instructions per stream" >&2
}

builds=(new)
[ -n "$BASELINE" ] && builds=(base new)
for b in "${builds[@]}"; do
  bin=$SLUICE; [ "$b" = base ] && bin=$BASELINE
  count "$b-get" "$bin" /hello
  count "$b-body" "$bin" /hello -d "$OUT/body-1k"
  count "$b-plugins" "$bin" /plugged
done

python3 - "$OUT/counts" > "$OUT/summary.md" <<'PY'
import sys
per = {}
for line in open(sys.argv[1]):
    name, ir, n = line.split()
    per[name] = int(ir) / int(n)
kinds = [("get", "GET, no plugins (the fast path)"), ("body", "POST with a 1 KiB body"),
         ("plugins", "GET on a route with plugins")]
base = any(k.startswith("base-") for k in per)
print("instructions per stream (callgrind, h2load -c16 -m10, h2c, one worker)\n")
print("| stream | " + ("baseline | " if base else "") + "this build |" + (" change |" if base else ""))
print("|---|" + ("---:|" if base else "") + "---:|" + ("---:|" if base else ""))
for k, label in kinds:
    new = per[f"new-{k}"]
    if base:
        old = per[f"base-{k}"]
        print(f"| {label} | {old:,.0f} | {new:,.0f} | {100 * (new / old - 1):+.1f}% |")
    else:
        print(f"| {label} | {new:,.0f} |")
PY
cat "$OUT/summary.md"
echo "raw results: $OUT"
