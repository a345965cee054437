#!/usr/bin/env bash
# Self-test of bench/compare_gloo.sh or bench/compare_mpi.sh on a small real run: 2 ranks,
# 4-16 KiB, 3 rounds of ITERS=3 calls per size, STAT=median, the raw CSVs kept (OUTDIR).
# Checks the exit status, that the table has a row per size, and that every time in it is the
# median of the three runs' times for that size, as the script prints it (compare_mpi: with the
# bus bandwidth of that time); and that bad ITERS and STAT settings exit 2 with their message.
#
#   bench/compare_selftest.sh BUILD_DIR gloo     (compare_gloo.sh: tutti's ring, Gloo's ring)
#   bench/compare_selftest.sh BUILD_DIR mpi      (compare_mpi.sh: tutti over shm, Open MPI)
#
# BUILD_DIR holds bench/tutti-bench and bench/tutti-bench-gloo or bench/tutti-bench-mpi.
# Exit status: 0 passed; 1 a check failed; 2 on a usage error; 77 skipped (mpi where mpirun is
# not Open MPI's, whose vader BTL compare_mpi.sh runs on).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if (($# != 2)) || [[ "$2" != gloo && "$2" != mpi ]]; then
  echo "usage: compare_selftest.sh BUILD_DIR gloo|mpi" >&2
  exit 2
fi
build="$1" which="$2"
script="$here/compare_$which.sh"
if [[ "$which" == mpi ]] && ! mpirun --version 2>&1 | grep -q 'Open MPI'; then
  echo "compare_selftest: SKIPPED: mpirun is not Open MPI's"
  exit 77
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=bench/selftest_lib.sh
source "$here/selftest_lib.sh"

refuses "$script" ITERS=0 "ITERS must be a positive integer" "$build"
refuses "$script" STAT=mean "STAT must be best or median" "$build"

st=0
NPS=2 MINBYTES=4K MAXBYTES=16K ROUNDS=3 ITERS=3 STAT=median ALGOS="ring gloo_ring" \
  OUTDIR="$work/runs" bash "$script" "$build" >"$work/table" 2>"$work/err" || st=$?
if ((st != 0)); then
  bad "compare_$which.sh exited $st"
  cat "$work/table" "$work/err"
  exit 1
fi
pass "compare_$which.sh ran (exit 0)"

python3 - "$which" "$work/table" "$work/runs" <<'PY' || failures=$((failures + 1))
import csv, statistics, sys
which, table, runs = sys.argv[1], sys.argv[2], sys.argv[3]
sizes = [4096, 8192, 16384]
# The columns checked, and the run files behind each: compare_gloo prints times to one decimal;
# compare_mpi to 3 significant digits or so (t below), then both sides' bus bandwidth.
names = ["ring", "gloo_ring"] if which == "gloo" else ["tutti", "mpi"]
label = {4096: "4 KiB", 8192: "8 KiB", 16384: "16 KiB"}
t = (lambda x: f"{x:.1f}") if which == "gloo" else (
    lambda x: f"{x:.0f}" if x >= 100 else f"{x:.1f}" if x >= 10 else f"{x:.2f}")
rows = {}
for line in open(table):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells and cells[0] in [str(s) for s in sizes] + list(label.values()):
        rows[cells[0]] = cells[1:]
ok = True
for s in sizes:
    key = str(s) if which == "gloo" else label[s]
    got = rows.get(key)
    if got is None:
        print(f"FAIL no row for {key}")
        ok = False
        continue
    for i, n in enumerate(names):
        times, work = [], None
        for r in (1, 2, 3):
            for row in csv.reader(open(f"{runs}/{n}.2.{r}.csv")):
                if len(row) == 7 and row[2] == str(s):
                    times.append(float(row[3]))
                    work = float(row[5]) * float(row[3])
        med = statistics.median(times) if len(times) == 3 else None
        want = [t(med)] if med is not None else ["?"]
        if which == "mpi" and med is not None:
            want.append(f"{work / med:.3g}")
        have = [got[i]] + ([got[2 + i]] if which == "mpi" else [])
        good = have == want
        ok &= good
        print(("ok  " if good else "FAIL") + f" {n} at {key}: {have} (median of {times}: {want})")
sys.exit(0 if ok else 1)
PY

verdict "compare_selftest ($which)"
