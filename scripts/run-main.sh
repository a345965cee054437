#!/usr/bin/env bash
# The main job: bash scripts/run-main.sh
#
# Installs missing build dependencies, configures and builds the release
# preset, runs every example, then the all-reduce benchmarks: every policy over
# inproc, tutti::shm next to Open MPI's MPI_Allreduce (bench/compare_mpi.sh), then
# tutti-bench over every other collective at 4 ranks.
#   TUTTI_BENCH_ARGS     arguments for bench_all_reduce
#                        (default: --benchmark_min_time=0.05)
#   TUTTI_BENCH_TIMEOUT  seconds before the benchmark is stopped (default 600)
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
cd "$TUTTI_ROOT"

tutti_ensure_deps
tutti_configure_build release || tutti_die "release build failed"

build=build/release
# Every examples/<name>.cpp builds <build>/examples/<name>.
mapfile -t examples < <(find examples -maxdepth 1 -name '*.cpp' -printf '%f\n' | sed 's/\.cpp$//' | sort)
for name in "${examples[@]}"; do
  exe="$build/examples/$name"
  [[ -x "$exe" ]] || tutti_die "example $exe was not built"
  tutti_step "example: $exe"
  "$exe" || tutti_die "example $exe failed"
done

bench="$build/bench/bench_all_reduce"
[[ -x "$bench" ]] || tutti_die "$bench does not exist (no bench/bench_all_reduce.cpp yet?)"
read -r -a bench_args <<<"${TUTTI_BENCH_ARGS:---benchmark_min_time=0.05}"
tutti_step "benchmark: $bench ${bench_args[*]}"
timeout --signal=INT --kill-after=30 "${TUTTI_BENCH_TIMEOUT:-600}" "$bench" "${bench_args[@]}" ||
  tutti_die "benchmark $bench failed (or exceeded ${TUTTI_BENCH_TIMEOUT:-600}s)"

if command -v mpirun >/dev/null 2>&1 && [[ -x "$build/bench/tutti-bench-mpi" ]]; then
  tutti_step "benchmark: tutti::shm next to Open MPI (bench/compare_mpi.sh)"
  bash bench/compare_mpi.sh "$build" || tutti_die "bench/compare_mpi.sh failed"
else
  tutti_step "benchmark: tutti::shm alone (Open MPI not installed)"
  "$build/bench/tutti-bench" all_reduce --np 2 -b 8 -e 256M --placement out-of-place ||
    tutti_die "tutti-bench all_reduce failed"
fi

# Every collective once, checked, as a user would run tutti-bench (nccl-tests' table).
for coll in broadcast reduce all_gather reduce_scatter gather scatter all_to_all; do
  tutti_step "benchmark: tutti-bench $coll -b 8 -e 64M -f 4 --np 4 -c 1"
  "$build/bench/tutti-bench" "$coll" -b 8 -e 64M -f 4 --np 4 -c 1 ||
    tutti_die "tutti-bench $coll failed"
done

tutti_step "main job done"
