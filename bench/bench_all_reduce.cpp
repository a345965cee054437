// all_reduce of float sum over tutti::inproc, for every policy, world sizes 2, 4, 8 and
// messages of 4 B to 64 MiB (x8 steps; up to 8 MiB at 8 ranks, to keep the run short).
//
// One benchmark iteration = one inproc::run (threads started once) doing K out-of-place
// all_reduces, timed by rank 0 from a barrier to a barrier, so thread start-up and buffer
// set-up stay out of the measurement (UseManualTime). K is calibrated by the first iteration
// so an iteration takes about 20 ms. Hence "Time" is per K calls; read these counters:
//   us_per_call   microseconds per all_reduce
//   algbw_GBps    message bytes / time per call
//   busbw_GBps    algbw x 2(p-1)/p, as nccl-tests reports all_reduce
//   items_per_second  all_reduce calls per second
// Inputs are rank + 1; every call's result must be p(p+1)/2 exactly, checked after each
// iteration (aborts on a mismatch).
//
// bench-smoke-args: --benchmark_filter=ranks:4/bytes:(4|2048|1048576)/

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include <tutti/tutti.hpp>

namespace {

using steady = std::chrono::steady_clock;

constexpr double target_iteration_s = 0.02;

double since(steady::time_point t0) {
  return std::chrono::duration<double>(steady::now() - t0).count();
}

// How many calls make an iteration last target_iteration_s: rank 0 times growing batches and
// shares its decision (an all_reduce max, which every policy has, against zeros elsewhere), so
// every rank runs the same number of calls.
template <class Comm, class F>
std::uint64_t calibrate(Comm& comm, F&& once) {
  std::uint64_t calls = 1;
  for (;;) {
    comm.barrier();
    const auto t0 = steady::now();
    for (std::uint64_t i = 0; i < calls; ++i) once();
    const double s = since(t0);
    std::array<std::uint64_t, 2> decision{0, 0};  // {done, calls}
    if (comm.rank() == 0) {
      if (s >= 0.002 || calls >= (std::uint64_t{1} << 24))
        decision = {1, std::max<std::uint64_t>(
                           1, static_cast<std::uint64_t>(
                                  std::ceil(target_iteration_s * static_cast<double>(calls) / s)))};
      else
        decision = {0, calls * 4};
    }
    comm.all_reduce(std::span<std::uint64_t>(decision), tutti::max);
    if (decision[0] != 0) return decision[1];
    calls = decision[1];
  }
}

template <class Policy>
void bm_all_reduce(benchmark::State& state, int p, std::size_t bytes, std::uint64_t& calls_cache) {
  const std::size_t n = bytes / sizeof(float);
  const auto up = static_cast<std::size_t>(p);
  // Buffers outlive the worlds: pages are touched once per benchmark, not per iteration.
  std::vector<std::vector<float>> in(up), out(up);
  for (std::size_t r = 0; r < up; ++r) {
    in[r].assign(n, static_cast<float>(r + 1));
    out[r].assign(n, 0.0f);
  }
  const int rank_sum = p * (p + 1) / 2;  // 1 + 2 + ... + p
  const auto want = static_cast<float>(rank_sum);
  std::uint64_t total_calls = 0;
  double total_seconds = 0;

  for (auto _ : state) {
    double seconds = 0;
    std::uint64_t calls = calls_cache;
    std::atomic<int> wrong{0};
    tutti::inproc::run<Policy>(p, [&](auto& comm) {
      const auto r = static_cast<std::size_t>(comm.rank());
      auto once = [&] {
        comm.all_reduce(std::span<const float>(in[r]), std::span<float>(out[r]), tutti::sum);
      };
      once();  // warm-up: the communicator's scratch space
      const std::uint64_t k = calls != 0 ? calls : calibrate(comm, once);
      comm.barrier();
      const auto t0 = steady::now();
      for (std::uint64_t i = 0; i < k; ++i) once();
      comm.barrier();
      if (r == 0) {
        seconds = since(t0);
        calls = k;  // read by the benchmark thread after run() joined every rank
      }
      if (!std::all_of(out[r].begin(), out[r].end(), [&](float x) { return x == want; }))
        wrong.fetch_add(1);
    });
    if (wrong.load() != 0) {
      std::fprintf(stderr, "bench_all_reduce: %s, %d ranks, %zu bytes: wrong result\n",
                   Policy::name, p, bytes);
      std::abort();
    }
    calls_cache = calls;
    total_calls += calls;
    total_seconds += seconds;
    state.SetIterationTime(seconds);
  }

  // Plain counters from our own clock (a rate counter would print a misleading "/s").
  const auto calls_d = static_cast<double>(total_calls);
  const double moved = calls_d * static_cast<double>(bytes);
  state.SetItemsProcessed(static_cast<std::int64_t>(total_calls));
  state.SetBytesProcessed(static_cast<std::int64_t>(moved));
  if (total_seconds > 0) {
    const double algbw = moved / total_seconds * 1e-9;
    state.counters["us_per_call"] = total_seconds * 1e6 / calls_d;
    state.counters["algbw_GBps"] = algbw;
    state.counters["busbw_GBps"] = algbw * 2.0 * (p - 1) / p;
  }
}

template <class Policy>
void register_policy() {
  for (const int p : {2, 4, 8}) {
    const std::size_t max_bytes = (p == 8 ? std::size_t{16} : std::size_t{64}) << 20;
    for (std::size_t bytes = 4; bytes <= max_bytes; bytes *= 8) {
      const std::string name = std::string("all_reduce/") + Policy::name +
                               "/ranks:" + std::to_string(p) + "/bytes:" + std::to_string(bytes);
      benchmark::RegisterBenchmark(
          name.c_str(), [p, bytes, cache = std::make_shared<std::uint64_t>(0)](
                            benchmark::State& s) { bm_all_reduce<Policy>(s, p, bytes, *cache); })
          ->UseManualTime()
          ->MinTime(0.05)
          ->Unit(benchmark::kMillisecond);
    }
  }
}

[[maybe_unused]] const bool registered = [] {
  register_policy<tutti::ring>();
  register_policy<tutti::tree>();
  register_policy<tutti::recursive_halving>();
  register_policy<tutti::recursive_doubling>();
  register_policy<tutti::direct>();
  register_policy<tutti::automatic>();
  return true;
}();

}  // namespace
