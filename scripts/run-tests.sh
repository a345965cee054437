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
#   TUTTI_OVERLAP=0           build each preset only when its turn comes (default: the next
#                             preset builds beside this one's tests, at idle priority)
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
  # torch second: its tests leave about a third of the CPUs idle, where asan-ubsan (the
  # dearest build after release's) builds beside them; nccl last, its tests (17 s without a
  # GPU) have nothing beside them.
  presets=(release torch asan-ubsan tsan)
  tutti_step "looking for the CUDA toolkit and NCCL (nccl preset)"
  if tutti_cuda_ready; then
    presets+=(nccl)
  fi
fi
((${#presets[@]} > 0)) || tutti_die "TUTTI_PRESETS is empty"

tutti_ensure_deps

# Background work runs at idle priority (SCHED_IDLE; nice 19 where chrt cannot set it): the
# tests' ranks wait on each other and the torch tests use about two thirds of two CPUs, and a
# compiler beside them takes what they leave, never what they want.
idle=(nice -n 19) idle_self='renice -n 19 -p $$ >/dev/null'
if chrt --idle 0 true 2>/dev/null; then
  idle=(chrt --idle 0) idle_self='chrt --idle -p 0 $$'
fi

# torch's download (about 5 GB from PyPI) runs beside the C++ presets' compiles, which need the
# CPUs, not the network; then tutti_torch (python/) builds against it, at idle priority: beside
# the release preset's tests. The torch preset waits for both. Output to a log, printed there.
torch_install_pid=""
torch_install_log="$TUTTI_ROOT/build/torch-install.log"
if [[ " ${presets[*]} " == *" torch "* ]]; then
  mkdir -p "$TUTTI_ROOT/build"
  tutti_step "torch: installing torch from PyPI, then tutti_torch, in the background (log: $torch_install_log)"
  # (setsid: its own process group, which stop_torch_install stops whole.)
  setsid bash -c "source scripts/lib.sh && tutti_torch_install >/dev/null && $idle_self &&
    tutti_torch_venv >/dev/null" >"$torch_install_log" 2>&1 &
  torch_install_pid=$!
  # Not left running when this script ends first (TUTTI_FAIL_FAST, an interrupt). Under set -e
  # a failing command in the trap would become the script's status: none may fail.
  stop_torch_install() { kill -- "-$torch_install_pid" 2>/dev/null || true; }
  trap stop_torch_install EXIT
fi

declare -A result=() seconds=()
failed=0
tsan_prefix_known=0
tsan_prefix=""

declare -A build_seconds=()
declare -A run_what=([torch]="scripts/torch-tests.sh")

# The next preset's configure + build runs in the background, at idle priority, while this
# preset's tests run. Its output goes to a log, printed when that preset's turn comes.
declare -A bg_pid=() bg_log=() bg_start=() build_total=()
stop_background_builds() {  # (an exit trap: nothing in it may fail)
  local p
  for p in "${!bg_pid[@]}"; do kill -- "-${bg_pid[$p]}" 2>/dev/null || true; done
  for p in "${!bg_log[@]}"; do rm -f "${bg_log[$p]}"; done
}
trap 'stop_background_builds; [[ -z "$torch_install_pid" ]] || stop_torch_install' EXIT
start_background_build() {
  local preset="$1"
  [[ "$preset" != torch && -z "${bg_pid[$preset]:-}" ]] || return 0
  bg_log[$preset]="$(mktemp)"
  bg_start[$preset]=$SECONDS
  # (setsid: its own process group, which the exit trap stops whole.)
  # shellcheck disable=SC2016  # $1 is the inner shell's
  setsid "${idle[@]}" bash -c 'source scripts/lib.sh && tutti_configure_build "$1"' _ "$preset" \
    >"${bg_log[$preset]}" 2>&1 &
  bg_pid[$preset]=$!
  tutti_info "started configuring and building the $preset preset beside the tests (idle priority)"
}
# The first preset after $1 in the list that configures and builds (not torch, which builds in
# its own script).
next_built_preset() {
  local i found=0
  for i in "${presets[@]}"; do
    if ((found)) && [[ "$i" != torch ]]; then
      printf '%s\n' "$i"
      return
    fi
    [[ "$i" != "$1" ]] || found=1
  done
}
# configure + build: waits for the background build if one was started, else builds now.
build_preset() {
  local preset="$1" status=0
  if [[ -z "${bg_pid[$preset]:-}" ]]; then
    tutti_configure_build "$preset"
    return
  fi
  tutti_step "[$preset] waiting for its configure + build (started beside the previous tests)"
  wait "${bg_pid[$preset]}" || status=$?
  cat "${bg_log[$preset]}"
  rm -f "${bg_log[$preset]}"
  unset "bg_pid[$preset]" "bg_log[$preset]"
  build_total[$preset]=$((SECONDS - bg_start[$preset]))
  tutti_info "($preset: configured and built in ${build_total[$preset]} s, beside the tests before it)"
  return "$status"
}
begin_next_build() {
  [[ "${TUTTI_OVERLAP:-1}" != 0 ]] || return 0
  local next
  next="$(next_built_preset "$1")"
  [[ -z "$next" ]] || start_background_build "$next"
}

run_preset() {
  local preset="$1" prefix=() start=$SECONDS
  if [[ "$preset" == torch ]]; then  # not a CMake preset: python/ and tests/torch
    local install=0
    if [[ -n "$torch_install_pid" ]]; then
      tutti_step "[torch] waiting for the background install of torch and build of tutti_torch"
      wait "$torch_install_pid" || install=$?
      sed 's/^/    /' "$torch_install_log"
      ((install == 0)) || { printf 'ERROR: installing torch failed (above)\n' >&2; return 1; }
      export TUTTI_TORCH_BUILT=1  # torch-tests.sh: tutti_torch is built and installed
    fi
    build_seconds[$preset]=$((SECONDS - start))  # what was left of the install to wait for
    begin_next_build "$preset"
    bash scripts/torch-tests.sh
    return
  fi
  build_preset "$preset" || return 1
  build_seconds[$preset]=$((SECONDS - start))
  begin_next_build "$preset"
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
  what="configure + build" short="configure + build"
  if [[ -n "${build_total[$preset]:-}" ]]; then
    what="configure + build beside the tests before it: ${build_total[$preset]} s in all, waited"
    short="build: ${build_total[$preset]} s beside tests, waited"
  fi
  [[ "$preset" != torch ]] || what="waiting for torch's install and tutti_torch" short="$what"
  printf '    %-12s %-8s %5ss (%s %ss)\n' "$preset" "${result[$preset]:-skipped}" \
    "${seconds[$preset]:--}" "$what" "${build_seconds[$preset]:--}"
  # For .ci/run's table of stage times.
  if [[ -n "${TUTTI_STAGE_TIMES:-}" && -n "${seconds[$preset]:-}" ]]; then
    printf '%s\t%s\n' "  $preset: $short" "${build_seconds[$preset]:-0}" >>"$TUTTI_STAGE_TIMES"
    printf '%s\t%s\n' "  $preset: ${run_what[$preset]:-ctest}" \
      "$((seconds[$preset] - ${build_seconds[$preset]:-0}))" >>"$TUTTI_STAGE_TIMES"
  fi
done
if ((failed)); then
  printf '\nFAILED\n'
  exit 1
fi
printf '\nall presets passed\n'
