#!/usr/bin/env bash
# Builds tutti's libFuzzer targets with clang and runs each for a while.
#   bash tests/fuzz/run.sh [BUILD_DIR] [SECONDS_PER_TARGET] [TARGET...]
# BUILD_DIR defaults to build/fuzz, SECONDS_PER_TARGET to 30 (the CI run); TARGETs are names
# like store_server (default: every tests/fuzz/fuzz_*.cpp). CXX overrides the compiler
# (default: clang++-14, else clang++). Each target starts from its committed seed corpus
# (tests/fuzz/corpus/<name>) plus what earlier runs in BUILD_DIR found; new inputs go to
# BUILD_DIR/corpus/<name>, never into the repository. Findings (crash-*, leak-*, timeout-*)
# land in BUILD_DIR/findings/<name>. Exits non-zero on any finding or sanitizer report.
# The longer documented run (tests/RELIABILITY.md): bash tests/fuzz/run.sh /tmp/fuzz 300
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
build="${1:-$root/build/fuzz}"
seconds="${2:-30}"
shift $(($# > 2 ? 2 : $#))
cxx="${CXX:-$(command -v clang++-14 || command -v clang++ || true)}"
[[ -n "$cxx" ]] || { echo "fuzz: clang++ not found (apt-get install clang-14)" >&2; exit 1; }
jobs="$(nproc 2>/dev/null || echo 2)"
((jobs > 2)) && jobs=2

echo "== fuzz: configuring $build with $cxx"
cmake -S "$root" -B "$build" -DCMAKE_CXX_COMPILER="$cxx" -DCMAKE_BUILD_TYPE=Release \
  -DTUTTI_FUZZ=ON -DTUTTI_BUILD_TESTS=ON -DTUTTI_BUILD_EXAMPLES=OFF \
  -DTUTTI_BUILD_BENCHMARKS=OFF -DTUTTI_WITH_GLOO=OFF -DTUTTI_INSTALL=OFF >/dev/null

if (($#)); then
  names=("$@")
else
  names=()
  for src in "$root"/tests/fuzz/fuzz_*.cpp; do
    n="$(basename "$src" .cpp)"
    names+=("${n#fuzz_}")
  done
fi
targets=()
for n in "${names[@]}"; do targets+=("fuzz_$n"); done
echo "== fuzz: building ${targets[*]}"
cmake --build "$build" -j"$jobs" --target "${targets[@]}" >/dev/null

# One target for `seconds`; its summary line goes to $build/logs/<name>.line, and its failure,
# if any, to stderr.
fuzz_one() {
  local n="$1" exe corpus findings log rc=0 execs cov found line
  rm -f "$build/logs/$n.line"
  exe="$(find "$build" -type f -name "fuzz_$n" -perm -u+x | head -n 1)"
  [[ -n "$exe" ]] || { echo "fuzz: fuzz_$n was not built" >&2; return 1; }
  corpus="$build/corpus/$n"
  findings="$build/findings/$n"
  log="$build/logs/$n.log"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  # -timeout: one input running 10 s is a hang; -rss_limit_mb: a leak or runaway allocation.
  "$exe" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$findings/" "$corpus" "$root/tests/fuzz/corpus/$n" >"$log" 2>&1 || rc=$?
  execs="$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)"
  cov="$(grep -Eo 'cov: [0-9]+ ft: [0-9]+' "$log" | tail -n 1)"
  found="$(find "$findings" -type f | wc -l)"
  line="$(printf '%-14s rc=%d execs=%s %s corpus=%s findings=%s' "$n" "$rc" "${execs:-?}" \
    "${cov:-cov: ?}" "$(find "$corpus" -type f | wc -l)" "$found")"
  printf '%s\n' "$line" >"$build/logs/$n.line"
  echo "   $line"
  if ((rc != 0 || found != 0)); then
    echo "fuzz: $n FAILED; the end of $log:" >&2
    tail -n 40 "$log" >&2
    return 1
  fi
}

# Each target is one process on one core: `jobs` of them run at once.
status=0
summary=()
for ((i = 0; i < ${#names[@]}; i += jobs)); do
  batch=("${names[@]:i:jobs}")
  echo "== fuzz: ${batch[*]} for ${seconds}s"
  pids=()
  for n in "${batch[@]}"; do
    fuzz_one "$n" &
    pids+=("$!")
  done
  for pid in "${pids[@]}"; do
    wait "$pid" || status=1
  done
done
for n in "${names[@]}"; do
  summary+=("$(cat "$build/logs/$n.line" 2>/dev/null || echo "$n: no result")")
done

echo "== fuzz: summary (${seconds}s per target, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores)"
printf '   %s\n' "${summary[@]}"
exit "$status"
