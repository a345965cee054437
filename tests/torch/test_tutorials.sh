#!/usr/bin/env bash
# torch's CPU tutorial programs with only the backend string changed: each runs on gloo and on
# tutti (2 ranks) and must print the same checksum. ddp_sampler.py runs under torchrun
# (env://), average_gradients.py through tcp://.
#   bash tests/torch/test_tutorials.sh PYTHON
set -euo pipefail
py="${1:?usage: test_tutorials.sh PYTHON (a python with torch and tutti_torch)}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
torchrun="$(dirname "$py")/torchrun"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
export TUTORIAL_DIR="$work"

free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# torch's own gloo backend sometimes aborts at interpreter exit, after destroy_process_group
# returned and the checksum was printed ("terminate called without an active exception"; 3 of
# 30 processes of average_gradients.py here with torch 2.15, with tutti_torch not even loaded:
# TORCH_DEVICE_BACKEND_AUTOLOAD=0). The gloo runs are only the reference, so a run that failed
# that way is run again (up to 3 times); the tutti runs get no second try.
torch_exit_abort='terminate called without an active exception'

# run_tutorial BACKEND: both programs on BACKEND; sets sums[ddp_BACKEND], sums[avg_BACKEND].
# Returns 0, 1 on a failure, 2 on the reference's abort at exit (see above).
run_tutorial() {
  local backend="$1" out port rank i status=0
  out="$(timeout 600 "$torchrun" --standalone --nproc_per_node=2 "$here/tutorials/ddp_sampler.py" "$backend" 2>"$work/err")" || {
    cat "$work/err" >&2
    echo "FAILED: ddp_sampler.py on $backend" >&2
    grep -q "$torch_exit_abort" "$work/err" && return 2
    return 1
  }
  sums[ddp_$backend]="$(grep '^checksum' <<<"$out")"
  port="$(free_port)"
  local pids=()
  for rank in 0 1; do
    timeout 600 "$py" "$here/tutorials/average_gradients.py" "$backend" "$rank" 2 "$port" >"$work/avg.$rank" 2>"$work/avg.err.$rank" &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" && continue
    cat "$work/avg.err.$i" >&2
    echo "FAILED: average_gradients.py rank $i on $backend" >&2
    if [[ "$(cat "$work/avg.err.$i")" == "$torch_exit_abort" && $status != 1 ]]; then status=2; else status=1; fi
  done
  ((status != 0)) && return "$status"
  sums[avg_$backend]="$(grep '^checksum' "$work/avg.0")"
}

declare -A sums
for attempt in 1 2 3; do
  status=0
  run_tutorial gloo || status=$?
  ((status == 2 && attempt < 3)) || break
  echo "    the gloo reference aborted at exit (torch's, see above): running it again" >&2
done
((status == 0)) || exit 1
run_tutorial tutti || exit 1
status=0
for prog in ddp avg; do
  echo "$prog: gloo ${sums[${prog}_gloo]#checksum }, tutti ${sums[${prog}_tutti]#checksum }"
  if [[ -z "${sums[${prog}_gloo]}" || "${sums[${prog}_gloo]}" != "${sums[${prog}_tutti]}" ]]; then
    echo "FAILED: $prog differs between gloo and tutti" >&2
    status=1
  fi
done
exit "$status"
