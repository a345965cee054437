# shellcheck shell=bash
# What the benchmark scripts' self-tests share (bench/plot_selftest.sh,
# bench/compare_selftest.sh, bench/netns/compare_hosts_selftest.sh): a line per check, "ok" or
# "FAIL", a count of the failed ones, and the verdict that ends the test. Sourced.

failures=0
pass() { printf 'ok   %s\n' "$*"; }
bad() {
  printf 'FAIL %s\n' "$*"
  failures=$((failures + 1))
}

# refuses SCRIPT SETTING MESSAGE ARG...: `env SETTING bash SCRIPT ARG...` must exit 2 and say
# "NAME: MESSAGE" on a line of its own (NAME: SCRIPT's file name), as a usage error does.
refuses() {
  local script="$1" setting="$2" message="$3" st=0 said
  shift 3
  said="$(env "$setting" bash "$script" "$@" 2>&1)" || st=$?
  if ((st == 2)) && grep -qxF "$(basename "$script"): $message" <<<"$said"; then
    pass "$setting refused (exit 2)"
  else
    bad "$setting: exit $st, said: ${said:0:300}"
  fi
}

# verdict NAME: exits 1 naming the number of failed checks, or says NAME passed.
verdict() {
  if ((failures)); then
    echo "$1: $failures check(s) FAILED"
    exit 1
  fi
  echo "$1: passed"
}
