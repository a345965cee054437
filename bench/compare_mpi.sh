#!/usr/bin/env bash
# tutti's shm transport vs Open MPI's MPI_Allreduce over its shared-memory BTL (vader), side by
# side: float sum all_reduce, nccl-tests columns, results checked by both programs.
#
#   bench/compare_mpi.sh [build-dir]        (default: build/release)
#
# For each rank count, runs tutti-bench all_reduce (shm) and tutti-bench-mpi ROUNDS times each,
# interleaved A B B A ... so slow drift on a noisy machine hits both sides alike, keeps each
# side's best (lowest) time per size, or its median (STAT), and prints a markdown table per rank
# count.
# Both measure out of place, time = the slowest rank's mean per call (-a 3).
# MPI runs as: mpirun -np NP --oversubscribe --bind-to none --mca pml ob1 --mca btl self,vader
# (pml ob1 because Debian's Open MPI also has UCX, whose pml would bypass the BTLs).
#
# Environment:
#   MINBYTES (4)  MAXBYTES (256M)  sizes, nccl-tests syntax (K/M/G)
#   NPS ("2 4")                    rank counts
#   ROUNDS (2)                     runs per program and rank count
#   ITERS (unset: ~0.2 s per size) timed calls per size in every run of both programs (-n)
#   STAT (best)                    best: each side's lowest time per size over the rounds;
#                                  median: its median (bench/runstats.py)
#   ALGO (automatic)               tutti algorithm (tutti-bench --algo)
#   BENCH_ARGS ("")                extra flags for both programs, e.g. "-w 10 -d double"
#   RUN_TIMEOUT (1800)             seconds allowed per run
#   OUTDIR (unset)                 keep the raw CSV of every run there
# Exit status: 0; 1 if a program reported wrong results or failed; 2 on a usage/setup error.
set -euo pipefail

die() {
  printf 'compare_mpi.sh: %s\n' "$*" >&2
  exit 2
}

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
case "${1:-}" in
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac
(($# <= 1)) || die "too many arguments (usage: compare_mpi.sh [build-dir])"
build="${1:-$repo/build/release}"
[[ -d "$build" ]] || die "build directory '$build' not found; configure and build first:
  cmake --preset release && cmake --build build/release --target tutti-bench tutti-bench-mpi"

shm_bin="$build/bench/tutti-bench"
mpi_bin="$build/bench/tutti-bench-mpi"
for bin in "$shm_bin" "$mpi_bin"; do
  [[ -x "$bin" ]] || die "'$bin' not found or not executable; build it with
  cmake --build '$build' --target $(basename "$bin")
(tutti-bench-mpi is configured only when CMake finds MPI: apt-get install openmpi-bin libopenmpi-dev)"
done
command -v mpirun >/dev/null || die "mpirun not found (apt-get install openmpi-bin)"
mpirun --version 2>&1 | grep -q 'Open MPI' ||
  die "mpirun is not Open MPI's ('$(mpirun --version 2>&1 | head -n1)'); the vader BTL is Open MPI's"

minbytes="${MINBYTES:-4}"
maxbytes="${MAXBYTES:-256M}"
nps="${NPS:-2 4}"
rounds="${ROUNDS:-2}"
iters="${ITERS:-}"
stat="${STAT:-best}"
algo="${ALGO:-automatic}"
run_timeout="${RUN_TIMEOUT:-1800}"
read -r -a extra <<<"${BENCH_ARGS:-}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer, not '$rounds'"
[[ -z "$iters" || "$iters" =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer"
[[ "$stat" == best || "$stat" == median ]] || die "STAT must be best or median"
[[ -z "$iters" ]] || extra=(-n "$iters" "${extra[@]}")
[[ "$run_timeout" =~ ^[1-9][0-9]*$ ]] || die "RUN_TIMEOUT must be a positive integer"
for np in $nps; do
  [[ "$np" =~ ^[1-9][0-9]*$ ]] || die "NPS must list positive integers, not '$np'"
done

mpirun_args=(--oversubscribe --bind-to none --mca pml ob1 --mca btl 'self,vader')
if [[ "$(id -u)" == 0 ]]; then
  mpirun_args=(--allow-run-as-root "${mpirun_args[@]}")
fi
timeout_cmd=()
command -v timeout >/dev/null && timeout_cmd=(timeout "$run_timeout")

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ -n "${OUTDIR:-}" ]]; then
  mkdir -p "$OUTDIR" || die "cannot create OUTDIR '$OUTDIR'"
fi

# Validate the arguments once, cheaply, before the long runs.
"$shm_bin" all_reduce --np 1 -b "$minbytes" -e "$minbytes" -n 1 -w 0 -c 0 --algo "$algo" \
  "${extra[@]}" --csv >/dev/null || die "a 1-rank trial run of tutti-bench with these arguments failed"

model="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
echo "# tutti shm vs Open MPI (vader) all_reduce, float sum unless BENCH_ARGS says otherwise"
echo
echo "- date: $(date '+%Y-%m-%d %H:%M:%S %Z')"
echo "- machine: ${model:-unknown CPU}, $(nproc) cores, $(uname -srm);" \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "- MPI: $(ompi_info --version 2>/dev/null | head -n1 || echo 'ompi_info not found')," \
  "mpirun -np NP ${mpirun_args[*]}"
echo "- tutti: $shm_bin all_reduce --np NP --algo $algo --placement out-of-place -a 3"
echo "- sizes $minbytes..$maxbytes${iters:+, $iters calls per size}, runs per side: ${rounds} (interleaved), $stat time per size;" \
  "extra args: '${BENCH_ARGS:-}'"
echo

failed=0
# run_one NAME NP CMD...: runs CMD, output CSV in $work/NAME.NP.ROUND.csv.
run_one() {
  local name="$1" np="$2" round="$3"
  shift 3
  local csv="$work/$name.$np.$round.csv" err="$work/$name.$np.$round.err"
  printf '  %-5s np=%s round %s ... ' "$name" "$np" "$round" >&2
  local start=$SECONDS rc=0
  "${timeout_cmd[@]}" "$@" >"$csv" 2>"$err" || rc=$?
  if ((rc == 0)); then
    printf 'ok (%ss)\n' "$((SECONDS - start))" >&2
  else
    failed=1
    if ((rc == 1)) && grep -q 'wrong elements' "$err"; then
      printf 'WRONG RESULTS (exit 1)\n' >&2
    elif ((rc == 124)); then
      printf 'TIMED OUT after %ss\n' "$run_timeout" >&2
    else
      printf 'FAILED (exit %s)\n' "$rc" >&2
    fi
    sed 's/^/    | /' "$err" | tail -n 20 >&2
  fi
  [[ -z "${OUTDIR:-}" ]] || cp "$csv" "$OUTDIR/"
}

run_shm() {
  run_one tutti "$1" "$2" "$shm_bin" all_reduce --np "$1" --algo "$algo" -b "$minbytes" \
    -e "$maxbytes" --placement out-of-place -a 3 "${extra[@]}" --csv
}
run_mpi() {
  run_one mpi "$1" "$2" mpirun -np "$1" "${mpirun_args[@]}" "$mpi_bin" all_reduce -b "$minbytes" \
    -e "$maxbytes" --placement out-of-place -a 3 "${extra[@]}" --csv
}

for np in $nps; do
  echo "running $np ranks:" >&2
  for ((round = 1; round <= rounds; ++round)); do
    if ((round % 2 == 1)); then
      run_shm "$np" "$round"
      run_mpi "$np" "$round"
    else
      run_mpi "$np" "$round"
      run_shm "$np" "$round"
    fi
  done
done

# Merge: per side and size, the time STAT names (its busbw goes with it) and the most wrong
# elements.
for np in $nps; do
  echo "## $np ranks"
  echo
  python3 - "$repo/bench" "$work" "$np" "$stat" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import runstats
work, np, stat = sys.argv[2], sys.argv[3], sys.argv[4]
runs = runstats.Runs()
for side in ("tutti", "mpi"):
    runs.add_all(side, f"{work}/{side}.{np}.*.csv")
if not runs.times:
    print("(no results)")
    sys.exit(0)
chosen = runs.stat(stat)
wrong = {}
for side, _, size, n in runs.wrong:
    wrong[(side, size)] = max(wrong.get((side, size), 0), n)

def human(b):
    for unit, k in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if b >= k and b % k == 0:
            return f"{b // k} {unit}"
    return f"{b} B"

def t(x):
    return f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}"

print("| size | tutti time (us) | MPI time (us) | tutti busbw (GB/s) | MPI busbw (GB/s) | speedup (MPI/tutti) |")
print("|---:|---:|---:|---:|---:|---:|")
for s in runs.sizes():
    kt, km = ("tutti", s), ("mpi", s)
    tt = t(chosen[kt]) if kt in chosen else "-"
    tm = t(chosen[km]) if km in chosen else "-"
    bt = f"{runs.busbw(kt, chosen[kt]):.3g}" if kt in chosen else "-"
    bm = f"{runs.busbw(km, chosen[km]):.3g}" if km in chosen else "-"
    sp = f"{chosen[km] / chosen[kt]:.2f}x" if kt in chosen and km in chosen and chosen[kt] > 0 else "-"
    note = "".join(f" ({who}: {wrong[(side, s)]} wrong)" for side, who in (("tutti", "tutti"), ("mpi", "MPI"))
                   if (side, s) in wrong)
    print(f"| {human(s)} | {tt} | {tm} | {bt} | {bm} | {sp}{note} |")
PY
  echo
done

echo "Load average after: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')" \
  "(other work on the machine skews both sides; compare runs made at low load)."

if ((failed)); then
  echo "compare_mpi.sh: at least one run failed or reported wrong results (see above)" >&2
  exit 1
fi
