# Shared by the benchmark scripts (sourced, not run): output directory, the processes to stop,
# tools to install, waiting for ports, CPU accounting and wrk output parsing.
# Every script sends traffic to 127.0.0.1 only and stops what it started, also on Ctrl-C.

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HZ=$(getconf CLK_TCK)
PIDS=()

# bench_out NAME: creates bench/out/NAME-<timestamp> (or <timestamp> with no NAME) as $OUT.
bench_out() {
  OUT="$ROOT/bench/out/${1:+$1-}$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$OUT/nginx-tmp"
}

# Stops every process in PIDS and an NGINX master that wrote $OUT/nginx.pid.
bench_cleanup() {
  for p in "${PIDS[@]:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null || true; done
  [ -n "${OUT:-}" ] && [ -f "$OUT/nginx.pid" ] && kill "$(cat "$OUT/nginx.pid" 2>/dev/null)" 2>/dev/null || true
  wait 2>/dev/null || true
}
trap bench_cleanup EXIT INT TERM

# resident_kib PID: the process's resident memory less what it freed lazily, in KiB (LazyFree:
# pages handed back with MADV_FREE, which the kernel takes whenever it needs memory and a
# cgroup's working set leaves out; Sluice's allocator frees that way after 10 s unused, glibc's
# does not). 0 for a process gone.
resident_kib() {
  awk '/^Rss:/ {r = $2} /^LazyFree:/ {l = $2} END {print r - l}' "/proc/$1/smaps_rollup" 2>/dev/null || echo 0
}

# ensure TOOL:PACKAGE...: installs (Debian) the packages of missing tools, or of missing
# files given as /path:PACKAGE.
ensure() {
  local missing=() spec tool pkg
  for spec in "$@"; do
    tool=${spec%%:*}; pkg=${spec#*:}
    if [ "${tool#/}" != "$tool" ]; then [ -e "$tool" ] || missing+=("$pkg")
    else command -v "$tool" >/dev/null 2>&1 || missing+=("$pkg"); fi
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  echo "installing ${missing[*]}" >&2
  local sudo_cmd=""; [ "$(id -u)" -ne 0 ] && sudo_cmd=sudo
  $sudo_cmd apt-get update -qq
  $sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
}

# nginx_head [CONNECTIONS]: the main-context lines every NGINX configuration here starts with:
# one worker in the foreground, pid and error log under $OUT (10240 connections by default).
nginx_head() {
  cat <<EOF
worker_processes 1;
daemon off;
pid $OUT/nginx.pid;
error_log $OUT/nginx-error.log warn;
events { worker_connections ${1:-10240}; }
EOF
}

# nginx_hello [KEEPALIVE] [LOCATION]: the http-context lines of NGINX proxying /hello (or the
# location LOCATION, e.g. "/" for every path) on 127.0.0.1:9090 to the origin on
# 127.0.0.1:1980, keeping KEEPALIVE (320) upstream connections, as the scenario-1 scripts
# compare it.
nginx_hello() {
  cat <<EOF
  client_body_temp_path $OUT/nginx-tmp;
  proxy_temp_path $OUT/nginx-tmp;
  upstream origin { server 127.0.0.1:1980; keepalive ${1:-320}; }
$(nginx_proxy_headers)
  server {
    listen 127.0.0.1:9090;
    location ${2:-= /hello} { proxy_pass http://origin; }
  }
EOF
}

# origin_routes PORT: the YAML lines of the upstream `origin` (the built-in origin on
# 127.0.0.1:PORT) with the routes `/hello` (no plugin) and `/plugged` (proxy-rewrite and
# response-rewrite: the plugins a stream takes the engine for), as the HTTP/2 scripts use them.
origin_routes() {
  cat <<EOF
upstreams:
  - {id: origin, nodes: {"127.0.0.1:$1": 1}}
routes:
  - {id: hello, uri: /hello, upstream_id: origin}
  - id: plugged
    uri: /plugged
    upstream_id: origin
    plugins:
      proxy-rewrite: {uri: /hello, headers: {set: {X-Bench: "1"}}}
      response-rewrite: {headers: {set: {X-Served-By: bench}}}
EOF
}

# nginx_proxy_headers: the http-context lines that make NGINX do Sluice's work per request:
# HTTP/1.1 keep-alive to the upstream and the same forwarded fields.
nginx_proxy_headers() {
  cat <<'EOF'
  proxy_http_version 1.1;
  proxy_set_header Connection "";
  proxy_set_header Host $http_host;
  proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
  proxy_set_header X-Real-IP $remote_addr;
  proxy_set_header X-Forwarded-Proto $scheme;
  proxy_set_header X-Forwarded-Host $http_host;
EOF
}

# callgrind_per_request NAME PORT SECONDS CONNS COMMAND...: runs COMMAND under callgrind with
# instrumentation off, warms it with wrk, counts the instructions of a wrk run of SECONDS on
# /hello (or $CG_PATH, with the wrk options in the array CG_WRK, such as headers), and appends
# "NAME instructions requests" to $OUT/counts.
callgrind_per_request() {
  local name=$1 port=$2 secs=$3 conns=$4; shift 4
  local path=${CG_PATH:-/hello}
  local extra=("${CG_WRK[@]+"${CG_WRK[@]}"}")
  valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/$name.callgrind" "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port" 6000 # valgrind starts slowly (100,000 routes: a minute)
  # Warm-up ($CG_WARM seconds, default 3): long enough for what a large configuration does
  # once after the start (the file watcher's first re-read) to be over before counting.
  local reqs ir
  if [ -n "${CG_COUNT:-}" ]; then
    # Short counts (CG_COUNT="WARM REST N"): WARM requests, REST seconds with none, then N
    # requests counted (h2load, HTTP/1.1): what a short burst after a pause costs, the
    # gateway's once-a-second chores included in proportion.
    local warm rest n
    read -r warm rest n <<<"$CG_COUNT"
    h2load --h1 -n "$warm" -c "$conns" "${extra[@]+"${extra[@]}"}" "http://127.0.0.1:$port$path" >/dev/null
    sleep "$rest"
    callgrind_control -i on "$pid" >/dev/null
    h2load --h1 -n "$n" -c "$conns" "${extra[@]+"${extra[@]}"}" "http://127.0.0.1:$port$path" > "$OUT/$name.h2load"
    callgrind_control -i off "$pid" >/dev/null
    callgrind_control -d "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
    reqs=$(awk '/^requests:/ {print $6}' "$OUT/$name.h2load") # done: answered, any status
  else
    wrk -t1 -c"$conns" -d"${CG_WARM:-3}s" "${extra[@]+"${extra[@]}"}" "http://127.0.0.1:$port$path" >/dev/null
    callgrind_control -i on "$pid" >/dev/null
    wrk -t1 -c"$conns" -d"${secs}s" "${extra[@]+"${extra[@]}"}" "http://127.0.0.1:$port$path" > "$OUT/$name.wrk"
    callgrind_control -i off "$pid" >/dev/null
    callgrind_control -d "$pid" >/dev/null
    kill "$pid"; wait "$pid" 2>/dev/null || true
    reqs=$(awk '/requests in/ {print $1}' "$OUT/$name.wrk")
  fi
  ir=$(cat "$OUT/$name".callgrind* | awk '/^totals:/ {s += $2} END {print s}')
  echo "$name $ir $reqs" >> "$OUT/counts"
  echo "$name: $ir instructions / $reqs requests = $((ir / reqs)) per request" >&2
}

# start_origin BINARY: the built-in origin on 127.0.0.1:1980, on CPU 1 (beside wrk).
start_origin() {
  taskset -c 1 "$1" origin --listen 127.0.0.1:1980 >"$OUT/origin.log" 2>&1 &
  PIDS+=($!)
  wait_port 1980
}

# port_of PROXY: where start_proxy's proxies listen (sluice 9080, nginx 9090, haproxy 9095).
port_of() { case "$1" in sluice) echo 9080 ;; nginx) echo 9090 ;; haproxy) echo 9095 ;; esac; }

# start_proxy PROXY: starts sluice ($OUT/sluice.yaml), nginx ($OUT/nginx.conf) or haproxy
# ($OUT/haproxy.cfg) pinned to CPU 0, logging to $OUT/PROXY.log; sets STARTED to its pid
# (stopped at exit) and waits for its port.
start_proxy() {
  case "$1" in
    sluice) taskset -c 0 "$SLUICE" run -c "$OUT/sluice.yaml" >"$OUT/sluice.log" 2>&1 & ;;
    nginx) taskset -c 0 "$(command -v nginx)" -c "$OUT/nginx.conf" -p "$OUT" >"$OUT/nginx.log" 2>&1 & ;;
    haproxy) taskset -c 0 haproxy -f "$OUT/haproxy.cfg" -db >"$OUT/haproxy.log" 2>&1 & ;;
  esac
  STARTED=$!
  PIDS+=("$STARTED")
  wait_port "$(port_of "$1")"
}

# stop_proxy PID: stops a proxy started in the background, and an NGINX master that wrote
# $OUT/nginx.pid (its workers go with it).
stop_proxy() {
  kill "$1" 2>/dev/null || true
  wait "$1" 2>/dev/null || true
  if [ -f "$OUT/nginx.pid" ]; then
    kill "$(cat "$OUT/nginx.pid" 2>/dev/null)" 2>/dev/null || true
    rm -f "$OUT/nginx.pid"
  fi
}

# build_sluice [cargo args]: the release build (lto, one codegen unit) as $SLUICE.
build_sluice() {
  # SLUICE_BIN=PATH: measure that binary (another build, kept aside) instead of building.
  if [ -n "${SLUICE_BIN:-}" ]; then SLUICE=$(realpath "$SLUICE_BIN"); return 0; fi
  SLUICE="$ROOT/target/release/sluice"
  # SLUICE_PREBUILT=1: measure the binary already built (while iterating on one change).
  [ "${SLUICE_PREBUILT:-0}" = 1 ] && [ -x "$SLUICE" ] && return 0
  echo "building sluice (release)" >&2
  (cd "$ROOT" && cargo build --release -q -p sluice "$@")
}

# build_llm_stream: builds bench/llm-stream (the LLM stream server and load client) as $LLM.
build_llm_stream() {
  (cd "$ROOT/bench/llm-stream" && cargo build --release -q)
  LLM="$ROOT/bench/llm-stream/target/release/llm-stream"
}

# stream_gateway_head: the top of the one-worker sluice.yaml the streaming benchmarks run (its
# `routes:` key last; the routes follow).
stream_gateway_head() {
  cat <<YAML
listen: 127.0.0.1:9080
workers: 1
log: {level: warn}
limits: {max_connections: 20000}
routes:
YAML
}

# ai_proxy_route URI ENDPOINT: a sluice.yaml route (two-space indent, under `routes:`) through
# `ai-proxy` to an OpenAI-compatible server, as the AI benchmarks configure it.
ai_proxy_route() {
  cat <<YAML
  - uri: $1
    plugins:
      ai-proxy: {provider: openai-compatible, auth: {header: {Authorization: "Bearer bench"}}, override: {endpoint: "$2"}, keepalive_pool: 2000}
YAML
}

# wait_port PORT [TRIES]: until 127.0.0.1:PORT accepts (TRIES × 50 ms, default 20 s).
wait_port() {
  for _ in $(seq 1 "${2:-400}"); do
    # The probe runs in a subshell: nothing here may touch the script's own descriptors.
    (exec 3<>/dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0
    sleep 0.05
  done
  echo "port $1 did not open" >&2; return 1
}

# CPU ticks of a process and its children, those that exited included (a master's cutime and
# cstime count the NGINX workers a reload replaced, once reaped).
cpu_tree() {
  local main=$1 t v
  t=$(awk '{print $14 + $15 + $16 + $17}' "/proc/$main/stat")
  for c in $(pgrep -P "$main" || true); do
    # A worker may exit between the listing and the read.
    v=$(awk '{print $14 + $15}' "/proc/$c/stat" 2>/dev/null) || v=0
    t=$((t + ${v:-0}))
  done
  echo "$t"
}

# wrk_row FILE TICKS: "req/s<TAB>p50 ms<TAB>p99 ms<TAB>errors<TAB>CPU µs per request" from a
# wrk --latency report (or the same shape written by the scripts for other clients) and the
# proxy's CPU ticks over it.
wrk_row() {
  python3 "$ROOT/bench/wrk_row.py" "$1" "$2" "$HZ"
}

# cpu_round NAME PORT PATH COMMAND...: starts COMMAND (a proxy) on CPU 0, warms it with wrk
# from CPU 1, measures a wrk run of $DURATION s with $CONNS connections on PATH, and appends
# "round name req/s cpu-µs/request errors system-µs/request" ($round) to $OUT/results.tsv.
# The system part is the main process's (an NGINX worker is a child: its share is not split).
cpu_round() {
  local name=$1 port=$2 path=$3; shift 3
  taskset -c 0 "$@" >"$OUT/$name.log" 2>&1 &
  local pid=$!
  PIDS+=("$pid")
  wait_port "$port"
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s "http://127.0.0.1:$port$path" >/dev/null
  local before after sys_before sys_after rps cpu errors sys
  before=$(cpu_tree "$pid")
  sys_before=$(awk '{print $15}' "/proc/$pid/stat")
  taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" --latency "http://127.0.0.1:$port$path" > "$OUT/wrk-$round-$name.txt"
  after=$(cpu_tree "$pid")
  sys_after=$(awk '{print $15}' "/proc/$pid/stat")
  IFS=$'\t' read -r rps _ _ errors cpu < <(wrk_row "$OUT/wrk-$round-$name.txt" "$((after - before))")
  IFS=$'\t' read -r _ _ _ _ sys < <(wrk_row "$OUT/wrk-$round-$name.txt" "$((sys_after - sys_before))")
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$rps" "$cpu" "$errors" "$sys" >> "$OUT/results.tsv"
  echo "round $round $name: $rps req/s, $cpu µs CPU/request ($sys system), $errors errors" >&2
  stop_proxy "$pid"
  sleep 0.5
}

# Scenario 5 (issue 25's cost): one route with real-ip, hmac-auth and request-validation
# (header_schema), the request carrying what each needs. plugins5_routes ORIGIN_PORT prints the
# routes and consumers; plugins5_headers fills the array H5 with wrk's -H options: a real
# address, a Date and its hmac-sha256 signature (computed by Python's hmac; clock_skew is a
# day, so that long runs stay valid), and the header the schema asks for.
plugins5_routes() {
  cat <<EOF2
routes:
  - uri: /hello
    upstream:
      nodes:
        "127.0.0.1:$1": 1
      type: roundrobin
    plugins:
      real-ip: {source: http_x_real_ip, trusted_addresses: ["127.0.0.1"]}
      hmac-auth: {clock_skew: 86400}
      request-validation:
        header_schema: {type: object, required: [x-api-version], properties: {x-api-version: {type: string, pattern: "^v[0-9]+$"}}}
consumers:
  - username: bench
    plugins:
      hmac-auth: {key_id: bench-key, secret_key: bench-secret}
EOF2
}
plugins5_headers() {
  local auth date
  { read -r auth; read -r date; } < <(python3 - <<'PY'
import base64, email.utils, hashlib, hmac
date = email.utils.formatdate(usegmt=True)
sig = base64.b64encode(hmac.new(b"bench-secret", ("bench-key\ndate: " + date + "\n").encode(), hashlib.sha256).digest()).decode()
print('Signature keyId="bench-key",algorithm="hmac-sha256",headers="date",signature="%s"' % sig)
print(date)
PY
)
  H5=(-H "X-Real-IP: 203.0.113.7" -H "Date: $date" -H "Authorization: $auth" -H "X-API-Version: v2")
}
