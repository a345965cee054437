#!/usr/bin/env bash
# The test command: bash scripts/run-tests.sh
#
# Installs missing build dependencies (Debian/Ubuntu, via apt), then for each
# preset configures, builds and runs ctest with the matching test preset.
#   TUTTI_PRESETS="release"   run only these presets (default: release asan-ubsan tsan, nccl
#                             where the CUDA toolkit and NCCL are installed — its GPU tests
#                             report "skipped" on machines without a GPU —, and torch: the
#                             torch.distributed backend's tests, scripts/torch-tests.sh, with
#                             torch from PyPI in build/torch-venv)
#   TUTTI_FAIL_FAST=1         stop at the first failing preset
# Exits non-zero if any step of any preset fails.
set -euo pipefail

# shellcheck source=scripts/lib.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/lib.sh"
cd "$TUTTI_ROOT"

# The nccl preset needs nvcc and NCCL (not a GPU: without one its GPU tests exit 77, which
# ctest counts as skipped, not failed). nvcc off PATH in the usual place is used from there.
tutti_cuda_ready() {
  local nvcc root
  nvcc="$(command -v nvcc 2>/dev/null || true)"
  if [[ -z "$nvcc" && -x /usr/local/cuda/bin/nvcc ]]; then
    nvcc=/usr/local/cuda/bin/nvcc
    export CUDACXX="$nvcc" CUDAToolkit_ROOT=/usr/local/cuda
  fi
  if [[ -z "$nvcc" ]]; then
    tutti_info "nccl preset skipped: no CUDA toolkit (nvcc neither on PATH nor in /usr/local/cuda/bin)"
    return 1
  fi
  root="$(cd "$(dirname "$nvcc")/.." && pwd)"
  local dir
  for dir in "${NCCL_ROOT:-}" "${NCCL_HOME:-}" "$root" "$root/targets/$(uname -m)-linux" /usr     /usr/local; do
    if [[ -n "$dir" && -f "$dir/include/nccl.h" ]]; then
      tutti_info "nccl preset: nvcc $nvcc, NCCL in $dir"
      return 0
    fi
  done
  tutti_info "nccl preset skipped: CUDA toolkit at $root but no nccl.h (set NCCL_ROOT)"
  return 1
}

if [[ -n "${TUTTI_PRESETS:-}" ]]; then
  read -r -a presets <<<"$TUTTI_PRESETS"
  # Asked for by name: find nvcc the same way (its configure step reports what is missing).
  if [[ " ${presets[*]} " == *" nccl "* ]]; then
    tutti_cuda_ready || true
  fi
else
  presets=(release asan-ubsan tsan)
  tutti_step "looking for the CUDA toolkit and NCCL (nccl preset)"
  if tutti_cuda_ready; then
    presets+=(nccl)
  fi
  presets+=(torch)
fi
((${#presets[@]} > 0)) || tutti_die "TUTTI_PRESETS is empty"

tutti_ensure_deps

# torch's download (about 5 GB from PyPI) runs beside the C++ presets' compiles, which need the
# CPUs, not the network; the torch preset waits for it. Its output goes to a log, printed there.
torch_install_pid=""
torch_install_log="$TUTTI_ROOT/build/torch-install.log"
if [[ " ${presets[*]} " == *" torch "* ]]; then
  mkdir -p "$TUTTI_ROOT/build"
  tutti_step "torch: installing torch from PyPI in the background (log: $torch_install_log)"
  tutti_torch_install >"$torch_install_log" 2>&1 &
  torch_install_pid=$!
  # Not left downloading when this script ends first (TUTTI_FAIL_FAST, an interrupt). Under
  # set -e a failing command in the trap would become the script's status: none may fail.
  stop_torch_install() {
    pkill -P "$torch_install_pid" 2>/dev/null || true
    kill "$torch_install_pid" 2>/dev/null || true
  }
  trap stop_torch_install EXIT
fi

declare -A result=() seconds=()
failed=0
tsan_prefix_known=0
tsan_prefix=""

declare -A build_seconds=()
declare -A run_what=([torch]="scripts/torch-tests.sh")
run_preset() {
  local preset="$1" prefix=() start=$SECONDS
  if [[ "$preset" == torch ]]; then  # not a CMake preset: python/ and tests/torch
    local install=0
    if [[ -n "$torch_install_pid" ]]; then
      tutti_step "[torch] waiting for the background install of torch"
      wait "$torch_install_pid" || install=$?
      sed 's/^/    /' "$torch_install_log"
      ((install == 0)) || { printf 'ERROR: installing torch failed (above)\n' >&2; return 1; }
    fi
    build_seconds[$preset]=$((SECONDS - start))  # what was left of the install to wait for
    bash scripts/torch-tests.sh
    return
  fi
  tutti_configure_build "$preset" || return 1
  build_seconds[$preset]=$((SECONDS - start))
  if [[ "$preset" == tsan* ]]; then
    if ((tsan_prefix_known == 0)); then
      tutti_step "[$preset] probing whether ThreadSanitizer runs on this kernel"
      tsan_prefix="$(tutti_tsan_prefix)" || {
        printf 'ERROR: ThreadSanitizer cannot run on this machine\n' >&2
        return 1
      }
      tsan_prefix_known=1
    fi
    [[ -z "$tsan_prefix" ]] || read -r -a prefix <<<"$tsan_prefix"
  fi
  tutti_step "[$preset] test: ${prefix[*]+${prefix[*]} }ctest --preset $preset"
  "${prefix[@]}" ctest --preset "$preset"
}

for preset in "${presets[@]}"; do
  start=$SECONDS
  if run_preset "$preset"; then
    result[$preset]=passed
  else
    result[$preset]=FAILED
    failed=1
  fi
  seconds[$preset]=$((SECONDS - start))
  if ((failed)) && [[ "${TUTTI_FAIL_FAST:-0}" == 1 ]]; then
    break
  fi
done

tutti_step "summary"
for preset in "${presets[@]}"; do
  what="configure + build"
  [[ "$preset" != torch ]] || what="waiting for torch's install"
  printf '    %-12s %-8s %5ss (%s %ss)\n' "$preset" "${result[$preset]:-skipped}" \
    "${seconds[$preset]:--}" "$what" "${build_seconds[$preset]:--}"
  # For .ci/run's table of stage times.
  if [[ -n "${TUTTI_STAGE_TIMES:-}" && -n "${seconds[$preset]:-}" ]]; then
    printf '%s\t%s\n' "  $preset: $what" "${build_seconds[$preset]:-0}" >>"$TUTTI_STAGE_TIMES"
    printf '%s\t%s\n' "  $preset: ${run_what[$preset]:-ctest}" \
      "$((seconds[$preset] - ${build_seconds[$preset]:-0}))" >>"$TUTTI_STAGE_TIMES"
  fi
done
if ((failed)); then
  printf '\nFAILED\n'
  exit 1
fi
printf '\nall presets passed\n'
