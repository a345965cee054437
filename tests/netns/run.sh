#!/usr/bin/env bash
# Multi-host test for tutti::gloo: 4 network namespaces joined by a bridge (in a namespace of
# its own, so the host's network is untouched), one rank per namespace on 10.77.<k>.1-4, each
# started with the variables a multi-host launcher sets (LOCAL_WORLD_SIZE=1, MASTER_ADDR =
# rank 0's address). Runs `gloo_world check` without and with a netem delay (5 ms each way),
# `gloo_world cluster` with two ranks in each of two namespaces (tutti::cluster: shm inside a
# namespace, gloo between), again on links shaped to 1 Gbit/s with tbf and with 4 hosts of one
# rank, then `gloo_world kill 3`. Everything it made is removed on exit.
#   run.sh <path to gloo_world>
# Exit 0: passed; 77: skipped (no root, no `ip netns`, ...), with the reason on stdout.
set -uo pipefail

prog="${1:?usage: run.sh <gloo_world>}"
n=4
tag="tt$$"
br="${tag}br"
made=()

skip() { echo "SKIPPED: $*"; exit 77; }
cleanup() {
  for ns in "${made[@]}"; do ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null; done
  for ns in "${made[@]}"; do ip netns del "$ns" 2>/dev/null; done
}
trap cleanup EXIT

command -v ip >/dev/null || skip "iproute2's ip is not installed"
[[ $(id -u) == 0 ]] || skip "creating network namespaces needs root"
ip netns add "$br" 2>/dev/null || skip "cannot create network namespaces here ('ip netns add' failed)"
made+=("$br")
ip -n "$br" link add br0 type bridge || skip "cannot create a bridge in a namespace"
ip -n "$br" link set br0 up
subnet=$((RANDOM % 200 + 20))
for ((r = 0; r < n; r++)); do
  ns="${tag}r$r"
  ip netns add "$ns" || exit 1
  made+=("$ns")
  ip link add "${tag}v$r" netns "$ns" type veth peer name "p$r" netns "$br" || exit 1
  ip -n "$ns" link set "${tag}v$r" name eth0
  ip -n "$ns" addr add "10.77.$subnet.$((r + 1))/24" dev eth0
  ip -n "$ns" link set eth0 up
  ip -n "$ns" link set lo up
  ip -n "$br" link set "p$r" master br0
  ip -n "$br" link set "p$r" up
done

# Runs the program in every namespace at once; prints each rank's output; 0 if all exit 0.
run_world() {
  local port=$((20000 + RANDOM % 20000)) pids=() rc=0
  for ((r = 0; r < n; r++)); do
    ip netns exec "${tag}r$r" env RANK=$r WORLD_SIZE=$n LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
      MASTER_ADDR="10.77.$subnet.1" MASTER_PORT=$port TUTTI_TIMEOUT=60 TUTTI_DEBUG=INFO \
      timeout 300 "$prog" "$@" >"/tmp/$tag.out.$r" 2>&1 &
    pids+=($!)
  done
  for ((r = 0; r < n; r++)); do
    wait "${pids[$r]}"
    local st=$?
    sed "s/^/    rank $r: /" "/tmp/$tag.out.$r"
    rm -f "/tmp/$tag.out.$r"
    if [[ "$*" == "kill 3" && $r == 3 ]]; then
      [[ $st == 137 ]] || { echo "    rank 3 should have died of SIGKILL, exit $st"; rc=1; }
    elif [[ $st != 0 ]]; then
      echo "    rank $r exited with $st"
      rc=1
    fi
  done
  return $rc
}

fail=0
echo "== 4 hosts (namespaces) on a bridge, no delay: gloo_world check"
run_world check || fail=1
if ip netns exec "${tag}r0" tc qdisc add dev eth0 root netem delay 5ms 2>/dev/null; then
  for ((r = 1; r < n; r++)); do ip netns exec "${tag}r$r" tc qdisc add dev eth0 root netem delay 5ms; done
  echo "== the same with netem delay 5 ms on every host's link"
  run_world check || fail=1
  for ((r = 0; r < n; r++)); do ip netns exec "${tag}r$r" tc qdisc del dev eth0 root; done
else
  echo "== netem delay: SKIPPED (this kernel has no netem qdisc: 'tc qdisc add ... netem' failed)"
fi
# L ranks in each of the first H namespaces: H hosts of L ranks (tutti::cluster).
#   run_hosts H L <gloo_world args>
run_hosts() {
  local hosts=$1 per=$2 port=$((20000 + RANDOM % 20000)) pids=() rc=0 k=0
  shift 2
  for ((h = 0; h < hosts; h++)); do
    for ((l = 0; l < per; l++)); do
      ip netns exec "${tag}r$h" env RANK=$((per * h + l)) WORLD_SIZE=$((hosts * per)) LOCAL_RANK=$l \
        LOCAL_WORLD_SIZE=$per MASTER_ADDR="10.77.$subnet.1" MASTER_PORT=$port TUTTI_TIMEOUT=60 \
        timeout 300 "$prog" "$@" >"/tmp/$tag.out.$k" 2>&1 &
      pids+=($!)
      k=$((k + 1))
    done
  done
  for ((k = 0; k < hosts * per; k++)); do
    wait "${pids[$k]}"
    local st=$?
    sed "s/^/    rank $k: /" "/tmp/$tag.out.$k"
    rm -f "/tmp/$tag.out.$k"
    [[ $st == 0 ]] || { echo "    rank $k exited with $st"; rc=1; }
  done
  return $rc
}
echo "== 2 hosts (namespaces) x 2 ranks: gloo_world cluster (shm inside, gloo across)"
run_hosts 2 2 cluster || fail=1
# Every host's link shaped to 1 Gbit/s with tbf (this kernel has tbf and htb, not netem).
if ip netns exec "${tag}r0" tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 50ms \
  2>/dev/null; then
  for ((r = 1; r < n; r++)); do
    ip netns exec "${tag}r$r" tc qdisc add dev eth0 root tbf rate 1gbit burst 256kb latency 50ms
  done
  echo "== the same, and 4 hosts x 1 rank, every link shaped to 1 Gbit/s (tbf): the link"
  echo "   measured at join (rank 0's line) must not beat the shaping (by half: wrong units or the"
  echo "   loopback's speed would, by 10x)"
  TUTTI_TEST_LINK_MAX_GBPS=1.5 run_hosts 2 2 cluster || fail=1
  TUTTI_TEST_LINK_MAX_GBPS=1.5 run_hosts 4 1 cluster || fail=1
  for ((r = 0; r < n; r++)); do ip netns exec "${tag}r$r" tc qdisc del dev eth0 root; done
else
  echo "== tbf shaping: SKIPPED ('tc qdisc add ... tbf' failed)"
fi
echo "== rank 3 killed mid-loop: the others raise peer_lost naming it within 1 s"
run_world kill 3 || fail=1
exit $fail
