#!/usr/bin/env bash
# Two Sluice builds side by side on scenario 1 (one route, /hello), NGINX as the reference:
# CPU per request and req/s in interleaved rounds, the order rotated every round, so that a
# change's cost is measured against the build before it in the same run.
#
#   bench/ab.sh OLD_BINARY NEW_BINARY [--rounds N] [--duration SECONDS] [--connections C]
#
# e.g. git worktree add /tmp/old HEAD~1 && (cd /tmp/old && cargo build --release) &&
#      bench/ab.sh /tmp/old/target/release/sluice target/release/sluice
# Layout as bench/run.sh: the proxy (one worker) on CPU 0, the origin and wrk on CPU 1.
# Traffic to 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/ab.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR

[ $# -ge 2 ] || { echo "usage: bench/ab.sh OLD_BINARY NEW_BINARY [--rounds N] [--duration S] [--connections C]" >&2; exit 2; }
OLD=$(realpath "$1"); NEW=$(realpath "$2"); shift 2
ROUNDS=5
DURATION=8
CONNS=50
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out ab
ensure nginx:nginx wrk:wrk python3:python3

start_origin "$NEW"
cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
admin: {enabled: false}
routes:
  - uri: /hello
    upstream: {nodes: {"127.0.0.1:1980": 1}}
YAML
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  keepalive_requests 100000;
$(nginx_hello)
}
CONF

NAMES=(old new nginx)
: > "$OUT/results.tsv"
for round in $(seq 1 "$ROUNDS"); do
  k=$(( (round - 1) % 3 ))
  for name in "${NAMES[@]:k}" "${NAMES[@]:0:k}"; do
    case "$name" in
      old) cpu_round old 9080 /hello "$OLD" run -c "$OUT/sluice.yaml" ;;
      new) cpu_round new 9080 /hello "$NEW" run -c "$OUT/sluice.yaml" ;;
      nginx) cpu_round nginx 9090 /hello "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT" ;;
    esac
  done
done
python3 - "$OUT/results.tsv" <<'PY' | tee "$OUT/results.md"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
med = {n: (statistics.median(float(r[2]) for r in rows if r[1] == n),
           statistics.median(float(r[3]) for r in rows if r[1] == n)) for n in ("old", "new", "nginx")}
print("| build | req/s | CPU µs/request | vs old | vs NGINX |")
print("|---|---:|---:|---:|---:|")
for n in ("old", "new", "nginx"):
    rps, cpu = med[n]
    print(f"| {n} | {rps:,.0f} | {cpu:.2f} | {cpu / med['old'][1]:.3f} | {cpu / med['nginx'][1]:.3f} |")
PY
echo "results in $OUT" >&2
