#!/usr/bin/env bash
# A busy machine, on purpose: keeps every CPU loaded the way a shared developer or CI machine
# is — processes starting and ending, memory allocated and touched, and plain computing — so
# that tests can be checked for robustness beside it.
#
#   bash scripts/busy.sh [SECONDS]                 load for SECONDS (default: until killed)
#   bash scripts/busy.sh [-n N] -- COMMAND [ARG]   run COMMAND N times (default 1) under load;
#                                                  stops at the first failure, exits with its status
# BUSY_WORKERS (default: the number of online CPUs) workers each repeat, in random order:
#   - spin for 20-200 ms (a compute-bound neighbour);
#   - allocate 32-256 MiB and write one byte in every page (page faults, reclaim pressure);
#   - start and end 10-50 short processes (fork, exec, exit: the scheduler's churn).
set -euo pipefail

runs=1
secs=0
cmd=()
while (($#)); do
  case "$1" in
    -n) runs="$2"; shift 2 ;;
    --) shift; cmd=("$@"); break ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) secs="$1"; shift ;;
  esac
done
command -v perl >/dev/null || { echo "busy.sh: needs perl (perl-base)" >&2; exit 2; }

workers="${BUSY_WORKERS:-$(nproc 2>/dev/null || echo 2)}"

worker() {
  local seed="$1" i n
  RANDOM="$seed"
  while :; do
    case $((RANDOM % 3)) in
      0) perl -MTime::HiRes=time -e '$e = time + (20 + rand(180)) / 1000; 1 while time < $e' ;;
      1) perl -e '$x = "a" x ((32 + int(rand(224))) << 20);
                  substr($x, $_ << 12, 1) = "b" for 0 .. (length($x) >> 12) - 1' ;;
      2) n=$((10 + RANDOM % 41)); for ((i = 0; i < n; i++)); do /bin/true; done ;;
    esac
  done
}

pids=()
stop_load() {
  local p
  for p in "${pids[@]}"; do kill -- "-$p" 2>/dev/null || kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap stop_load EXIT
trap 'exit 130' INT TERM

set -m  # each worker in its own process group, so stop_load ends its children too
for ((w = 0; w < workers; w++)); do
  worker "$((w * 7919 + $$))" &
  pids+=("$!")
done
set +m
echo "busy.sh: $workers workers (pids ${pids[*]})" >&2

if ((${#cmd[@]} == 0)); then
  if ((secs > 0)); then sleep "$secs"; else while :; do sleep 3600; done; fi
  exit 0
fi
for ((r = 1; r <= runs; r++)); do
  echo "busy.sh: run $r of $runs under load: ${cmd[*]}" >&2
  start=$SECONDS
  status=0
  "${cmd[@]}" || status=$?
  if ((status != 0)); then
    echo "busy.sh: run $r of $runs FAILED after $((SECONDS - start)) s" >&2
    exit "$status"
  fi
  echo "busy.sh: run $r of $runs passed in $((SECONDS - start)) s" >&2
done
echo "busy.sh: all $runs runs passed under load" >&2
