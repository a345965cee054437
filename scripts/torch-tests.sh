#!/usr/bin/env bash
# The torch tests: tutti as a torch.distributed backend, against torch's own gloo, with torch
# from PyPI in a virtual environment this script creates (scripts/lib.sh: tutti_torch_venv).
#   bash scripts/torch-tests.sh        (TUTTI_TORCH_SUITE=1: also torch's own suite, ~30 min)
# Each test prints its time; exits non-zero if any fails.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
cd "$TUTTI_ROOT"

py="$(tutti_torch_venv)"
export PYTHONPATH="$TUTTI_ROOT/tests/torch${PYTHONPATH:+:$PYTHONPATH}"
failed=()
run() {
  local name="$1" start=$SECONDS
  shift
  tutti_step "torch: $name"
  if "$@"; then
    tutti_info "passed: $name ($((SECONDS - start)) s)"
  else
    tutti_info "FAILED: $name ($((SECONDS - start)) s)"
    failed+=("$name")
  fi
}
# The steps, in two lanes that run at once (TUTTI_TORCH_LANES=1: one after the other): a test's
# ranks spend much of their time starting Python and waiting on each other, and one lane alone
# left a third of two CPUs idle. Each lane's output is printed when it ends.
step_collectives_shm() {
  run "collectives against gloo, 1-4 ranks, over shm" "$py" tests/torch/test_collectives.py
}
step_collectives_gloo() {
  run "collectives against gloo, 2-3 ranks, over gloo" \
    env TUTTI_TORCH_TRANSPORT=gloo TUTTI_TORCH_SIZES=2,3 "$py" tests/torch/test_collectives.py
}
# Two hosts on one machine (TUTTI_TORCH_HOSTS: each rank's TUTTI_HOST, tests/torch/harness.py):
# a group with several ranks on a host runs over tutti::cluster.
step_collectives_cluster() {
  # all_gather and reduce_scatter through hierarchical's two levels, whatever automatic would
  # pick at the suite's sizes (the other collectives as automatic picks)
  run "collectives against gloo, 3-4 ranks on 2 simulated hosts, over cluster" \
    env TUTTI_TORCH_HOSTS=2 TUTTI_TORCH_SIZES=3,4 \
    TUTTI_ALGO="all_gather:hierarchical; reduce_scatter:hierarchical" \
    "$py" tests/torch/test_collectives.py
}
step_ddp() { run "DDP against gloo, 2-4 ranks" "$py" tests/torch/test_ddp.py; }
step_ddp_cluster() {
  run "DDP against gloo, 4 ranks on 2 simulated hosts, over cluster" \
    env TUTTI_TORCH_HOSTS=2 TUTTI_TORCH_SIZES=4 "$py" tests/torch/test_ddp.py
}
# FSDP (fully_shard): all_gather_into_tensor and reduce_scatter_tensor every step; across hosts
# through hierarchical's two levels
step_fsdp() {
  run "FSDP against gloo, 2 ranks, over shm" env TUTTI_TORCH_SIZES=2 "$py" tests/torch/test_fsdp.py
  run "FSDP against gloo, 4 ranks on 2 simulated hosts, over cluster" \
    env TUTTI_TORCH_HOSTS=2 TUTTI_TORCH_SIZES=4 \
    TUTTI_ALGO="all_gather:hierarchical; reduce_scatter:hierarchical" \
    "$py" tests/torch/test_fsdp.py
}
step_faults_shm() { run "faults over shm" "$py" tests/torch/test_faults.py; }
step_faults_gloo() {
  run "faults over gloo" env TUTTI_TORCH_TRANSPORT=gloo "$py" tests/torch/test_faults.py
}
step_faults_cluster() {
  run "faults, 4 ranks on 2 simulated hosts, over cluster" \
    env TUTTI_TORCH_HOSTS=2 TUTTI_TORCH_SIZES=4 "$py" tests/torch/test_faults.py
}
step_tutorials() { run "tutorials under torchrun and tcp://" bash tests/torch/test_tutorials.sh "$py"; }
# tutti's C++ side of torch: torch_tcp_store against torch's own TCPStore servers, a tutti::gloo
# program under two torchrun agents (--nnodes=2), and examples/all_reduce (tutti::shm) under
# torchrun; all through the agent's store. Then bench/netns/compare_hosts.sh's torch entries
# (its self-test, with tutti-bench from the same tree). Built in build/release where the release preset
# has configured it (as scripts/run-tests.sh has before the torch preset: its objects are
# reused, and configuring it with torch's Python only adds these targets), else in
# build/torch-cpp.
cpp=build/torch-cpp
[[ -f build/release/CMakeCache.txt ]] && cpp=build/release
cpp_build() {
  cmake --preset release -B "$cpp" -DTUTTI_TORCH_PYTHON="$py" \
    -DTUTTI_TORCHRUN="$(dirname "$py")/torchrun" >/dev/null &&
    cmake --build "$cpp" -j"$(tutti_nproc)" \
      --target test_torch_store agent_store_prog example_all_reduce tutti-bench tutti-bench-gloo
}
step_cpp() {
  run "build the C++ torch tests ($cpp)" cpp_build
  run "torch's TCPStore protocol: torch_tcp_store, tutti programs under torchrun" \
    ctest --test-dir "$cpp" --output-on-failure -R '^(torch_store|torch\.agent_store|launch\.torchrun)$'
  # exit 77: no root or no network namespaces here (said on stdout); counted as passed
  run "torchrun --nnodes=2 across two network namespaces: the DDP tutorial and a C++ program" \
    bash -c 'bash tests/torch/test_two_nodes.sh "$1" "$2"; rc=$?; ((rc == 77)) && rc=0; exit $rc' \
    _ "$py" "$cpp/tests/agent_store_prog"
  run "compare_hosts.sh's torch entries: torch.distributed on tutti and gloo across 2 x 2 namespaces" \
    bash -c 'bash bench/netns/compare_hosts_selftest.sh "$1" "$2"; rc=$?; ((rc == 77)) && rc=0; exit $rc' \
    _ "$cpp/bench" "$py"
}
lanes=("collectives_shm collectives_gloo collectives_cluster ddp tutorials faults_cluster fsdp"
  "faults_shm faults_gloo ddp_cluster cpp")
run_lane() {  # run_lane "STEP...": the steps in order
  local step
  for step in $1; do "step_$step"; done
}
if [[ "${TUTTI_TORCH_LANES:-2}" == 1 ]]; then
  for lane in "${lanes[@]}"; do run_lane "$lane"; done
else
  # A lane runs in a subshell: the names of its failed steps come back on its last line.
  logs=() pids=()
  for lane in "${lanes[@]}"; do
    logs+=("$(mktemp)")
    tutti_step "torch: lane started: $lane (its output when it ends)"
    { run_lane "$lane"; printf 'lane failures: %s\n' "${failed[*]}"; } >"${logs[-1]}" 2>&1 &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || true
    grep -v '^lane failures: ' "${logs[$i]}" || true
    line="$(grep '^lane failures: ' "${logs[$i]}" || echo "lane failures: lane ${lanes[$i]} ended early")"
    rm -f "${logs[$i]}"
    [[ "${line#lane failures: }" == "" ]] || failed+=("${line#lane failures: }")
  done
fi

# torch's own tests for distributed backends (the suite torch runs on gloo), with tutti as
# every rank's default group: 12-19 minutes per world size here, so only when asked.
if [[ "${TUTTI_TORCH_SUITE:-0}" == 1 ]]; then
  for n in 2 3; do
    run "torch's distributed_test suite, gloo's selection, on tutti, $n ranks" \
      env BACKEND=tutti TUTTI_SUITE_AS=gloo WORLD_SIZE=$n OMP_NUM_THREADS=1 \
      "$py" tests/torch/torch_suite.py
  done
fi

if ((${#failed[@]})); then
  printf '\ntorch tests FAILED: %s\n' "${failed[*]}"
  exit 1
fi
printf '\ntorch tests passed\n'
