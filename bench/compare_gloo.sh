#!/usr/bin/env bash
# tutti's policies over Gloo's TCP transport next to Gloo's own all-reduce algorithms, in one
# invocation on one machine, float sum over loopback, results checked by the programs:
#   tutti-bench all_reduce --transport gloo --np NP --algo A     (tutti's policies)
#   TUTTI_GLOO_CMA=0 tutti-bench ... --algo automatic             (automatic_tcp)
#   tutti-bench-gloo all_reduce --np NP --algo X                  (gloo_X: Gloo's own)
# both out of place where the algorithm has that form, time = the slowest rank's mean (-a 3).
# tutti's policies send collective messages between ranks on one host as single copies where
# the host allows it (README, "Across hosts"); automatic_tcp keeps every message on Gloo's TCP
# pairs, the very transport Gloo's own algorithms use.
#
#   bench/compare_gloo.sh [build-dir]        (default: build/release)
#
# Runs every algorithm ROUNDS times, the algorithms interleaved within each round so slow drift
# on a noisy machine hits all alike; keeps each algorithm's best (lowest) time per size, or its
# median (STAT); prints a markdown table per rank count: time in microseconds per size, and
# which of Gloo's own algorithms was fastest next to the ratios tutti automatic / that best and
# automatic_tcp / that best.
#
# Environment:
#   MINBYTES (4)  MAXBYTES (256M)   sizes, nccl-tests syntax (K/M/G)
#   NPS ("2 4")                     rank counts
#   ROUNDS (2)                      runs per algorithm and rank count
#   ITERS (unset: ~0.2 s per size)  timed calls per size in every run (-n): a fixed count makes
#                                   runs as long at every size and for every program
#   STAT (best)                     best: each algorithm's lowest time per size over the rounds;
#                                   median: its median (bench/runstats.py), which a program that
#                                   is fast only now and then does not win
#   ALGOS (all)                     space-separated subset of the names in the table
#   OUTDIR (unset)                  keep the raw CSV of every run there (ALGO.NP.ROUND.csv)
#   RUN_TIMEOUT (1800)              seconds allowed per run
#   PRIO (unset)                    run every program under `chrt -f PRIO` (real-time FIFO, needs
#                                   root or CAP_SYS_NICE): other work on the machine cannot
#                                   preempt the ranks, which cuts the noise of a shared machine.
#                                   Only with ranks <= cores: a FIFO thread that busy-waits (Gloo's
#                                   classic algorithms poll their sockets) keeps a rank that shares
#                                   its core from ever running, and the run stalls
# Exit status: 0; 1 if a run reported wrong results or failed; 2 on a usage/setup error.
set -euo pipefail

die() {
  printf 'compare_gloo.sh: %s\n' "$*" >&2
  exit 2
}
case "${1:-}" in
  -h | --help)
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
    exit 0
    ;;
esac
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$repo/build/release}"
bin="$build/bench/tutti-bench"
peer="$build/bench/tutti-bench-gloo"
[[ -x "$bin" && -x "$peer" ]] || die "'$bin' or '$peer' not found; configure with -DTUTTI_WITH_GLOO=ON
  (the presets do) and cmake --build '$build' --target tutti-bench tutti-bench-gloo"

minbytes="${MINBYTES:-4}"
maxbytes="${MAXBYTES:-256M}"
nps="${NPS:-2 4}"
rounds="${ROUNDS:-2}"
iters="${ITERS:-}"
stat="${STAT:-best}"
run_timeout="${RUN_TIMEOUT:-1800}"
read -r -a algos <<<"${ALGOS:-automatic automatic_tcp ring recursive_halving tree recursive_doubling native gloo_ring gloo_bcube gloo_ring_chunked gloo_halving_doubling}"
[[ "$rounds" =~ ^[1-9][0-9]*$ ]] || die "ROUNDS must be a positive integer"
[[ -z "$iters" || "$iters" =~ ^[1-9][0-9]*$ ]] || die "ITERS must be a positive integer"
[[ "$stat" == best || "$stat" == median ]] || die "STAT must be best or median"
[[ "$run_timeout" =~ ^[1-9][0-9]*$ ]] || die "RUN_TIMEOUT must be a positive number of seconds"
for np in $nps; do
  [[ "$np" =~ ^[1-9][0-9]*$ ]] || die "NPS must list positive integers, not '$np'"
done
((${#algos[@]} > 0)) || die "ALGOS is empty"
prio=()
if [[ -n "${PRIO:-}" ]]; then
  [[ "$PRIO" =~ ^[1-9][0-9]?$ ]] || die "PRIO must be a real-time priority, 1-99"
  chrt -f "$PRIO" true 2>/dev/null || die "chrt -f $PRIO is not allowed here (needs root or CAP_SYS_NICE)"
  prio=(chrt -f "$PRIO")
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
if [[ -n "${OUTDIR:-}" ]]; then
  mkdir -p "$OUTDIR" || die "cannot create OUTDIR '$OUTDIR'"
fi
model="$(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -n1)"
echo "# tutti over Gloo's TCP transport vs Gloo's own all_reduce, float sum, loopback"
echo
echo "- date: $(date '+%Y-%m-%d %H:%M:%S %Z')"
echo "- machine: ${model:-unknown CPU}, $(nproc) cores, $(uname -srm);" \
  "load average before: $(cut -d' ' -f1-3 /proc/loadavg 2>/dev/null || echo '?')"
echo "- Gloo: Debian libgloo-dev $(dpkg-query -W -f='${Version}' libgloo-dev 2>/dev/null || echo '?')"
echo "- tutti-bench / tutti-bench-gloo all_reduce --np NP --algo A -b $minbytes -e $maxbytes -a 3 --csv${iters:+ -n $iters};" \
  "$stat of $rounds interleaved runs${PRIO:+, under chrt -f $PRIO}"
echo

failed=0
for np in $nps; do
  for ((round = 1; round <= rounds; round++)); do
    for a in "${algos[@]}"; do
      printf '  np=%s round %s %-22s ... ' "$np" "$round" "$a" >&2
      start=$SECONDS
      if [[ "$a" == gloo_* ]]; then
        cmd=("$peer" all_reduce --algo "${a#gloo_}")
        # ring and bcube have both forms; the classic classes only in place
        [[ "$a" == gloo_ring || "$a" == gloo_bcube ]] && cmd+=(--placement out-of-place)
      elif [[ "$a" == automatic_tcp ]]; then
        cmd=(env TUTTI_GLOO_CMA=0 "$bin" all_reduce --transport gloo --algo automatic --placement out-of-place)
      else
        cmd=("$bin" all_reduce --transport gloo --algo "$a" --placement out-of-place)
      fi
      [[ -z "$iters" ]] || cmd+=(-n "$iters")
      if timeout "$run_timeout" "${prio[@]}" "${cmd[@]}" --np "$np" -b "$minbytes" -e "$maxbytes" -a 3 --csv \
        >"$work/$a.$np.$round.csv" 2>"$work/err"; then
        printf 'ok (%ss)\n' "$((SECONDS - start))" >&2
      else
        failed=1
        printf 'FAILED\n' >&2
        tail -n 5 "$work/err" | sed 's/^/    | /' >&2
      fi
      [[ -z "${OUTDIR:-}" ]] || cp "$work/$a.$np.$round.csv" "$OUTDIR/"
    done
  done
  echo "## $np ranks: time per call (µs), $stat of $rounds"
  echo
  python3 - "$repo/bench" "$work" "$np" "$stat" "${algos[@]}" <<'PY'
import sys
sys.path.insert(0, sys.argv[1])
import runstats
work, np, stat, algos = sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
runs = runstats.Runs()
for a in algos:
    runs.add_all(a, f"{work}/{a}.{np}.*.csv")
best = runs.stat(stat)
sizes = runs.sizes()
gloo = [a for a in algos if a.startswith("gloo_")]
ours = [a for a in ("automatic", "automatic_tcp") if a in algos]
heads = list(algos) + ["best Gloo"] + [f"{a} / best Gloo" for a in ours]
print("| bytes | " + " | ".join(heads) + " |")
print("|---:|" + "---:|" * len(algos) + "---|" + "---:|" * len(ours))
for s in sizes:
    cells = [f"{best[(a, s)]:.1f}" if (a, s) in best else "–" for a in algos]
    g = min(((best[(a, s)], a) for a in gloo if (a, s) in best), default=None)
    cells.append(g[1] if g else "–")
    cells += [f"{best[(a, s)] / g[0]:.2f}" if g and (a, s) in best else "–" for a in ours]
    print(f"| {s} | " + " | ".join(cells) + " |")
print()
PY
done
exit "$failed"
