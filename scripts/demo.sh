#!/usr/bin/env bash
# The weft lab: two clusters on loopback, one real etcd and one weftd each. cluster2
# announces sync canaries; its remaining state arrives step by step and the barriers in
# `weftd status` go from pending to synced. cluster1's weftd runs the shipped plugins,
# signed, and refuses a tampered reload. Each cluster's node is a network namespace,
# the two joined by a veth; each weftd runs a WireGuard device there with the other
# node as its peer. cluster1's BPF datapath redirects traffic to cluster2's keyed pod
# into its WireGuard device, and it crosses the veth encrypted.
# Everything is cleaned up on exit.
# DEMO_HOLD=1 keeps the lab running until Ctrl-C.
set -euo pipefail
cd "$(dirname "$0")/.."
WEFTD=${WEFTD:-target/debug/weftd}
lab=$(mktemp -d /tmp/weft-demo.XXXXXX)
pids=()
NS_A=weft-demo-a-$$ NS_B=weft-demo-b-$$ BPF_ROOT=/sys/fs/bpf/weft-demo-$$
# WireGuard device names are unique on the machine (userspace devices share a directory).
WG_A=wgdema$$ WG_B=wgdemb$$
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  # The devices outlive weftd by design: stop their weft-wg helpers.
  for d in "$WG_A" "$WG_B"; do
    [ -f "/var/run/wireguard/$d.pid" ] && kill "$(cat "/var/run/wireguard/$d.pid")" 2>/dev/null || true
    rm -f "/var/run/wireguard/$d.pid" "/var/run/wireguard/$d.sock" "/var/run/wireguard/$d.log"
  done
  # Unpinning the links detaches the program; the namespaces take the devices along.
  rm -rf "$BPF_ROOT" 2>/dev/null || true
  ip netns del "$NS_A" 2>/dev/null || true
  ip netns del "$NS_B" 2>/dev/null || true
  rm -rf "$lab"
  echo "lab cleaned up"
}
trap cleanup EXIT INT TERM

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

start_etcd() { # name -> sets ETCD_URL (not in a subshell: its PID must reach cleanup)
  local name=$1 cport pport
  cport=$(free_port); pport=$(free_port)
  etcd --name "weft-demo-$name" --data-dir "$lab/$name-etcd" \
    --listen-client-urls "http://127.0.0.1:$cport" --advertise-client-urls "http://127.0.0.1:$cport" \
    --listen-peer-urls "http://127.0.0.1:$pport" --initial-advertise-peer-urls "http://127.0.0.1:$pport" \
    --initial-cluster "weft-demo-$name=http://127.0.0.1:$pport" --log-level error --logger zap \
    >"$lab/$name-etcd.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    ETCDCTL_API=3 etcdctl --endpoints "http://127.0.0.1:$cport" endpoint health >/dev/null 2>&1 && break
    sleep 0.1
  done
  ETCD_URL="http://127.0.0.1:$cport"
}

start_weftd() { # cluster id etcd-url [extra flags...]
  # The node's address is its veth's, inside the lab's namespaces.
  local c=$1 id=$2 url=$3
  shift 3
  mkdir -p "$lab/$c/mesh"
  "$WEFTD" run --cluster-name "$c" --cluster-id "$id" --kvstore-endpoints "$url" \
    --clustermesh-config "$lab/$c/mesh" --state-dir "$lab/$c/state" \
    --node-name "$c-node1" --node-ip "10.100.0.$id" "$@" >"$lab/$c/weftd.log" 2>&1 &
  pids+=($!)
}

package() { # name wasm-file version priority config: manifest sealed and signed
  cp "plugins/target/wasm32-wasip2/release/$2.wasm" "$lab/plugins/$2.wasm"
  printf 'name = "%s"\nversion = "%s"\nwasm = "%s.wasm"\nsha256 = ""\npriority = %s\nconfig = "%s"\n' \
    "$1" "$3" "$2" "$4" "$5" >"$lab/plugins/.$1.toml"
  "$WEFTD" plugin seal "$lab/plugins/.$1.toml" --key "$lab/vendor.key"
  mv "$lab/plugins/.$1.toml" "$lab/plugins/$1.toml"
}

status() { "$WEFTD" status --state-dir "$lab/$1/state"; }
put() { ETCDCTL_API=3 etcdctl --endpoints "$E2" put "$1" "$2" >/dev/null; }

step "two clusters on loopback, one etcd each"
start_etcd cluster1; E1=$ETCD_URL
start_etcd cluster2; E2=$ETCD_URL
echo "cluster1 etcd: $E1"; echo "cluster2 etcd: $E2"
"$WEFTD" cluster-config --cluster-name cluster1 --cluster-id 1 --kvstore-endpoints "$E1"
"$WEFTD" cluster-config --cluster-name cluster2 --cluster-id 2 --kvstore-endpoints "$E2" --synced-canaries

step "the nodes: cluster1's and cluster2's, two namespaces joined by a veth"
# Addresses exist only inside these two namespaces, and neither has a route out.
ip netns add "$NS_A"; ip netns add "$NS_B"
ip link add weftv0 netns "$NS_A" type veth peer name weftv1 netns "$NS_B"
ip -n "$NS_A" addr add 10.100.0.1/24 dev weftv0; ip -n "$NS_A" link set weftv0 up
ip -n "$NS_B" addr add 10.100.0.2/24 dev weftv1; ip -n "$NS_B" link set weftv1 up
ip -n "$NS_B" addr add 10.2.0.10/32 dev lo; ip -n "$NS_B" addr add 10.2.0.11/32 dev lo
ip -n "$NS_A" route add 10.2.0.0/16 via 10.100.0.2
echo "cluster1's node ($NS_A): weftv0 10.100.0.1; cluster2's node ($NS_B): weftv1 10.100.0.2, pods 10.2.0.10 and 10.2.0.11"

step "plugins for cluster1's weftd: the shipped ones, signed with a vendor key"
mkdir -p "$lab/plugins"
"$WEFTD" plugin keygen --out "$lab/vendor.key" >"$lab/trusted-keys"
echo "trusted key: $(cat "$lab/trusted-keys")"
package regeneration-policy regeneration_policy 0.1.0 0 ""
package sync-events sync_events 0.1.0 5 ""
package critical-clusters critical_clusters 0.1.0 10 cluster2

step "one weftd per cluster, WireGuard on; each mesh directory names the other cluster"
# --node-encryption: the node's own traffic is encrypted too, so the lab needs no pods.
start_weftd cluster1 1 "$E1" --plugin-dir "$lab/plugins" --plugin-trusted-keys "$lab/trusted-keys" \
  --native-device weftv0 --node-encryption --datapath-netns "/run/netns/$NS_A" --bpf-root "$BPF_ROOT" \
  --wireguard --wireguard-device "$WG_A"
start_weftd cluster2 2 "$E2" --datapath-netns "/run/netns/$NS_B" --wireguard --wireguard-device "$WG_B"
printf 'endpoints:\n- %s\n' "$E2" >"$lab/cluster1/mesh/cluster2"
printf 'endpoints:\n- %s\n' "$E1" >"$lab/cluster2/mesh/cluster1"
for _ in $(seq 100); do status cluster1 2>/dev/null | grep -q 'synced(1)' && break; sleep 0.1; done
status cluster1
echo "(cluster2 announces canaries: only its nodes, published by its weftd, are synced)"

step "cluster2's identities arrive, then their canary"
put cilium/state/identities/v1/id/131172 'k8s:app=web;k8s:io.cilium.k8s.policy.cluster=cluster2;'
put cilium/state/identities/v1/id/131173 'k8s:app=db;k8s:io.cilium.k8s.policy.cluster=cluster2;'
sleep 1; status cluster1
put cilium/synced/cluster2/cilium/state/identities/v1 "$(date -u +%FT%TZ)"
sleep 1; status cluster1

step "its ipcache and services, then their canaries"
put cilium/state/ip/v1/default/10.2.0.10 '{"IP":"10.2.0.10","Mask":null,"HostIP":"10.100.0.2","ID":131172,"Key":255,"Metadata":""}'
put cilium/state/services/v1/cluster2/default/web '{"cluster":"cluster2","namespace":"default","name":"web","shared":true,"clusterID":2}'
put cilium/synced/cluster2/cilium/state/ip/v1 "$(date -u +%FT%TZ)"
put cilium/synced/cluster2/cilium/state/services/v1 "$(date -u +%FT%TZ)"
sleep 1; status cluster1

step "and from cluster2's side (cluster1 has no canaries: synced at once)"
status cluster2

step "a malformed value is counted and skipped, nothing else is lost"
put cilium/state/ip/v1/default/10.2.0.11 '{not json'
sleep 1; status cluster1

step "hot reload: a tampered critical-clusters 0.2.0 is refused; 0.1.0 keeps running"
printf 'tampered' >>"$lab/plugins/critical_clusters.wasm"
sed -i 's/^version = .*/version = "0.2.0"/' "$lab/plugins/critical-clusters.toml"
for _ in $(seq 50); do status cluster1 | grep -q 'refused ' && break; sleep 0.1; done
status cluster1 | sed -n '/^plugins:/,/^REMOTE/p' | grep -v '^REMOTE'
echo "(the host endpoint's start-up wait, as the plugins decided it:)"
grep -h 'host endpoint' "$lab/cluster1/weftd.log" | tail -1

step "the datapath: to-netdev on node A's weftv0 redirects what must be encrypted to WireGuard"
status cluster1 | sed -n '/^datapath:/,/^REMOTE/p' | grep -v '^REMOTE'
rx() { ip -n "$1" -s link show "$2" | awk '/RX:/{getline; print $2}'; }
before_wg=$(rx "$NS_B" "$WG_B")
# The first packets wait for the handshake: send until one comes through (at most 5 s).
for _ in $(seq 50); do
  ip netns exec "$NS_A" bash -c 'echo node-to-pod >/dev/udp/10.2.0.10/5000'
  [ "$(( $(rx "$NS_B" "$WG_B") - before_wg ))" -gt 0 ] && break
  sleep 0.1
done
before_wg=$(rx "$NS_B" "$WG_B")
for _ in 1 2 3; do ip netns exec "$NS_A" bash -c 'echo node-to-pod >/dev/udp/10.2.0.10/5000'; done
sleep 0.3
echo "3 packets to cluster2's pod 10.2.0.10 (key 255): $(( $(rx "$NS_B" "$WG_B") - before_wg )) came out of cluster2's WireGuard device, decrypted"
before_peer=$(rx "$NS_B" weftv1)
for _ in 1 2 3; do ip netns exec "$NS_A" bash -c 'echo plain >/dev/udp/10.2.0.11/5000'; done
sleep 0.3
echo "3 packets to 10.2.0.11 (not in the ipcache): $(( $(rx "$NS_B" weftv1) - before_peer )) crossed the veth in the clear"

step "WireGuard: each node's peer is the other node; cluster1's has cluster2's pod too"
status cluster1 | sed -n '/^wireguard:/,/^datapath:/p' | grep -v '^datapath:'
status cluster2 | sed -n '/^wireguard:/,/^REMOTE/p' | grep -v '^REMOTE'

step "cluster1's ipcache: its own node (host), cluster2's node and pod, resolved"
"$WEFTD" ipcache list --state-dir "$lab/cluster1/state"

step "the JSON contract"
"$WEFTD" status -o json --state-dir "$lab/cluster1/state"

if [ "${DEMO_HOLD:-0}" = 1 ]; then
  step "lab running in $lab; Ctrl-C to stop"
  wait
fi
