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

declare -A sums
for backend in gloo tutti; do
  out="$(timeout 600 "$torchrun" --standalone --nproc_per_node=2 "$here/tutorials/ddp_sampler.py" "$backend" 2>"$work/err")" || {
    cat "$work/err" >&2; echo "FAILED: ddp_sampler.py on $backend" >&2; exit 1; }
  sums[ddp_$backend]="$(grep '^checksum' <<<"$out")"
  port="$(free_port)"
  pids=()
  for rank in 0 1; do
    timeout 600 "$py" "$here/tutorials/average_gradients.py" "$backend" "$rank" 2 "$port" >"$work/avg.$rank" 2>"$work/avg.err.$rank" &
    pids+=($!)
  done
  for i in 0 1; do
    wait "${pids[$i]}" || { cat "$work/avg.err.$i" >&2; echo "FAILED: average_gradients.py rank $i on $backend" >&2; exit 1; }
  done
  sums[avg_$backend]="$(grep '^checksum' "$work/avg.0")"
done
status=0
for prog in ddp avg; do
  echo "$prog: gloo ${sums[${prog}_gloo]#checksum }, tutti ${sums[${prog}_tutti]#checksum }"
  if [[ -z "${sums[${prog}_gloo]}" || "${sums[${prog}_gloo]}" != "${sums[${prog}_tutti]}" ]]; then
    echo "FAILED: $prog differs between gloo and tutti" >&2
    status=1
  fi
done
exit "$status"
