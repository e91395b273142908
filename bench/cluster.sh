#!/usr/bin/env bash
# A simulated cluster on this machine, in network namespaces this script creates (each host its
# own address on a bridge; no traffic leaves them): a three-member etcd cluster and N Sluice
# nodes in etcd mode.
#
#   bench/cluster.sh [--nodes N] [--changes C]
#
# Scenario so far (issue 29 lists the others: an etcd partition, members killed, Redis
# Sentinel fail-over, a rolling upgrade):
#   convergence: C admin changes (a new route each, PUT on node 1's /apisix/admin), and for
#   each the time until every node serves it (polled every millisecond on every node), p50,
#   p99 and max, with the admin call's own time.
# Needs root (ip netns). Stops every process and deletes every namespace it made, also on
# Ctrl-C.
set -euo pipefail

NODES=4
CHANGES=100
while [ $# -gt 0 ]; do
  case "$1" in
    --nodes) NODES=$2; shift 2 ;;
    --changes) CHANGES=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "cluster.sh: network namespaces need root" >&2; exit 1; }

source "$(dirname "$0")/lib.sh"
bench_out cluster
ensure etcd:etcd-server python3:python3 ip:iproute2
build_sluice

NS=()
cleanup() {
  bench_cleanup
  for n in "${NS[@]:-}"; do [ -n "$n" ] && ip netns del "$n" 2>/dev/null || true; done
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
  ENDPOINTS+=("\"http://$ip:2379\"")
done
for i in 1 2 3; do wait_tcp "slc-e$i" "10.77.0.1$i" 2379; done

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
done
for i in $(seq "$NODES"); do wait_tcp "slc-n$i" "10.77.0.2$i" 9080; done

echo "convergence: $CHANGES changes through node 1, $NODES nodes, 3 etcd members" >&2
ip netns exec "$HUB" python3 - "$NODES" "$CHANGES" "$KEY" "$OUT" <<'PY' | tee "$OUT/results.md"
import http.client, json, statistics, sys, time

nodes, changes, key, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
addrs = [f"10.77.0.2{i}" for i in range(1, nodes + 1)]
conns = {a: http.client.HTTPConnection(a, 9080, timeout=2) for a in addrs}

def status(a, path):
    for _ in range(2):
        try:
            conns[a].request("GET", path)
            r = conns[a].getresponse()
            r.read()
            return r.status
        except (http.client.HTTPException, OSError):
            conns[a].close()
            conns[a] = http.client.HTTPConnection(a, 9080, timeout=2)
    return 0

admin = http.client.HTTPConnection(addrs[0], 9180, timeout=5)
converge, writes, per_node = [], [], {a: [] for a in addrs}
run = int(time.time())
for i in range(changes):
    path = f"/c{run}-{i}"
    body = json.dumps({"uri": path, "plugins": {"mocking": {"response_example": "ok"}}})
    t0 = time.perf_counter()
    admin.request("PUT", f"/apisix/admin/routes/c{run}-{i}", body, {"X-API-KEY": key, "Content-Type": "application/json"})
    r = admin.getresponse(); r.read()
    t1 = time.perf_counter()
    if r.status not in (200, 201):
        sys.exit(f"PUT {path}: {r.status}")
    writes.append((t1 - t0) * 1000)
    waiting = set(addrs)
    while waiting:
        for a in list(waiting):
            if status(a, path) == 200:
                per_node[a].append((time.perf_counter() - t0) * 1000)
                waiting.discard(a)
        if time.perf_counter() - t0 > 10:
            sys.exit(f"{path}: not served by {sorted(waiting)} after 10 s")
        time.sleep(0.001)
    converge.append((time.perf_counter() - t0) * 1000)

def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p * (len(xs) - 1))))]

print(f"## One admin change until every node serves it ({nodes} nodes, 3 etcd members, {changes} changes)\n")
print("| | p50 | p99 | max |")
print("|---|---:|---:|---:|")
print(f"| the admin call (PUT on node 1, written to etcd) | {pct(writes, .5):.1f} ms | {pct(writes, .99):.1f} ms | {max(writes):.1f} ms |")
print(f"| every node serves it (from the PUT's start) | {pct(converge, .5):.1f} ms | {pct(converge, .99):.1f} ms | {max(converge):.1f} ms |")
for a in addrs:
    print(f"| node {a} serves it | {pct(per_node[a], .5):.1f} ms | {pct(per_node[a], .99):.1f} ms | {max(per_node[a]):.1f} ms |")
print("\nPolled every millisecond on every node (HTTP keep-alive from the hub namespace); the figures include the poll's own delay (about 1 ms).")
PY
echo "results in $OUT" >&2
