#!/usr/bin/env bash
# Self-test of bench/netns/compare_hosts.sh on a small real run: 2 hosts x 1 rank, unshaped
# links, 4-16 KiB, tutti's ring and Gloo's ring_chunked, 3 rounds of ITERS=3 calls per size,
# STAT=median. Checks the exit status, that the table has a row per size, and that every cell
# is the median of the three runs' times in OUT (as printed, one decimal); a CPU=1 run, whose
# table must give each algorithm's CPU per call from the per-rank CPU times it kept; and that
# bad ITERS, STAT, CPU, TBF_PEAK_FRAMES, SHAPER, HTB_BURST and MODEL settings exit 2 with their
# message; a SHAPER=htb run at 1 Gbit/s, no faster than its links allow, with MODEL=1 (ring
# and recursive halving priced as model-scaling prices them with the run's link figures,
# automatic's pick named); and COLLECTIVE=all_gather on 2 hosts x 2 ranks (tutti's ring and
# hierarchical, Gloo's ring), whose runs must be all_gather's, checked, and bad COLLECTIVE
# settings refused.
# With TORCH_PY (a Python with torch and tutti_torch: scripts/torch-tests.sh passes it), the
# torch entries instead: 2 hosts x 2 ranks, torch_tutti, torch_tutti@gloo and torch_gloo at
# 64-128 KiB, 2 rounds: each cell the median of its runs (the mean of the two), the ratio to torch_gloo, the
# transport each tutti run reported (cluster where unforced, gloo where asked), and a bad
# torch entry refused; then reduce_scatter_tensor through both backends (COLLECTIVE).
#
#   bench/netns/compare_hosts_selftest.sh BIN_DIR [TORCH_PY]
#                                 (BIN_DIR: where tutti-bench and tutti-bench-gloo are)
#
# Exit status: 0 passed; 1 a check failed; 77 skipped where compare_hosts.sh cannot run (not
# root, no network namespaces), which ctest reports as skipped (SKIP_RETURN_CODE 77).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
bin_dir="${1:?usage: compare_hosts_selftest.sh BIN_DIR [TORCH_PY]}"
torch_py="${2:-}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

# shellcheck source=bench/selftest_lib.sh
source "$here/../selftest_lib.sh"

# first_run SETTING...: compare_hosts.sh with these settings, its table in $work/table and its
# runs in $work/run; exits 77 where it cannot run here, 1 (showing why) where it failed.
first_run() {
  local st=0
  env "$@" OUT="$work/run" bash "$here/compare_hosts.sh" >"$work/table" 2>"$work/err" || st=$?
  if ((st == 77)); then
    cat "$work/table"
    exit 77
  fi
  if ((st != 0)); then
    bad "compare_hosts.sh $* exited $st"
    cat "$work/table" "$work/err"
    exit 1
  fi
  pass "compare_hosts.sh ran (exit 0: every result checked)"
}

# collective_run COLLECTIVE ALGOS SETTING...: one round at 64 KiB on 2 hosts x 2 ranks; every
# run (checked by its program: exit 1 on a wrong element) must say it ran COLLECTIVE.
collective_run() {
  local c="$1" algos="$2" a f
  shift 2
  first_run HOSTS=2 RANKS_PER_HOST=2 MINBYTES=64K MAXBYTES=64K ROUNDS=1 ITERS=3 COLLECTIVE="$c" \
    ALGOS="$algos" "$@"
  for a in $algos; do
    f="$work/run/$a.r1.json"
    if grep -q "\"collective\": \"$c\"" "$f" 2>/dev/null && grep -q "^| 65536 |" "$work/table"; then
      pass "$a ran $c"
    else
      bad "$a: no $c run in $f, or no 64 KiB row"
    fi
  done
  rm -rf "$work/run"
}

if [[ -n "$torch_py" ]]; then
  algos=(torch_tutti torch_tutti@gloo torch_gloo)
  first_run HOSTS=2 RANKS_PER_HOST=2 MINBYTES=64K MAXBYTES=128K ROUNDS=2 ITERS=5 STAT=median \
    ALGOS="${algos[*]}" BIN_DIR="$bin_dir" TORCH_PY="$torch_py"
  refuses "$here/compare_hosts.sh" ALGOS=torch_tutti@nccl \
    "ALGOS: 'torch_tutti@nccl': the torch entries are torch_gloo, torch_tutti and torch_tutti@T (T: shm, gloo, cluster)"
  python3 - "$work/table" "$work/run" "${algos[@]}" <<'PY' || failures=$((failures + 1))
import csv, statistics, sys
table, out, algos = sys.argv[1], sys.argv[2], sys.argv[3:]
heads, rows = None, {}
for line in open(table):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells and cells[0] == "bytes":
        heads = cells
    elif cells and cells[0].isdigit():
        rows[int(cells[0])] = dict(zip(heads, cells))
times, impls = {}, {}
for a in algos:
    for r in (1, 2):
        for row in csv.reader(open(f"{out}/{a}.r{r}.csv")):
            if len(row) == 7 and row[2].isdigit():
                times.setdefault((a, int(row[2])), []).append(float(row[3]))
                impls.setdefault(a, set()).add(row[0])
ok = sorted(rows) == [65536, 131072]
print(("ok  " if ok else "FAIL") + f" rows for 64 and 128 KiB (got {sorted(rows)})")
want_impl = {"torch_tutti": {"tutti:cluster"}, "torch_tutti@gloo": {"tutti:gloo"},
             "torch_gloo": {"gloo"}}
for a in algos:
    good = impls.get(a) == want_impl[a]
    ok &= good
    print(("ok  " if good else "FAIL") + f" {a} ran as {impls.get(a)}")
for s, row in sorted(rows.items()):
    med = {a: statistics.median(times[(a, s)]) for a in algos if len(times.get((a, s), [])) == 2}
    for a in algos:
        good = a in med and row.get(a) == f"{med[a]:.1f}"
        ok &= good
        print(("ok  " if good else "FAIL") + f" {a} at {s}: {row.get(a)} (median of {times.get((a, s))})")
    for a in ("torch_tutti", "torch_tutti@gloo"):
        want = f"{med[a] / med['torch_gloo']:.2f}" if len(med) == 3 else None
        good = want is not None and row.get(f"{a} / torch_gloo") == want
        ok &= good
        print(("ok  " if good else "FAIL") + f" {a} / torch_gloo at {s}: {row.get(f'{a} / torch_gloo')} (want {want})")
sys.exit(0 if ok else 1)
PY
  collective_run reduce_scatter "torch_tutti torch_gloo" BIN_DIR="$bin_dir" TORCH_PY="$torch_py"
  verdict compare_hosts_selftest
  exit 0
fi

# Usage errors come before anything is made, root or not.
export MINBYTES=4K MAXBYTES=8K BIN_DIR="$bin_dir"
refuses "$here/compare_hosts.sh" ITERS=0 "ITERS must be a positive integer"
refuses "$here/compare_hosts.sh" STAT=mean "STAT must be best or median"
refuses "$here/compare_hosts.sh" CPU=1 \
  "CPU=1 needs ITERS and one size (MINBYTES = MAXBYTES): CPU time is counted per run"
refuses "$here/compare_hosts.sh" COLLECTIVE=broadcast \
  "COLLECTIVE must be all_reduce, all_gather or reduce_scatter"
ALGOS="ring gloo_ring" refuses "$here/compare_hosts.sh" COLLECTIVE=reduce_scatter \
  "gloo_ring: Gloo has no reduce_scatter"
ALGOS="ring gloo_bcube" refuses "$here/compare_hosts.sh" COLLECTIVE=all_gather \
  "gloo_bcube: Gloo's all_gather is one ring: gloo_ring"
RATE=1gbit TBF_PEAKRATE=1.05gbit refuses "$here/compare_hosts.sh" TBF_PEAK_FRAMES=0 \
  "TBF_PEAK_FRAMES must be a whole number of frames, 1 or more"
RATE=1gbit refuses "$here/compare_hosts.sh" TBF_PEAK_FRAMES=1 \
  "TBF_PEAK_FRAMES sizes TBF_PEAKRATE's bucket: set TBF_PEAKRATE (and RATE) as well"
RATE=1gbit refuses "$here/compare_hosts.sh" SHAPER=netem "SHAPER must be tbf or htb"
refuses "$here/compare_hosts.sh" SHAPER=htb "SHAPER=htb shapes at RATE: set RATE as well"
RATE=1gbit refuses "$here/compare_hosts.sh" SHAPER=htb \
  "SHAPER=htb needs FRAMES=whole (its one-frame buckets would split 64 KiB GSO packets)"
SHAPER=htb RATE=1gbit FRAMES=whole refuses "$here/compare_hosts.sh" TBF_BURST=64k \
  "TBF_BURST sets tbf: not with SHAPER=htb (HTB_BURST sets htb's buckets)"
RATE=1gbit refuses "$here/compare_hosts.sh" HTB_BURST=9k \
  "HTB_BURST sets htb's buckets: set SHAPER=htb (and RATE) as well"
refuses "$here/compare_hosts.sh" MODEL=yes "MODEL must be 1 or unset"
HOSTS=1 refuses "$here/compare_hosts.sh" MODEL=1 \
  "MODEL=1 prices a link between hosts: HOSTS must be 2 or more"
unset MINBYTES MAXBYTES BIN_DIR

first_run HOSTS=2 RANKS_PER_HOST=1 MINBYTES=4K MAXBYTES=16K ROUNDS=3 ITERS=3 STAT=median \
  ALGOS="ring gloo_ring_chunked" BIN_DIR="$bin_dir"
if grep -qF "time per call (µs), median of 3" "$work/table"; then
  pass "table of medians"
else
  bad "no 'median of 3' heading"
fi
if grep -qF "model next to the measurement" "$work/table"; then
  bad "a model section without MODEL=1"
else
  pass "no model section without MODEL=1"
fi

python3 - "$work/table" "$work/run" <<'PY' || failures=$((failures + 1))
import csv, statistics, sys
table, out = sys.argv[1], sys.argv[2]
algos = ["ring", "gloo_ring_chunked"]
rows = {}
for line in open(table):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells and cells[0].isdigit():
        rows[int(cells[0])] = cells[1:3]
want = {}
for a in algos:
    for r in (1, 2, 3):
        for row in csv.reader(open(f"{out}/{a}.r{r}.csv")):
            if len(row) == 7 and row[2].isdigit():
                want.setdefault((a, int(row[2])), []).append(float(row[3]))
sizes = [4096, 8192, 16384]
ok = sorted(rows) == sizes
print(("ok  " if ok else "FAIL") + f" rows for {sizes} (got {sorted(rows)})")
for s in sizes:
    for i, a in enumerate(algos):
        times = want.get((a, s), [])
        med = f"{statistics.median(times):.1f}" if len(times) == 3 else None
        got = rows.get(s, ["?", "?"])[i]
        good = med is not None and got == med
        ok &= good
        print(("ok  " if good else "FAIL") + f" {a} at {s}: {got} (median of {times})")
sys.exit(0 if ok else 1)
PY

# CPU=1: one size, one round of 20 calls (+ 5 warm-up) per algorithm.
st=0
HOSTS=2 RANKS_PER_HOST=1 MINBYTES=64K MAXBYTES=64K ROUNDS=1 ITERS=20 CPU=1 \
  ALGOS="ring gloo_ring_chunked" BIN_DIR="$bin_dir" OUT="$work/cpu" \
  bash "$here/compare_hosts.sh" >"$work/cpu_table" 2>"$work/err" || st=$?
if ((st != 0)); then
  bad "compare_hosts.sh CPU=1 exited $st"
  cat "$work/cpu_table" "$work/err"
else
  python3 - "$work/cpu_table" "$work/cpu" <<'PY' || failures=$((failures + 1))
import sys
table, out = sys.argv[1], sys.argv[2]
rows = {}
for line in open(table):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) == 4 and cells[0] in ("ring", "gloo_ring_chunked"):
        rows[cells[0]] = cells[1:3]
ok = True
for a in ("ring", "gloo_ring_chunked"):
    ranks = [line.split() for line in open(f"{out}/{a}.r1.cpu") if line.strip()]
    user = sum(float(r[1]) for r in ranks) * 1e6 / 25
    sys_ = sum(float(r[2]) for r in ranks) * 1e6 / 25
    want = [f"{user:.1f}", f"{sys_:.1f}"]
    good = [r[0] for r in ranks] == ["0", "1"] and user + sys_ > 0 and rows.get(a) == want
    ok &= good
    print(("ok  " if good else "FAIL") + f" CPU per call of {a}: {rows.get(a)} (from its ranks' times: {want})")
sys.exit(0 if ok else 1)
PY
fi

# SHAPER=htb: links that carry at most RATE. On 2 hosts x 1 rank, ring's 1 MiB all_reduce
# sends 1 MiB each way (two steps of 512 KiB) over a link of 1 Gbit/s: no call takes less than
# 8.39 ms of payload alone (a loaded machine only makes it slower). The check asks for half
# that, 4.19 ms, which unshaped links (about 1 ms) do not come near.
# MODEL=1 in the same run: the model's table prices ring and recursive halving as model-scaling
# does with the link figures the run printed, each against its measured time, and names the
# policy automatic picks with that one's time against the faster of the two.
st=0
SHAPER=htb RATE=1gbit FRAMES=whole HOSTS=2 RANKS_PER_HOST=1 MINBYTES=1M MAXBYTES=1M ROUNDS=1 \
  ITERS=3 ALGOS="ring recursive_halving automatic" MODEL=1 BIN_DIR="$bin_dir" OUT="$work/htb" \
  bash "$here/compare_hosts.sh" >"$work/htb_table" 2>"$work/err" || st=$?
if ((st != 0)); then
  bad "compare_hosts.sh SHAPER=htb exited $st"
  cat "$work/htb_table" "$work/err"
else
  want="links: tc htb rate 1gbit ceil 1gbit burst 9064 cburst 9064 quantum 9064 (bytes, one class)"
  if grep -qF "$want" "$work/htb_table"; then
    pass "htb links as described"
  else
    bad "no '$want' in the table's heading"
  fi
  us="$(awk -F'|' '$2 + 0 == 1048576 { print $3 + 0; exit }' "$work/htb_table")"
  if [[ -n "$us" ]] && awk -v t="$us" 'BEGIN { exit !(t >= 4194) }'; then
    pass "ring at 1 MiB over htb links: $us us, at least half the link's minimum (4,194)"
  else
    bad "ring at 1 MiB over 1 Gbit/s htb links took '$us' us: under 4,194 the links are not shaped"
  fi
  python3 - "$work/htb_table" "$work/htb" "$bin_dir/model-scaling" <<'PY' || failures=$((failures + 1))
import csv, re, subprocess, sys
table, out, model = sys.argv[1:]
text = open(table).read()
ok = "## The α-β-γ model next to the measurement" in text
print(("ok  " if ok else "FAIL") + " a model section")
cmd = re.search(r"^- `model-scaling (--inside gloo [^`]*)`$", text, re.M)
good = bool(cmd and "--ranks-per-cpu 0 " in cmd.group(1)
            and re.search(r"^- link: [0-9.]+ Gbit/s, α [0-9.]+ µs, the median of 3 worlds' figures",
                          text, re.M))
ok &= good
print(("ok  " if good else "FAIL") + f" priced with the three worlds' link figures, uncrowded: {cmd and cmd.group(1)}")
model_part = text[text.find("## The α-β-γ model"):]
heads = rows = None
for line in model_part.splitlines():
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if cells[0] == "bytes":
        heads = cells
    elif heads and cells[0] == "1048576":
        rows = dict(zip(heads, cells))
want = {}
if cmd:
    lines = subprocess.run([model] + cmd.group(1).split(), capture_output=True, text=True).stdout.splitlines()
    measured = {}
    for a in ("ring", "recursive_halving", "automatic"):
        for r in csv.reader(open(f"{out}/{a}.r1.csv")):
            if len(r) == 7 and r[2] == "1048576":
                measured[a] = float(r[3])
    pick = None
    for line in lines[1:]:
        c = line.split(",")
        if c[4] in ("ring", "recursive_halving"):
            want[c[4]] = f"{float(c[5]):,.0f} ({float(c[5]) / measured[c[4]]:.2f})"
            pick = c[6]
    fast = min(measured["ring"], measured["recursive_halving"])
    # the pick's time against the faster of the two, or its name alone where it did not run
    want["automatic picks"] = f"{pick} ({measured[pick] / fast:.2f})" if pick in measured else pick
for k in ("ring", "recursive_halving", "automatic picks"):
    good = rows is not None and want.get(k) is not None and rows.get(k) == want[k]
    ok &= good
    print(("ok  " if good else "FAIL") + f" model table, {k} at 1 MiB: {rows and rows.get(k)} (want {want.get(k)})")
sys.exit(0 if ok else 1)
PY
fi

collective_run all_gather "ring hierarchical@cluster gloo_ring" BIN_DIR="$bin_dir"

verdict compare_hosts_selftest
