#!/usr/bin/env bash
# Self-test of bench/plot: writes a few tutti-bench/1 JSON files with SYNTHETIC numbers (made
# up here, not measurements), plots them and checks the PNG (signature, IHDR width/height), the
# exact --markdown table for a small input, and that each input error exits 2 with its message.
#
#   bench/plot_selftest.sh          (or: bash bench/plot_selftest.sh)
#
# Exit status: 0 passed; 1 a check failed; 77 skipped (no gnuplot or no python3), which ctest
# reports as skipped with the test property SKIP_RETURN_CODE 77.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
plot="$here/plot"

if ! command -v python3 >/dev/null 2>&1; then
  echo "plot_selftest: SKIP: python3 not installed"
  exit 77
fi
if ! command -v gnuplot >/dev/null 2>&1; then
  echo "plot_selftest: SKIP: gnuplot not installed (apt-get install gnuplot-nox)"
  exit 77
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
cd "$work"

# shellcheck source=bench/selftest_lib.sh
source "$here/selftest_lib.sh"

# --- synthetic input --------------------------------------------------------------------------
# Three files, three implementations; rows from a simple latency + size/bandwidth model.
# run_a.json: two tutti runs, out-of-place and in-place rows; run_b.json: an MPI run with float
# and double rows (so it splits into two lines); run_c.json: a Gloo run and a broadcast run.
python3 - <<'PY'
import json

def run(label, impl, transport, algo, lat_us, peak_gbs, combos, collective="all_reduce"):
    rows = []
    for typ, op, root, placement in combos:
        for k in range(3, 27, 2):  # 8 B .. 64 MiB
            size = 2 ** k
            t = lat_us + size / (peak_gbs * 1e3) * (1.1 if placement == "in-place" else 1.0)
            t *= 1.3 if typ == "double" else 1.0
            algbw = size / t / 1e3
            rows.append({"size": size, "count": size // 4, "type": typ, "redop": op,
                         "root": root, "placement": placement, "iters": 100,
                         "time_us": round(t, 3), "p50_us": round(t, 3),
                         "p99_us": round(t * 1.5, 3), "algbw": algbw,
                         "busbw": algbw * 1.5, "wrong": 0})
    return {"impl": impl, "label": label, "collective": collective, "transport": transport,
            "algo": algo, "ranks": 4, "library": "tutti 0.1.0",
            "date": "2026-11-23 10:00:00 UTC", "host": "synthetic_host", "cpu": "none",
            "cores": 2, "command": "synthetic data for bench/plot_selftest.sh", "iters": 0,
            "warmup": 5, "check": True, "results": rows}

both = [("float", "sum", -1, "out-of-place"), ("float", "sum", -1, "in-place")]
def dump(name, runs):
    with open(name, "w") as f:
        json.dump({"format": "tutti-bench/1", "runs": runs}, f)

dump("run_a.json", [run("tutti shm automatic", "tutti", "shm", "automatic", 3.0, 8.0, both),
                    run("tutti shm ring", "tutti", "shm", "ring", 5.0, 9.5, both)])
dump("run_b.json", [run("mpi", "mpi", "mpi", "native", 2.0, 6.0,
                        [("float", "sum", -1, "out-of-place"),
                         ("double", "sum", -1, "out-of-place")])])
dump("run_c.json", [run("gloo ring_chunked", "gloo", "tcp", "ring_chunked", 40.0, 2.0, both),
                    run("tutti shm broadcast", "tutti", "shm", "automatic", 2.0, 10.0,
                        [("float", "none", 0, "out-of-place")], collective="broadcast")])

# A small file with exact numbers for the --markdown check; "mpi" lacks the 1 MiB row.
def row(size, t, busbw, placement="out-of-place"):
    return {"size": size, "count": size // 4, "type": "float", "redop": "sum", "root": -1,
            "placement": placement, "iters": 10, "time_us": t, "p50_us": t, "p99_us": t,
            "algbw": busbw / 1.5, "busbw": busbw, "wrong": None}
small_a = run("tutti shm automatic", "tutti", "shm", "automatic", 1, 1, [])
small_a["results"] = [row(8, 2.5, 0.0048), row(1024, 3.25, 0.47), row(1048576, 150.0, 10.5),
                      row(8, 2.625, 0.0046, "in-place"), row(1024, 3.5, 0.44, "in-place"),
                      row(1048576, 160.0, 9.8, "in-place")]
small_b = run("mpi", "mpi", "mpi", "native", 1, 1, [])
small_b["results"] = [row(8, 1.75, 0.00686), row(1024, 2.0, 0.768)]
dump("small.json", [small_a, small_b])
PY

# Prints "WIDTH HEIGHT" of a PNG from its IHDR chunk, or "not-a-png".
png_size() {
  python3 - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read(24)
if len(data) < 24 or data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
    print("not-a-png")
else:
    print("%d %d" % struct.unpack(">II", data[16:24]))
PY
}

# expect_png NAME WxH ARGS...: bench/plot ARGS exits 0, says where it wrote, writes a PNG.
expect_png() {
  local name="$1" want="$2"
  shift 2
  local rc=0
  "$plot" "$@" >stdout.txt 2>stderr.txt || rc=$?
  local out="${*: -1}"
  if ((rc != 0)); then
    bad "$name: exit status $rc, expected 0; stderr: $(cat stderr.txt)"
  elif [[ ! -s "$out" ]]; then
    bad "$name: $out not written"
  elif ! grep -qF "wrote $out" stderr.txt; then
    bad "$name: stderr does not name the output: $(cat stderr.txt)"
  elif [[ "$(png_size "$out")" != "${want/x/ }" ]]; then
    bad "$name: $out: PNG size '$(png_size "$out")', expected '${want/x/ }'"
  else
    pass "$name ($want PNG)"
  fi
}

# expect_error NAME MESSAGE ARGS...: bench/plot ARGS exits 2 and prints MESSAGE on stderr.
expect_error() {
  local name="$1" message="$2"
  shift 2
  local rc=0
  "$plot" "$@" >stdout.txt 2>stderr.txt || rc=$?
  if ((rc != 2)); then
    bad "$name: exit status $rc, expected 2; stderr: $(cat stderr.txt)"
  elif ! grep -qF -- "$message" stderr.txt; then
    bad "$name: stderr lacks '$message': $(cat stderr.txt)"
  else
    pass "$name (exit 2)"
  fi
}

# --- plots ------------------------------------------------------------------------------------
expect_png "three files" 1400x600 run_a.json run_b.json run_c.json --collective all_reduce \
  -o three.png
expect_png "both placements, algbw, custom size and title" 1000x500 run_a.json \
  --placement both --metric algbw --size 1000x500 --title 'my_title "quoted" it'"'"'s' \
  -o both.png
expect_png "filters" 1400x600 run_b.json run_a.json --type float --op sum -o filtered.png
expect_png "output name with a space" 1400x600 small.json --collective all_reduce -o "name with space.png"

# --- markdown ---------------------------------------------------------------------------------
cat >expected.md <<'MD'
| size | tutti shm automatic time (µs) | tutti shm automatic busbw (GB/s) | mpi time (µs) | mpi busbw (GB/s) |
|---:|---:|---:|---:|---:|
| 8 B | 2.50 | 0.0048 | 1.75 | 0.00686 |
| 1 KiB | 3.25 | 0.47 | 2.00 | 0.768 |
| 1 MiB | 150 | 10.5 | - | - |
MD
if "$plot" small.json --markdown -o small.png >got.md 2>stderr.txt; then
  if diff -u expected.md got.md; then
    pass "--markdown table"
  else
    bad "--markdown table differs (above)"
  fi
else
  bad "--markdown: exit status $?; stderr: $(cat stderr.txt)"
fi

cat >expected.md <<'MD'
| size | tutti shm automatic (out-of-place) time (µs) | tutti shm automatic (out-of-place) busbw (GB/s) | tutti shm automatic (in-place) time (µs) | tutti shm automatic (in-place) busbw (GB/s) | mpi time (µs) | mpi busbw (GB/s) |
|---:|---:|---:|---:|---:|---:|---:|
| 8 B | 2.50 | 0.0048 | 2.62 | 0.0046 | 1.75 | 0.00686 |
| 1 KiB | 3.25 | 0.47 | 3.50 | 0.44 | 2.00 | 0.768 |
| 1 MiB | 150 | 10.5 | 160 | 9.80 | - | - |
MD
if "$plot" small.json --placement both --markdown -o small.png >got.md 2>stderr.txt; then
  if diff -u expected.md got.md; then
    pass "--markdown table, --placement both (a run split by placement)"
  else
    bad "--markdown table with --placement both differs (above)"
  fi
else
  bad "--markdown --placement both: exit status $?; stderr: $(cat stderr.txt)"
fi

# --- errors -----------------------------------------------------------------------------------
printf 'this is not JSON\n' >not_json.json
printf '{"format": "nccl-tests/1", "runs": []}\n' >wrong_format.json
expect_error "missing file" "missing.json: no such file" missing.json -o e.png
expect_error "unreadable file (a directory)" "cannot read" . -o e.png
expect_error "not JSON" "not_json.json: not JSON" not_json.json -o e.png
expect_error "wrong format" "unsupported format 'nccl-tests/1'" wrong_format.json -o e.png
expect_error "several collectives" \
  "several collectives (all_reduce, broadcast); pick one with --collective" \
  run_a.json run_c.json -o e.png
expect_error "unknown collective" "no run of collective 'gather'" run_a.json --collective gather \
  -o e.png
expect_error "no rows after filtering" "no rows left to plot after filtering" run_a.json \
  --type double -o e.png
expect_error "output directory missing" "does not exist" run_a.json -o no/such/dir/e.png
# No gnuplot on PATH: a PATH holding only python3 (the real interpreter, not a shim).
mkdir nognuplot
ln -s "$(python3 -c 'import sys; print(sys.executable)')" nognuplot/python3
rc=0
PATH="$work/nognuplot" "$plot" run_a.json -o e.png >stdout.txt 2>stderr.txt || rc=$?
if ((rc == 2)) && grep -qF "apt-get install gnuplot-nox" stderr.txt; then
  pass "gnuplot not installed (exit 2)"
else
  bad "gnuplot not installed: exit status $rc; stderr: $(cat stderr.txt)"
fi
[[ ! -e e.png ]] || bad "an error case wrote e.png"

verdict plot_selftest
