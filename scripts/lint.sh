#!/usr/bin/env bash
# Lint: clang-format (check only) and clang-tidy over tutti's sources.
#   bash scripts/lint.sh            both
#   bash scripts/lint.sh format     clang-format only
#   bash scripts/lint.sh tidy       clang-tidy only
# clang-tidy uses build/release/compile_commands.json (configured on demand)
# and checks every header (through one generated TU and HeaderFilterRegex) and
# the tests that instantiate the library over each transport (list below).
#   CLANG_FORMAT / CLANG_TIDY override the tools (defaults: clang-format-16,
#   clang-tidy-14; format fixes: clang-format-16 -i <files>).
#   TUTTI_LINT_BUILD: the tree whose compile_commands.json clang-tidy reads (default
#   build/release; configured there, never built: .ci/run lints in build/lint beside the tests)
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
cd "$TUTTI_ROOT"

what="${1:-all}"
# clang-format 16 is the reference formatter: 14 (Debian 12's default) mangles
# C++20 requires-clauses. apt-get install clang-format-16 (bookworm has it).
clang_format="${CLANG_FORMAT:-$(command -v clang-format-16 || command -v clang-format || true)}"
clang_tidy="${CLANG_TIDY:-$(command -v clang-tidy-14 || command -v clang-tidy || true)}"
status=0

if [[ "$what" == all || "$what" == format ]]; then
  [[ -n "$clang_format" ]] || tutti_die "clang-format not found (apt-get install clang-format)"
  tutti_step "clang-format ($("$clang_format" --version | head -n1))"
  if ! "$clang_format" --version | grep -qE 'version (1[6-9]|[2-9][0-9])\.'; then
    tutti_info "warning: clang-format < 16 formats C++20 requires-clauses badly;" \
      "install clang-format-16 or set CLANG_FORMAT"
  fi
  mapfile -t files < <(find include tests bench examples python/csrc -type f \
    \( -name '*.hpp' -o -name '*.cpp' -o -name '*.h' -o -name '*.cuh' -o -name '*.cu' \) \
    2>/dev/null | sort)
  if ((${#files[@]})); then
    "$clang_format" --dry-run -Werror "${files[@]}" || status=1
  fi
fi

if [[ "$what" == all || "$what" == tidy ]]; then
  [[ -n "$clang_tidy" ]] || tutti_die "clang-tidy not found (apt-get install clang-tidy)"
  tree="${TUTTI_LINT_BUILD:-build/release}"
  db="$tree/compile_commands.json"
  if ! grep -qF '/tests/lint/all_headers.cpp"' "$db" 2>/dev/null; then
    tutti_step "configuring the release preset in $tree for its compile_commands.json"
    cmake --preset release -B "$tree" >/dev/null
  fi
  tutti_step "clang-tidy ($("$clang_tidy" --version | grep -m1 -i version))"
  # What clang-tidy reads: every header (tests/lint/all_headers.cpp includes them all; findings
  # in any of them, HeaderFilterRegex) and the tests that instantiate the library's templates
  # over each transport and adapter, where findings inside instantiated code show. clang-tidy
  # costs about 30 s per test file whatever its size (it matches over every header the file
  # includes): these four cover what the other test files would re-read. The tests' own code
  # outside them is compiled with -Wall -Wextra -Werror and run under both sanitizers.
  files=("$tree/tests/lint/all_headers.cpp" tests/test_collectives.cpp tests/test_shm.cpp
         tests/test_gloo.cpp tests/test_bucketer.cpp)
  for f in "${files[@]}"; do
    grep -qF "/${f#"$tree"/}\"" "$db" || tutti_die "$f is not in $db (is Gloo installed?)"
  done
  # TUTTI_TEST_FEW_TYPES: the tests instantiate their templates for a few element types, as
  # under the sanitizers (tests/harness_common.hpp): the code checked is the same.
  printf '%s\n' "${files[@]}" |
    xargs -P "$(tutti_nproc)" -n 1 "$clang_tidy" -p "$tree" --quiet \
      --extra-arg=-DTUTTI_TEST_FEW_TYPES || status=1
fi

((status == 0)) && tutti_step "lint clean" || tutti_step "lint FAILED"
exit "$status"
