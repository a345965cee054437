// Reduce kernels (d = a op b, out of place and in place) in GB/s, next to memcpy of the same
// buffers. Bytes counted: a kernel reads a and b and writes d, 3 x n x sizeof(T) per call;
// memcpy reads and writes, 2 x bytes. Sizes are per buffer. Each benchmark checks the
// kernel's result once before timing and aborts on a mismatch.
//
// bench-smoke-args: --benchmark_min_time=0.01 --benchmark_filter=/(4096|262144|4194304)$

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <benchmark/benchmark.h>

#include "tutti/core/reduce.hpp"

namespace {

using tutti::op_kind;

constexpr std::int64_t sizes[] = {4 << 10, 256 << 10, 4 << 20, 64 << 20};

template <class T>
double as_double(T x) {
  return static_cast<double>(static_cast<float>(x));  // exact for every value used here
}

// Small integers: every sum and max is exact in every element type.
template <class T>
std::vector<T> make_input(std::size_t n, int modulus, int offset) {
  std::vector<T> v(n);
  for (std::size_t i = 0; i < n; ++i)
    v[i] = T(static_cast<float>(static_cast<int>(i % static_cast<std::size_t>(modulus)) + offset));
  return v;
}

template <op_kind K, class T>
void check_once(const tutti::detail::reducer& r, const std::vector<T>& a, const std::vector<T>& b,
                bool in_place) {
  std::vector<T> d = in_place ? a : std::vector<T>(a.size());
  r(d.data(), in_place ? d.data() : a.data(), b.data(), a.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const double x = as_double(a[i]), y = as_double(b[i]);
    const double want = K == op_kind::max ? (x < y ? y : x) : x + y;
    if (as_double(d[i]) != want) {
      std::fprintf(stderr, "bench_reduce: %s<%s> wrong at %zu: %g op %g gave %g\n",
                   std::string(tutti::name(K)).c_str(),
                   std::string(tutti::name(tutti::dtype_of<T>)).c_str(), i, x, y, as_double(d[i]));
      std::abort();
    }
  }
}

template <op_kind K, class T>
void bm_kernel(benchmark::State& state, bool in_place) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(T);
  const auto r = tutti::detail::make_reducer<K, T>();
  std::vector<T> a = make_input<T>(n, 17, 0);
  const std::vector<T> b = make_input<T>(n, 5, 1);
  std::vector<T> d(n);
  check_once<K, T>(r, a, b, in_place);
  T* out = in_place ? a.data() : d.data();  // in place, a accumulates: values stay finite
  for (auto _ : state) {
    r(out, a.data(), b.data(), n);
    benchmark::DoNotOptimize(out);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(3 * n * sizeof(T)));
}

void bm_memcpy(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(state.range(0));
  std::vector<unsigned char> src(bytes), dst(bytes);
  for (std::size_t i = 0; i < bytes; ++i) src[i] = static_cast<unsigned char>(i * 31U);
  std::memcpy(dst.data(), src.data(), bytes);
  if (std::memcmp(dst.data(), src.data(), bytes) != 0) {
    std::fprintf(stderr, "bench_reduce: memcpy check failed\n");
    std::abort();
  }
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(2 * bytes));
}

// The 16-bit sum through float at one SIMD level (the kernels take the best the CPU has), so
// that the portable path is measured on any machine. Out of place; same bytes as bm_kernel.
template <class T>
void bm_via_float(benchmark::State& state, tutti::detail::simd_level level) {
  const auto n = static_cast<std::size_t>(state.range(0)) / sizeof(T);
  const std::vector<T> a = make_input<T>(n, 17, 0);
  const std::vector<T> b = make_input<T>(n, 5, 1);
  std::vector<T> d(n);
  const auto add = [](float x, float y) { return x + y; };
  tutti::detail::combine_via_float(d.data(), a.data(), b.data(), n, add, level);
  for (std::size_t i = 0; i < n; ++i) {
    if (as_double(d[i]) != as_double(a[i]) + as_double(b[i])) {
      std::fprintf(stderr, "bench_reduce: via_float<%s> wrong at %zu\n",
                   std::string(tutti::name(tutti::dtype_of<T>)).c_str(), i);
      std::abort();
    }
  }
  for (auto _ : state) {
    tutti::detail::combine_via_float(d.data(), a.data(), b.data(), n, add, level);
    benchmark::DoNotOptimize(d.data());
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * static_cast<std::int64_t>(3 * n * sizeof(T)));
}

template <class T>
void register_via_float() {
  using level = tutti::detail::simd_level;
  const std::string base = "sum_via_float<" + std::string(tutti::name(tutti::dtype_of<T>)) + ">";
  struct named_level {
    level value;
    const char* label;
  };
  for (const named_level l :
       {named_level{level::portable, "portable"}, named_level{level::f16c, "f16c"},
        named_level{level::avx2, "avx2"}, named_level{level::avx512, "avx512"}}) {
    if (l.value > tutti::detail::supported_simd_level()) continue;
    auto* b = benchmark::RegisterBenchmark(
        (base + "/" + l.label).c_str(),
        [value = l.value](benchmark::State& s) { bm_via_float<T>(s, value); });
    for (auto bytes : sizes) b->Arg(bytes);
  }
}

template <op_kind K, class T>
void register_kernel() {
  const std::string base =
      std::string(tutti::name(K)) + "<" + std::string(tutti::name(tutti::dtype_of<T>)) + ">";
  for (const bool in_place : {false, true}) {
    auto* b = benchmark::RegisterBenchmark(
        (base + (in_place ? "/in_place" : "/out_of_place")).c_str(),
        [in_place](benchmark::State& s) { bm_kernel<K, T>(s, in_place); });
    for (auto bytes : sizes) b->Arg(bytes);
  }
}

[[maybe_unused]] const bool registered = [] {
  auto* m = benchmark::RegisterBenchmark("memcpy", bm_memcpy);
  for (auto bytes : sizes) m->Arg(bytes);
  register_kernel<op_kind::sum, float>();
  register_kernel<op_kind::sum, double>();
  register_kernel<op_kind::sum, std::int32_t>();
  register_kernel<op_kind::sum, tutti::half>();
  register_kernel<op_kind::sum, tutti::bfloat16>();
  register_kernel<op_kind::max, float>();
  register_via_float<tutti::half>();
  register_via_float<tutti::bfloat16>();
  return true;
}();

}  // namespace
