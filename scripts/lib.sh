# shellcheck shell=bash
# Shared helpers for scripts/run-tests.sh, scripts/run-main.sh and .ci/run.
# Source it; it defines functions only (and TUTTI_ROOT).

TUTTI_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export TUTTI_ROOT

# Debian/Ubuntu packages the build needs.
# openmpi: the side-by-side benchmark and the mpirun launcher test.
# pkg-config, python3-venv: the packaging tests (tutti.pc; Conan installed from PyPI in a venv).
# gnuplot-nox: bench/plot.
TUTTI_APT_PACKAGES=(build-essential cmake doctest-dev libbenchmark-dev git ca-certificates
  openmpi-bin libopenmpi-dev libgloo-dev redis-server iproute2 pkg-config python3-venv
  gnuplot-nox ethtool)
TUTTI_MIN_CMAKE=3.25

tutti_step() { printf '\n==> %s\n' "$*"; }
tutti_info() { printf '    %s\n' "$*"; }
tutti_die() { printf 'ERROR: %s\n' "$*" >&2; exit 1; }

tutti_nproc() { nproc 2>/dev/null || getconf _NPROCESSORS_ONLN 2>/dev/null || echo 2; }

# Installs whatever of TUTTI_APT_PACKAGES is missing. A no-op (no apt-get
# update) when everything is already installed, so reruns are fast.
tutti_ensure_deps() {
  tutti_step "checking build dependencies"
  if ! command -v dpkg >/dev/null 2>&1; then
    tutti_info "dpkg not found (not Debian/Ubuntu): not installing anything;"
    tutti_info "need: a C++20 compiler, CMake >= ${TUTTI_MIN_CMAKE}, doctest, Google Benchmark, Gloo (libgloo-dev); optional: redis-server, iproute2, Open MPI"
  else
    local missing=() pkg
    for pkg in "${TUTTI_APT_PACKAGES[@]}"; do
      if ! dpkg -s "$pkg" 2>/dev/null | grep -q '^Status: install ok installed'; then
        missing+=("$pkg")
      fi
    done
    if ((${#missing[@]} == 0)); then
      tutti_info "all present: ${TUTTI_APT_PACKAGES[*]}"
    else
      tutti_info "missing: ${missing[*]}"
      local sudo=()
      if [[ "$(id -u)" != 0 ]]; then
        command -v sudo >/dev/null 2>&1 ||
          tutti_die "not root and no sudo: install ${missing[*]} yourself"
        sudo=(sudo)
      fi
      command -v apt-get >/dev/null 2>&1 || tutti_die "apt-get not found"
      export DEBIAN_FRONTEND=noninteractive
      tutti_step "apt-get update"
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
      tutti_step "apt-get install ${missing[*]}"
      "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
        apt-get install -y --no-install-recommends "${missing[@]}"
    fi
  fi
  command -v cmake >/dev/null 2>&1 || tutti_die "cmake not found"
  local have
  have="$(cmake --version | sed -n 's/^cmake version \([0-9][0-9.]*\).*/\1/p')"
  if [[ "$(printf '%s\n%s\n' "$TUTTI_MIN_CMAKE" "$have" | sort -V | head -n1)" != "$TUTTI_MIN_CMAKE" ]]; then
    tutti_die "CMake >= ${TUTTI_MIN_CMAKE} is required for CMakePresets.json (found ${have}); \
on older distributions install it from Kitware's apt repository or with 'pip install cmake'"
  fi
}

# Configure and build one preset (cwd must be TUTTI_ROOT).
tutti_configure_build() {
  local preset="$1"
  tutti_step "[$preset] configure: cmake --preset $preset"
  cmake --preset "$preset" || return 1
  tutti_step "[$preset] build: cmake --build --preset $preset -j$(tutti_nproc)"
  cmake --build --preset "$preset" -j"$(tutti_nproc)" || return 1
}

# Prints the command prefix (possibly empty) under which ThreadSanitizer-built
# programs run on this machine. Some kernels (large vm.mmap_rnd_bits) make TSan
# die with "FATAL: ThreadSanitizer: unexpected memory mapping"; running without
# ASLR (setarch -R) avoids it. Returns 1 if TSan cannot run at all.
tutti_tsan_prefix() {
  local dir="${TUTTI_ROOT}/build/tsan-probe"
  mkdir -p "$dir"
  cat >"$dir/probe.cpp" <<'CPP'
#include <thread>
int main() {
  int value = 0;
  std::thread worker([&] { value = 1; });
  worker.join();
  return value == 1 ? 0 : 1;
}
CPP
  "${CXX:-c++}" -std=c++20 -O1 -g -fsanitize=thread "$dir/probe.cpp" -o "$dir/probe" >&2 || {
    printf 'tsan probe: could not build a -fsanitize=thread program\n' >&2
    return 1
  }
  if TSAN_OPTIONS=halt_on_error=1 "$dir/probe" >"$dir/probe.log" 2>&1; then
    tutti_info "tsan probe: OK with ASLR" >&2
    return 0
  fi
  printf 'tsan probe failed with ASLR:\n' >&2
  sed 's/^/    /' "$dir/probe.log" >&2
  local prefix=(setarch "$(uname -m)" -R)
  if command -v setarch >/dev/null 2>&1 &&
    TSAN_OPTIONS=halt_on_error=1 "${prefix[@]}" "$dir/probe" >"$dir/probe.log" 2>&1; then
    tutti_info "tsan probe: OK under '${prefix[*]}' (ASLR off); tsan tests run that way" >&2
    printf '%s\n' "${prefix[*]}"
    return 0
  fi
  printf 'tsan probe: fails with ASLR off too:\n' >&2
  sed 's/^/    /' "$dir/probe.log" >&2
  return 1
}

# The venv with torch, numpy and expecttest from PyPI (tutti_torch_venv's first half, without
# tutti_torch): created and installed where missing. Prints the venv's python on stdout.
# scripts/run-tests.sh starts it in the background while the C++ presets build (the download is
# about 5 GB; the compilers use the CPUs meanwhile).
tutti_torch_install() {
  local venv="${TUTTI_TORCH_VENV:-$TUTTI_ROOT/build/torch-venv}"
  local py="$venv/bin/python"
  if [[ ! -x "$py" ]]; then
    tutti_step "torch: creating the virtual environment $venv" >&2
    python3 -m venv "$venv" >&2 || return 1
  fi
  if ! "$py" -c 'import torch, numpy, expecttest' >/dev/null 2>&1; then
    tutti_step "torch: pip install torch numpy expecttest (from PyPI)" >&2
    "$py" -m pip install --quiet --upgrade pip >&2 || return 1
    "$py" -m pip install --quiet torch numpy expecttest >&2 || return 1
  fi
  printf '%s\n' "$py"
}

# The virtual environment the torch tests and benchmarks use: torch, numpy and expecttest (what
# torch's own test modules import: tests/torch/torch_suite.py) from PyPI, and tutti_torch
# (python/) built against that torch. TUTTI_TORCH_VENV picks its place (default
# build/torch-venv); torch is installed once (about 5 GB with its CUDA libraries; it runs on
# the CPU), tutti_torch rebuilt every time. Prints the venv's python on stdout.
tutti_torch_venv() {
  local py
  py="$(tutti_torch_install)" || return 1
  tutti_step "torch: pip install --no-build-isolation ./python (tutti_torch, $("$py" -c 'import torch; print("torch", torch.__version__)'))" >&2
  "$py" -m pip install --quiet --no-build-isolation "$TUTTI_ROOT/python" >&2 || return 1
  printf '%s\n' "$py"
}
