#!/usr/bin/env bash
# A simulated cluster on this machine, in network namespaces this script creates (each host its
# own address on a bridge; no traffic leaves them): a three-member etcd cluster, Redis (a
# master, two replicas) with three Sentinels, N Sluice nodes in etcd mode, and HAProxy in
# front of them. The driver (bench/cluster.py) runs in the hub namespace.
#
#   bench/cluster.sh [--nodes N] [--changes C] [--scenarios LIST]
#
# Scenarios (LIST: comma-separated; default all, in this order):
#   convergence: C admin changes (a new route each, PUT on node 1's /apisix/admin), and for
#     each the time until every node serves it (polled every millisecond on every node), p50,
#     p99 and max, with the admin call's own time.
#   partition: node 2's packets to etcd dropped for 30 s (iptables in its namespace): when it
#     says it is stale (/readyz, sluice_config_stale_seconds), whether it keeps serving, a
#     change made meanwhile (the others serve it; node 2 once healed), and how long it takes to
#     catch up.
#   etcd: a change through node 1 every 100 ms while an etcd follower is killed and restarted,
#     then the leader: changes refused and convergence in each phase; a plot.
#   redis: limit-count (1,000 a minute, policy redis-sentinel) across every node: accuracy
#     before and after the Redis master is killed, and the answers meanwhile with and without
#     allow_degradation; a plot.
#   upgrade: wrk through HAProxy while each node in turn is replaced with kill -USR2: failed
#     requests.
# Needs root (ip netns, iptables). Stops every process in its namespaces and deletes them,
# also on Ctrl-C. Takes about 4 minutes with every scenario.
set -euo pipefail

NODES=4
CHANGES=100
SCENARIOS=convergence,partition,etcd,redis,upgrade
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=$2; shift 2 ;;
    --changes) CHANGES=$2; shift 2 ;;
    --scenarios) SCENARIOS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "cluster.sh: network namespaces need root" >&2; exit 1; }

source "$(dirname "$0")/lib.sh"
bench_out cluster
ensure etcd:etcd-server python3:python3 ip:iproute2 redis-server:redis-server redis-cli:redis-tools \
  haproxy:haproxy wrk:wrk iptables:iptables
build_sluice

NS=()
# Every process in the namespaces (the etcd members restarted by the driver, the processes a
# USR2 upgrade started), then the namespaces.
cleanup() {
  bench_cleanup
  for n in "${NS[@]:-}"; do
    [ -n "$n" ] || continue
    ip netns pids "$n" 2>/dev/null | xargs -r kill 2>/dev/null || true
  done
  sleep 0.5
  for n in "${NS[@]:-}"; do
    [ -n "$n" ] || continue
    ip netns pids "$n" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$n" 2>/dev/null || true
  done
}
trap cleanup EXIT INT TERM

# The hub: a bridge, 10.77.0.1/24; the driver runs there.
HUB=slc-hub
ip netns add "$HUB"; NS+=("$HUB")
ip -n "$HUB" link set lo up
ip -n "$HUB" link add br0 type bridge
ip -n "$HUB" link set br0 up
ip -n "$HUB" addr add 10.77.0.1/24 dev br0

# host NAME IP: a namespace with eth0 at IP on the hub's bridge.
host() {
  local ns="slc-$1"
  ip netns add "$ns"; NS+=("$ns")
  ip link add "h-$1" type veth peer name "p-$1"
  ip link set "h-$1" netns "$HUB"
  ip link set "p-$1" netns "$ns"
  ip -n "$ns" link set "p-$1" name eth0
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  ip -n "$ns" addr add "$2/24" dev eth0
  ip -n "$HUB" link set "h-$1" master br0
  ip -n "$HUB" link set "h-$1" up
}

# wait_tcp NS IP PORT: until something listens there.
wait_tcp() {
  for _ in $(seq 200); do
    ip netns exec "$1" python3 -c "import socket; socket.create_connection(('$2', $3), 0.2)" 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on $2:$3" >&2; exit 1
}

CLUSTER="e1=http://10.77.0.11:2380,e2=http://10.77.0.12:2380,e3=http://10.77.0.13:2380"
ENDPOINTS=()
for i in 1 2 3; do
  ip="10.77.0.1$i"
  host "e$i" "$ip"
  ip netns exec "slc-e$i" etcd --name "e$i" --data-dir "$OUT/etcd-e$i" \
    --listen-client-urls "http://$ip:2379" --advertise-client-urls "http://$ip:2379" \
    --listen-peer-urls "http://$ip:2380" --initial-advertise-peer-urls "http://$ip:2380" \
    --initial-cluster "$CLUSTER" --initial-cluster-state new --initial-cluster-token slc \
    --log-level warn >"$OUT/etcd-e$i.log" 2>&1 &
  PIDS+=($!)
  echo $! >> "$OUT/etcd-pids"
  ENDPOINTS+=("\"http://$ip:2379\"")
done
for i in 1 2 3; do wait_tcp "slc-e$i" "10.77.0.1$i" 2379; done

# Redis: r1 the master, r2 and r3 its replicas; a Sentinel beside each (quorum 2, a master
# down after 1 s without an answer).
for i in 1 2 3; do
  ip="10.77.0.3$i"
  host "r$i" "$ip"
  replica=(); [ "$i" -gt 1 ] && replica=(--replicaof 10.77.0.31 6379)
  # Its own directory: a replica's full sync writes an RDB file there (the working directory
  # otherwise, the repository's).
  mkdir -p "$OUT/redis-r$i"
  ip netns exec "slc-r$i" redis-server --bind "$ip 127.0.0.1" --port 6379 --save '' \
    --appendonly no --protected-mode no --dir "$OUT/redis-r$i" --logfile "$OUT/redis-r$i.log" "${replica[@]}" &
  PIDS+=($!)
  echo $! >> "$OUT/redis-pids"
  cat > "$OUT/sentinel-r$i.conf" <<CONF
port 26379
dir $OUT/redis-r$i
bind $ip 127.0.0.1
protected-mode no
logfile $OUT/sentinel-r$i.log
sentinel monitor slc 10.77.0.31 6379 2
sentinel down-after-milliseconds slc 1000
sentinel failover-timeout slc 5000
sentinel parallel-syncs slc 1
CONF
done
for i in 1 2 3; do wait_tcp "slc-r$i" "10.77.0.3$i" 6379; done
for i in 1 2 3; do
  ip netns exec "slc-r$i" redis-server "$OUT/sentinel-r$i.conf" --sentinel &
  PIDS+=($!)
done
for i in 1 2 3; do wait_tcp "slc-r$i" "10.77.0.3$i" 26379; done

KEY=cluster-bench-admin-key-0123
for i in $(seq "$NODES"); do
  ip="10.77.0.2$i"
  host "n$i" "$ip"
  cat > "$OUT/node$i.yaml" <<YAML
listen: $ip:9080
workers: 1
log: {level: warn}
admin: {listen: "$ip:9180", key: "$KEY"}
status: {listen: "$ip:9091", allow: ["10.77.0.0/24"]}
etcd:
  endpoints: [$(IFS=,; echo "${ENDPOINTS[*]}")]
  prefix: /sluice
  cache: $OUT/node$i.etcd-cache
YAML
  ip netns exec "slc-n$i" "$SLUICE" run -c "$OUT/node$i.yaml" >"$OUT/node$i.log" 2>&1 &
  PIDS+=($!)
  # Each node's upstream: an origin of its own, a process apart (the upgrade replaces the
  # gateway, not its upstreams).
  ip netns exec "slc-n$i" "$SLUICE" origin --listen 127.0.0.1:1980 >"$OUT/origin$i.log" 2>&1 &
  PIDS+=($!)
done
for i in $(seq "$NODES"); do wait_tcp "slc-n$i" "10.77.0.2$i" 9080; done

# HAProxy in front: round robin, each node checked on /readyz every 500 ms, a request that
# found a connection closed tried again (as in production).
host lb 10.77.0.5
{
  cat <<CFG
global
  maxconn 4000
  log stdout format raw local0
  stats socket $OUT/haproxy.sock mode 600 level user
defaults
  mode http
  log global
  option httplog
  option dontlog-normal
  timeout connect 2s
  timeout client 30s
  timeout server 30s
  retries 3
  retry-on conn-failure empty-response response-timeout
  option redispatch
frontend fe
  bind 10.77.0.5:80
  default_backend sluice
backend sluice
  balance roundrobin
  option httpchk GET /readyz
  http-check expect status 200
CFG
  for i in $(seq "$NODES"); do
    echo "  server n$i 10.77.0.2$i:9080 check port 9091 inter 500ms fall 2 rise 2"
  done
} > "$OUT/haproxy.cfg"
ip netns exec slc-lb haproxy -f "$OUT/haproxy.cfg" -db >"$OUT/haproxy.log" 2>&1 &
PIDS+=($!)
wait_tcp slc-lb 10.77.0.5 80

echo "scenarios: $SCENARIOS ($NODES nodes, 3 etcd members)" >&2
ip netns exec "$HUB" python3 "$(dirname "$0")/cluster.py" "$OUT" "$NODES" "$CHANGES" "$KEY" ${SCENARIOS//,/ }
echo "results in $OUT" >&2
