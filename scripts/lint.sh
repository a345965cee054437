#!/usr/bin/env bash
# Lint: clang-format (check only) and clang-tidy over tutti's sources.
#   bash scripts/lint.sh            both
#   bash scripts/lint.sh format     clang-format only
#   bash scripts/lint.sh tidy       clang-tidy only
# clang-tidy uses build/release/compile_commands.json (configured on demand)
# and checks the generated header self-containment TUs (i.e. every public
# header, through HeaderFilterRegex) plus the tests.
#   CLANG_FORMAT / CLANG_TIDY override the tools (defaults: clang-format-16,
#   clang-tidy-14; format fixes: clang-format-16 -i <files>).
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
  db=build/release/compile_commands.json
  if [[ ! -f "$db" ]]; then
    tutti_step "configuring the release preset for $db"
    cmake --preset release >/dev/null
  fi
  tutti_step "clang-tidy ($("$clang_tidy" --version | grep -m1 -i version))"
  # The tests and the header-check TUs; not the compile-fail files (meant not to compile).
  mapfile -t files < <(sed -n 's/^ *"file": "\(.*\)",\{0,1\}$/\1/p' "$db" |
    grep -E '/header_check|/tests/' | grep -v '/tests/compile_fail/' | sort -u)
  # A header's own check TU only where no test includes it: clang-tidy reports what it finds
  # in every tutti header a TU includes (HeaderFilterRegex), so a header a test includes is
  # checked there, and its check TU (5 s each, nearly all of them) would find nothing new.
  # Which headers the tests include: the release build's depfiles; without one for every test
  # file (not built yet), every check TU runs.
  mapfile -t deps < <(find build/release/tests -name '*.o.d' -not -path '*header_check*' \
    -not -path '*/cfok_*' 2>/dev/null)
  tests=0
  for f in "${files[@]}"; do [[ "$f" == */header_check* ]] || tests=$((tests + 1)); done
  if ((${#deps[@]} >= tests)); then
    tested="$(grep -oh 'include/tutti/[A-Za-z0-9_/.-]*\.hpp' "${deps[@]}" | sort -u)"
    kept=()
    for f in "${files[@]}"; do
      if [[ "$f" == */header_check* ]]; then
        header="$(sed -n '1s/^#include <\(.*\)>$/\1/p' "$f")"
        [[ -n "$header" ]] && grep -qxF "include/$header" <<<"$tested" && continue
      fi
      kept+=("$f")
    done
    tutti_info "${#kept[@]} of ${#files[@]} files: the other header checks' headers are in tests"
    files=("${kept[@]}")
  fi
  # TUTTI_TEST_FEW_TYPES: the tests instantiate their templates for a few element types, as
  # under the sanitizers (tests/harness_common.hpp): the code checked is the same.
  if ((${#files[@]})); then
    printf '%s\n' "${files[@]}" |
      xargs -P "$(tutti_nproc)" -n 4 "$clang_tidy" -p build/release --quiet \
        --extra-arg=-DTUTTI_TEST_FEW_TYPES || status=1
  fi
fi

((status == 0)) && tutti_step "lint clean" || tutti_step "lint FAILED"
exit "$status"
