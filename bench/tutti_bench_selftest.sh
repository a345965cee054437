#!/usr/bin/env bash
# tutti-bench end to end: the table, the JSON and the plot of a real run, and (when the peers
# are built) --compare. Registered as ctest bench.tutti_bench.selftest.
#   bench/tutti_bench_selftest.sh BUILD_BENCH_DIR
# Exit status: 0 passed; 1 a check failed; 77 skipped (no python3).
set -euo pipefail

dir="$(cd "${1:?usage: tutti_bench_selftest.sh BUILD_BENCH_DIR}" && pwd)"
bin="$dir/tutti-bench"
[[ -x "$bin" ]] || { echo "FAIL: $bin not built"; exit 1; }
command -v python3 >/dev/null || { echo "SKIP: python3 not installed"; exit 77; }
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# 1. A sweep over every type and op: the nccl-tests table, #wrong 0 on every row, the JSON.
"$bin" all_reduce -b 8 -e 64K -f 8 --np 3 -c 1 -n 2 -w 1 -d float,bfloat16,int32 -o sum,max \
  --json "$work/ar.json" >"$work/ar.txt"
grep -q '^#       size         count      type   redop  root      time' "$work/ar.txt" ||
  fail "no nccl-tests header"
grep -q '^# Out of bounds values : 0 OK$' "$work/ar.txt" || fail "footer not OK"
grep -q '^# Collective test concluded: all_reduce$' "$work/ar.txt" || fail "no conclusion line"
rows=$(grep -c '^ ' "$work/ar.txt")
# sizes 8, 64, 512, 4K, 32K (5) x 3 types x 2 ops
[[ "$rows" == 30 ]] || fail "expected 30 rows, got $rows"
# #wrong is the 11th and 17th column of every row: all 0.
awk '/^ / && ($11 != 0 || $17 != 0) { bad = 1 } END { exit bad }' "$work/ar.txt" ||
  fail "a row has #wrong != 0"

python3 - "$work/ar.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["format"] == "tutti-bench/1", d["format"]
(run,) = d["runs"]
assert run["impl"] == "tutti" and run["collective"] == "all_reduce" and run["ranks"] == 3, run
assert run["transport"] == "shm" and run["algo"] == "automatic", run
res = run["results"]
assert len(res) == 60, len(res)  # 30 rows x (out-of-place, in-place)
for r in res:
    assert r["wrong"] == 0, r
    assert r["iters"] == 2, r
    assert r["time_us"] > 0 and r["p50_us"] > 0 and r["p99_us"] >= r["p50_us"], r
    assert abs(r["algbw"] - r["size"] / r["time_us"] / 1e3) <= 1e-6 * max(1, r["algbw"]), r
    assert abs(r["busbw"] - r["algbw"] * 4 / 3) <= 1e-6 * max(1, r["busbw"]), r
assert {r["type"] for r in res} == {"float", "bfloat16", "int32"}
assert {r["redop"] for r in res} == {"sum", "max"}
assert sorted({r["size"] for r in res}) == [8, 64, 512, 4096, 32768]
PY

# 2. The plot of that file (when gnuplot is there).
if command -v gnuplot >/dev/null; then
  "$dir/plot" -o "$work/ar.png" --type float --op sum "$work/ar.json" 2>/dev/null
  [[ "$(head -c 8 "$work/ar.png" | od -An -tx1 | tr -d ' \n')" == 89504e470d0a1a0a ]] ||
    fail "plot did not write a PNG"
else
  echo "note: gnuplot not installed; plot not checked"
fi

# 3. A usage error and a check that cannot be exact exit 2 with a message.
if "$bin" all_reduce -b 1M -e 1K 2>"$work/err.txt"; then fail "-b > -e accepted"; fi
grep -q 'exceeds -e/--maxbytes' "$work/err.txt" || fail "no message for -b > -e"
set +e
"$bin" all_reduce --np 40 -d bfloat16 -b 64 -e 64 -n 1 -w 1 >/dev/null 2>"$work/err.txt"
rc=$?
set -e
[[ "$rc" == 2 ]] || fail "bfloat16 sum over 40 ranks: exit $rc, want 2"
grep -q "exact integers" "$work/err.txt" || fail "no message for an inexact check"

# 4. --compare with the peers that are built: one merged JSON with every run.
peers=()
[[ -x "$dir/tutti-bench-gloo" ]] && peers+=(gloo)
[[ -x "$dir/tutti-bench-mpi" ]] && command -v mpirun >/dev/null && peers+=(mpi)
if ((${#peers[@]} > 0)) && command -v gnuplot >/dev/null; then
  list="$(IFS=,; echo "${peers[*]}")"
  (cd "$work" && OMPI_MCA_rmaps_base_oversubscribe=1 "$bin" all_reduce -b 8 -e 4K -f 8 --np 2 \
    -n 2 -w 1 --compare "$list" --json "$work/cmp.json" --plot "$work/cmp.png") >"$work/cmp.txt"
  grep -q '^# side by side' "$work/cmp.txt" || fail "no side-by-side table"
  want=1
  for p in "${peers[@]}"; do [[ "$p" == gloo ]] && want=$((want + 4)) || want=$((want + 1)); done
  python3 - "$work/cmp.json" "$want" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
runs = d["runs"]
assert len(runs) == int(sys.argv[2]), [r["label"] for r in runs]
assert runs[0]["impl"] == "tutti"
for run in runs:
    assert run["results"], run["label"]
    for r in run["results"]:
        assert r["wrong"] == 0, (run["label"], r)
PY
  [[ -s "$work/cmp.png" ]] || fail "--compare wrote no plot"
  # A collective with one implementation in each peer: one run per peer, labelled by the peer.
  (cd "$work" && OMPI_MCA_rmaps_base_oversubscribe=1 "$bin" broadcast -b 8 -e 4K -f 8 --np 2 \
    -n 2 -w 1 --compare "$list" --json "$work/bc.json" --plot "$work/bc.png") >"$work/bc.txt"
  python3 - "$work/bc.json" "$((${#peers[@]} + 1))" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert len(runs) == int(sys.argv[2]), [r["label"] for r in runs]
assert {r["label"] for r in runs[1:]} <= {"gloo", "mpi"}, [r["label"] for r in runs]
for run in runs:
    assert run["collective"] == "broadcast" and run["results"], run["label"]
    assert all(r["wrong"] == 0 and r["placement"] == "in-place" for r in run["results"])
PY
else
  echo "note: no peer built (or no gnuplot); --compare not checked"
fi
echo "PASS"
