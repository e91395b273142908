#!/usr/bin/env bash
# Memory and start-up time per number of routes (issue 12): for 1,000, 10,000 and 100,000
# simple routes (`/r{i}/*` to one upstream, one resource per line as Sluice writes its file):
# the time from `sluice run` to its port accepting, its resident memory once settled, its peak
# (VmHWM), and the peak of `sluice validate` on the same file (/usr/bin/time). Settled: sampled
# each second from 12 s after the start until three samples agree within 1% (at most 40 s);
# the allocator (jemalloc) hands pages freed by the start back to the system once they have
# been unused for its decay time, 10 s (with MADV_FREE: resident memory here is less what was
# freed so, lib.sh's resident_kib), so resident memory right after the start still includes the
# parsed file.
#
#   bench/routes_memory.sh [--routes "1000 10000 100000"]
#
# One worker. Nothing is sent through the proxy; the port is only probed on 127.0.0.1. Stops
# what it started.
set -euo pipefail
COUNTS="1000 10000 100000"
while [ $# -gt 0 ]; do
  case "$1" in
    --routes) COUNTS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$(dirname "$0")/lib.sh"
bench_out routes-memory
ensure python3:python3 /usr/bin/time:time
build_sluice

echo -e "routes\tstart_ms\trss_kib\tsettled_s\tpeak_kib\tvalidate_peak_kib" > "$OUT/results.tsv"
for n in $COUNTS; do
  python3 - "$OUT/r$n.yaml" "$n" <<'PY'
import sys
path, n = sys.argv[1], int(sys.argv[2])
with open(path, "w") as f:
    f.write("listen: 127.0.0.1:9480\nworkers: 1\nadmin: {enabled: false}\nlog: {level: warn}\n")
    f.write('upstreams:\n  - {"id": "u", "nodes": {"127.0.0.1:1980": 1}}\nroutes:\n')
    for i in range(n):
        f.write(f'  - {{"id": "r{i}", "uri": "/r{i}/*", "upstream_id": "u"}}\n')
PY
  start=$(date +%s%N)
  "$SLUICE" run -c "$OUT/r$n.yaml" >"$OUT/run-$n.log" 2>&1 &
  pid=$!
  PIDS+=("$pid")
  wait_port 9480 1200
  ready=$(date +%s%N)
  rss=0; stable=0; settled=0
  while [ "$settled" -lt 40 ] && { [ "$stable" -lt 3 ] || [ "$settled" -lt 12 ]; }; do
    sleep 1; settled=$((settled + 1))
    now=$(resident_kib "$pid")
    if [ $(( (now - rss) * 100 )) -le "$now" ] && [ $(( (rss - now) * 100 )) -le "$now" ]; then
      stable=$((stable + 1))
    else
      stable=1
    fi
    rss=$now
  done
  hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status")
  kill "$pid"; wait "$pid" 2>/dev/null || true
  vpeak=$(/usr/bin/time -f %M "$SLUICE" validate -c "$OUT/r$n.yaml" 2>&1 >/dev/null | tail -1)
  echo -e "$n\t$(( (ready - start) / 1000000 ))\t$rss\t$settled\t$hwm\t$vpeak" >> "$OUT/results.tsv"
  echo "$n routes: started in $(( (ready - start) / 1000000 )) ms, resident $((rss / 1024)) MiB (settled in ${settled} s), peak $((hwm / 1024)) MiB; validate peak $((vpeak / 1024)) MiB" >&2
done
echo "results in $OUT" >&2
