#!/usr/bin/env bash
# tutti's isend/irecv (and blocking send/recv) vs Open MPI's MPI_Isend/MPI_Irecv between 2
# ranks on this host, side by side: OSU-style latency (half a ping-pong) and bandwidth (windows
# of 64 messages), the same loops in both programs (bench/p2p_loops.hpp), messages checked.
#
#   bench/compare_p2p.sh [build-dir]        (default: build/release)
#
# Runs tutti-bench-p2p (tutti::shm) and tutti-bench-mpi-p2p ROUNDS times each, interleaved
# A B B A ... so drift on a noisy machine hits both alike, keeps each side's best latency
# (lowest) and bandwidth (highest) per size, and prints one markdown table.
# MPI runs as: mpirun -np 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader
#
# Environment: MINBYTES (8), MAXBYTES (67108864), ROUNDS (3), OUTDIR (keep the raw CSV there).
# Exit status: 0; 1 if a program failed or reported a wrong message; 2 on a usage/setup error.
set -euo pipefail

die() {
  printf 'compare_p2p.sh: %s\n' "$*" >&2
  exit 2
}
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$repo/build/release}"
tutti_bin="$build/bench/tutti-bench-p2p"
mpi_bin="$build/bench/tutti-bench-mpi-p2p"
for bin in "$tutti_bin" "$mpi_bin"; do
  [[ -x "$bin" ]] || die "'$bin' not found; build it: cmake --build '$build' --target $(basename "$bin")"
done
command -v mpirun >/dev/null || die "mpirun not found (apt-get install openmpi-bin)"
min="${MINBYTES:-8}" max="${MAXBYTES:-67108864}" rounds="${ROUNDS:-3}"
out="${OUTDIR:-$(mktemp -d)}"
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

run_tutti() { "$tutti_bin" -b "$min" -e "$max" >>"$out/tutti.csv"; }
run_mpi() {
  mpirun -np 2 --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader \
    "$mpi_bin" -b "$min" -e "$max" >>"$out/mpi.csv"
}
: >"$out/tutti.csv"
: >"$out/mpi.csv"
for ((r = 0; r < rounds; r++)); do
  if ((r % 2 == 0)); then
    run_tutti || exit 1
    run_mpi || exit 1
  else
    run_mpi || exit 1
    run_tutti || exit 1
  fi
done

python3 - "$out/tutti.csv" "$out/mpi.csv" <<'PY'
import sys
best = {}
for path in sys.argv[1:]:
    for line in open(path):
        mode, size, lat, bw = line.strip().split(",")
        key = (mode, int(size))
        l, b = best.get(key, (float("inf"), 0.0))
        best[key] = (min(l, float(lat)), max(b, float(bw)))
sizes = sorted({s for (_, s) in best})
mpi, iso, blk = "MPI Isend/Irecv", "tutti isend/irecv", "tutti send/recv"
print("| bytes | MPI latency µs | tutti isend latency µs | tutti send/recv latency µs | "
      "MPI MB/s | tutti isend MB/s | tutti send/recv MB/s | isend latency / MPI | isend MB/s / MPI |")
print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for s in sizes:
    m, i, b = best.get((mpi, s)), best.get((iso, s)), best.get((blk, s))
    if not (m and i and b):
        continue
    print(f"| {s} | {m[0]:.2f} | {i[0]:.2f} | {b[0]:.2f} | {m[1]:.0f} | {i[1]:.0f} | {b[1]:.0f} | "
          f"{i[0] / m[0]:.2f} | {i[1] / m[1]:.2f} |")
PY
