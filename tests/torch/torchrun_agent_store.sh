#!/usr/bin/env bash
# tutti under multi-node torchrun, on this host: two torchrun agents (--nnodes=2, node ranks 0
# and 1, 2 ranks each, static rendezvous on a free port of 127.0.0.1). torchrun sets
# TORCHELASTIC_USE_AGENT_STORE=True, so the ranks meet through the agent's own TCPStore
# (bootstrap/torch_store.hpp) and, spanning two "nodes", run over tutti::gloo. Checks:
#   1. both agents: every rank prints "all_reduce sums ok (10)";
#   2. a rank that never joins (AGENT_STORE_PROG_ABSENT=3): the other ranks fail with tutti's
#      timeout message within TUTTI_TIMEOUT, not hang;
#   3. node 1's agent never comes: node 0's torchrun fails with torch's message within its
#      rendezvous timeout, not hang.
#   bash tests/torch/torchrun_agent_store.sh PYTHON PROGRAM
set -uo pipefail
py="${1:?usage: torchrun_agent_store.sh PYTHON PROGRAM}"
prog="${2:?usage: torchrun_agent_store.sh PYTHON PROGRAM}"
torchrun="$(dirname "$py")/torchrun"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAILED: $*" >&2; exit 1; }
[[ -x "$torchrun" ]] || fail "no torchrun next to $py"

free_port() {
  "$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# agent K PORT TAG [ENV...]: one torchrun agent in the background, output in $work/TAG.K
agent() {
  local k="$1" port="$2" tag="$3"
  shift 3
  env "$@" timeout 300 "$torchrun" --no-python --nnodes=2 --node_rank="$k" --nproc_per_node=2 \
    --master_addr=127.0.0.1 --master_port="$port" --rdzv_backend=static \
    --rdzv_conf=timeout=20 "$prog" >"$work/$tag.$k" 2>&1 &
}

# 1. both agents: 4 ranks, each with the exact sums
port=$(free_port)
agent 0 "$port" ok TUTTI_TIMEOUT=60
p0=$!
agent 1 "$port" ok TUTTI_TIMEOUT=60
p1=$!
wait $p0 || { cat "$work/ok.0" >&2; fail "node 0's agent exited $?"; }
wait $p1 || { cat "$work/ok.1" >&2; fail "node 1's agent exited $?"; }
for r in 0 1 2 3; do
  grep -q "^rank $r of 4: all_reduce sums ok (10)$" "$work/ok.0" "$work/ok.1" ||
    { cat "$work/ok.0" "$work/ok.1" >&2; fail "rank $r did not report its sums"; }
done
echo "ok: 4 ranks on two torchrun agents met through the agent store; sums exact"

# 2. rank 3 never joins: ranks 0-2 raise tutti's timeout after TUTTI_TIMEOUT=5 s
port=$(free_port)
start=$SECONDS
agent 0 "$port" absent TUTTI_TIMEOUT=5 AGENT_STORE_PROG_ABSENT=3
p0=$!
agent 1 "$port" absent TUTTI_TIMEOUT=5 AGENT_STORE_PROG_ABSENT=3
p1=$!
wait $p0 && fail "node 0's agent succeeded with rank 3 absent"
wait $p1 && fail "node 1's agent succeeded with rank 3 absent"
took=$((SECONDS - start))
grep -h "agent_store_prog: " "$work/absent.0" "$work/absent.1" | head -n 3
grep -q "agent_store_prog: .*timed out" "$work/absent.0" "$work/absent.1" ||
  { cat "$work/absent.0" "$work/absent.1" >&2; fail "no rank reported tutti's timeout"; }
((took < 120)) || fail "rank 3 absent: took ${took}s"
echo "ok: with rank 3 absent the others failed with tutti's timeout in ${took}s"

# 3. node 1's agent never comes: node 0's agent gives up within its rendezvous timeout
port=$(free_port)
start=$SECONDS
agent 0 "$port" alone TUTTI_TIMEOUT=5
wait $! && fail "node 0's agent succeeded without node 1"
took=$((SECONDS - start))
grep -m1 -iE "timed out|timeout" "$work/alone.0" ||
  { tail -n 20 "$work/alone.0" >&2; fail "node 0's agent failed without a timeout message"; }
((took < 120)) || fail "node 1 absent: took ${took}s"
echo "ok: without node 1, node 0's agent failed in ${took}s"
