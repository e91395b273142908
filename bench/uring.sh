#!/usr/bin/env bash
# The io_uring experiment of issue 12: CPU per request of the same minimal proxy
# (bench/uring: read a request, forward it over a pooled upstream connection, read the
# response, write it back) on io_uring and on epoll, beside Sluice (tokio, epoll) and NGINX,
# in interleaved rounds. The difference between the two drivers is what the system-call layer
# alone can give; docs/benchmarks.md ("io_uring") says what was decided from it.
#
#   bench/uring.sh [--rounds N] [--duration SECONDS] [--connections C] [--path /hello]
#                  [--only "tuned epoll sluice nginx"]
#
# --path /bytes/65536 measures 64 KiB responses (NGINX proxies every path to the origin).
# Layout as bench/ab.sh: the proxy (one thread) on CPU 0, the origin and wrk on CPU 1. Needs
# io_uring (Linux 5.11 or later, not disabled by kernel.io_uring_disabled). Traffic to
# 127.0.0.1 only; stops everything it started, also on Ctrl-C.
set -euo pipefail
set -o errtrace
trap 'echo "bench/uring.sh: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
ROUNDS=5
DURATION=8
CONNS=50
URLPATH=/hello
ONLY="uring tuned epoll sluice nginx"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --duration) DURATION=$2; shift 2 ;;
    --connections) CONNS=$2; shift 2 ;;
    --path) URLPATH=$2; shift 2 ;;
    --only) ONLY=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done

source "$(dirname "$0")/lib.sh"
bench_out uring
ensure nginx:nginx wrk:wrk python3:python3
build_sluice
echo "building bench/uring (release)" >&2
(cd "$ROOT/bench/uring" && CARGO_TARGET_DIR="$ROOT/target/uring" cargo build --release -q)
PROXY="$ROOT/target/uring/release/uring-proxy"

start_origin "$SLUICE"
cat > "$OUT/sluice.yaml" <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
admin: {enabled: false}
routes:
  - uri: /*
    upstream: {nodes: {"127.0.0.1:1980": 1}}
YAML
cat > "$OUT/nginx.conf" <<CONF
$(nginx_head)
http {
  access_log off;
  keepalive_requests 100000;
$(nginx_hello 320 /)
}
CONF

read -r -a NAMES <<< "$ONLY"
: > "$OUT/results.tsv"
for round in $(seq 1 "$ROUNDS"); do
  k=$(( (round - 1) % ${#NAMES[@]} ))
  for name in "${NAMES[@]:k}" "${NAMES[@]:0:k}"; do
    case "$name" in
      uring) cpu_round uring 9070 "$URLPATH" "$PROXY" 127.0.0.1:9070 127.0.0.1:1980 uring ;;
      tuned) cpu_round tuned 9070 "$URLPATH" "$PROXY" 127.0.0.1:9070 127.0.0.1:1980 uring-tuned ;;
      epoll) cpu_round epoll 9070 "$URLPATH" "$PROXY" 127.0.0.1:9070 127.0.0.1:1980 epoll ;;
      sluice) cpu_round sluice 9080 "$URLPATH" "$SLUICE" run -c "$OUT/sluice.yaml" ;;
      nginx) cpu_round nginx 9090 "$URLPATH" "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT" ;;
    esac
  done
done
python3 - "$OUT/results.tsv" "$URLPATH" <<'PY' | tee "$OUT/results.md"
import statistics, sys
rows = [l.split("\t") for l in open(sys.argv[1]) if l.strip()]
names = [n for n in ("uring", "tuned", "epoll", "sluice", "nginx") if any(r[1] == n for r in rows)]
label = {"uring": "minimal proxy, io_uring", "tuned": "minimal proxy, io_uring single issuer, deferred task run",
         "epoll": "minimal proxy, epoll",
         "sluice": "Sluice (tokio, epoll)", "nginx": "NGINX"}
med = {n: (statistics.median(float(r[2]) for r in rows if r[1] == n),
           statistics.median(float(r[3]) for r in rows if r[1] == n),
           statistics.median(float(r[5]) for r in rows if r[1] == n)) for n in names}
print(f"GET {sys.argv[2]}")
print("| proxy | req/s | CPU µs/request | of which system | vs NGINX |")
print("|---|---:|---:|---:|---:|")
for n in names:
    rps, cpu, kernel = med[n]
    k = "-" if n == "nginx" else f"{kernel:.2f}"
    ratio = f"{cpu / med['nginx'][1]:.3f}" if "nginx" in med else "-"
    print(f"| {label[n]} | {rps:,.0f} | {cpu:.2f} | {k} | {ratio} |")
rings = [n for n in ("uring", "tuned") if n in med]
if rings and "epoll" in med:
    best = min(rings, key=lambda n: med[n][1])
    saved = med["epoll"][1] - med[best][1]
    print(f"\nThe better io_uring ring ({label[best]}) saves {saved:.2f} µs per request over "
          f"epoll in the same code ({saved / med['epoll'][1]:.0%})", end="")
    if "sluice" in med and "nginx" in med:
        print(f"; Sluice with that saving: {(med['sluice'][1] - saved) / med['nginx'][1]:.3f}x "
              "NGINX (goal 0.7x)", end="")
    print()
PY
echo "results in $OUT" >&2
