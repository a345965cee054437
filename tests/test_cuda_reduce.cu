// Exact tests of tutti's device reduction kernels (tutti/detail/cuda_reduce.cuh): every
// (op, element type) pair of the table against the host kernels of tutti/core/reduce.hpp, bit
// for bit. Inputs are deterministic pseudo-random bit patterns: full-range integers (sum and
// product wrap around identically) and every finite float, subnormals and signed zeros
// included; no NaNs, whose payloads the GPU does not keep. Each pair runs out of place, in
// place (d == a and d == b), with all pointers one element past a 16-byte boundary (vector
// path with a scalar head) and with differently aligned pointers (element-wise path), over
// 0, 1, 7 and 1000003 elements. avg's division runs for several world sizes.
//
// This file has its own main (it is not linked with tests/main.cpp): without a usable CUDA
// device it prints one SKIP line and exits with 77, which ctest reports as skipped.

#define DOCTEST_CONFIG_IMPLEMENT

#include <cuda_runtime.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include <doctest/doctest.h>

#include "tutti/core/ops.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/cuda_reduce.cuh"
#include "tutti/detail/device_reduce.hpp"

namespace {

using tutti::op_kind;
using tutti::detail::device_reducers;
using tutti::detail::op_accepts;

constexpr std::array<std::size_t, 4> sizes{0, 1, 7, 1000003};
constexpr std::size_t max_size = 1000003;
constexpr std::array<int, 4> divisors{1, 3, 8, 129};

/// splitmix64: a fixed stream of 64-bit values for element i of stream `seed`.
std::uint64_t mix(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed * 0x9E3779B97F4A7C15ULL + i + 0x632BE59BD9B4E019ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// The storage bytes of a deterministic element: never a NaN or an infinity.
template <class T>
void make_element(std::uint64_t r, unsigned char* out) {
  if constexpr (std::is_same_v<T, bool>) {
    const bool v = (r & 1U) != 0;
    std::memcpy(out, &v, 1);
  } else if constexpr (std::is_integral_v<T>) {
    const auto v = static_cast<T>(r);
    std::memcpy(out, &v, sizeof(T));
  } else if constexpr (sizeof(T) == 2) {
    // half exponent 0x7C00, bfloat16 0x7F80: clearing bit 14 makes either finite.
    auto bits = static_cast<std::uint16_t>(r);
    if ((bits & 0x7C00U) == 0x7C00U && std::is_same_v<T, tutti::half>) bits &= 0xBFFFU;
    if ((bits & 0x7F80U) == 0x7F80U && std::is_same_v<T, tutti::bfloat16>) bits &= 0xBFFFU;
    std::memcpy(out, &bits, 2);
  } else if constexpr (std::is_same_v<T, float>) {
    auto bits = static_cast<std::uint32_t>(r);
    if ((bits & 0x7F800000U) == 0x7F800000U) bits &= 0xBFFFFFFFU;
    std::memcpy(out, &bits, 4);
  } else {
    static_assert(std::is_same_v<T, double>);
    std::uint64_t bits = r;
    if ((bits & 0x7FF0000000000000ULL) == 0x7FF0000000000000ULL) bits &= 0xBFFFFFFFFFFFFFFFULL;
    std::memcpy(out, &bits, 8);
  }
}

template <class T>
std::vector<unsigned char> make_input(std::uint64_t seed, std::size_t n) {
  std::vector<unsigned char> v(n * sizeof(T));
  for (std::size_t i = 0; i < n; ++i) make_element<T>(mix(seed, i), v.data() + i * sizeof(T));
  return v;
}

void cuda_check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) FAIL(what << ": " << cudaGetErrorString(e));
}

/// Device buffers for d, a and b, each with room for `max_size` elements plus an offset.
struct device_buffers {
  unsigned char* a = nullptr;
  unsigned char* b = nullptr;
  unsigned char* d = nullptr;
  device_buffers() {
    constexpr std::size_t bytes = (max_size + 16) * 8;
    cuda_check(cudaMalloc(&a, bytes), "cudaMalloc");
    cuda_check(cudaMalloc(&b, bytes), "cudaMalloc");
    cuda_check(cudaMalloc(&d, bytes), "cudaMalloc");
  }
  ~device_buffers() {
    cudaFree(a);
    cudaFree(b);
    cudaFree(d);
  }
  device_buffers(const device_buffers&) = delete;
  device_buffers& operator=(const device_buffers&) = delete;
};

/// Compares bytes element by element; reports the first mismatch.
template <class T>
void check_equal(const std::vector<unsigned char>& got, const std::vector<unsigned char>& want,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  if (std::memcmp(got.data(), want.data(), got.size()) == 0) {
    CHECK(true);
    return;
  }
  for (std::size_t i = 0; i < got.size() / sizeof(T); ++i) {
    if (std::memcmp(got.data() + i * sizeof(T), want.data() + i * sizeof(T), sizeof(T)) != 0) {
      std::uint64_t g = 0;
      std::uint64_t w = 0;
      std::memcpy(&g, got.data() + i * sizeof(T), sizeof(T));
      std::memcpy(&w, want.data() + i * sizeof(T), sizeof(T));
      FAIL_CHECK(what << ": element " << i << " has bits 0x" << std::hex << g << ", host gives 0x"
                      << w);
      return;
    }
  }
}

/// How d, a and b are placed in the device buffers (offsets in elements).
struct layout {
  const char* name;
  std::size_t off_d;
  std::size_t off_a;
  std::size_t off_b;
  int alias;  // 0: d separate, 1: d == a, 2: d == b
};
constexpr std::array<layout, 5> layouts{{
    {"out of place", 0, 0, 0, 0},
    {"d == a", 0, 0, 0, 1},
    {"d == b", 0, 0, 0, 2},
    {"all one element past 16 bytes", 1, 1, 1, 0},
    {"differently aligned", 0, 1, 0, 0},
}};

template <op_kind K, class T>
void check_pair(const device_reducers& table, device_buffers& buf, std::size_t n,
                const std::vector<unsigned char>& a, const std::vector<unsigned char>& b) {
  const auto fn = table.find(K, tutti::dtype_of<T>);
  REQUIRE((fn != nullptr));
  const std::string pair = std::string(tutti::name(K)) + " on " +
                           std::string(tutti::name(tutti::dtype_of<T>)) +
                           ", n = " + std::to_string(n);
  const std::size_t bytes = n * sizeof(T);
  if (n == 0) {
    CHECK(fn(buf.d, buf.a, buf.b, 0, nullptr) == 0);
    return;
  }
  constexpr auto host = tutti::detail::make_reducer<K, T>();
  std::vector<unsigned char> want(bytes);
  host(want.data(), a.data(), b.data(), n);

  std::vector<unsigned char> got(bytes);
  for (const layout& l : layouts) {
    unsigned char* da = buf.a + l.off_a * sizeof(T);
    unsigned char* db = buf.b + l.off_b * sizeof(T);
    unsigned char* dd = l.alias == 1 ? da : l.alias == 2 ? db : buf.d + l.off_d * sizeof(T);
    cuda_check(cudaMemcpy(da, a.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    cuda_check(cudaMemcpy(db, b.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
    CHECK(fn(dd, da, db, n, nullptr) == 0);
    cuda_check(cudaDeviceSynchronize(), "kernel");
    cuda_check(cudaMemcpy(got.data(), dd, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
    check_equal<T>(got, want, pair + ", " + l.name);
  }

  if constexpr (K == op_kind::avg) {
    const auto div = table.find_divide(tutti::dtype_of<T>);
    REQUIRE((div != nullptr));
    CHECK(div(buf.d, 0, 3, nullptr) == 0);
    for (const int world : divisors) {
      std::vector<unsigned char> quotient = want;
      host.finish(quotient.data(), n, world);
      for (const std::size_t off : {std::size_t{0}, std::size_t{1}}) {
        unsigned char* dx = buf.d + off * sizeof(T);
        cuda_check(cudaMemcpy(dx, want.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy");
        CHECK(div(dx, n, world, nullptr) == 0);
        cuda_check(cudaDeviceSynchronize(), "kernel");
        cuda_check(cudaMemcpy(got.data(), dx, bytes, cudaMemcpyDeviceToHost), "cudaMemcpy");
        check_equal<T>(
            got, quotient,
            pair + ", divided by " + std::to_string(world) + ", offset " + std::to_string(off));
      }
    }
  }
}

template <class T, std::size_t... I>
void check_type(std::index_sequence<I...> /*unused*/) {
  device_reducers table;
  tutti::detail::fill_device_reducers(table);
  REQUIRE(table.filled);
  device_buffers buf;
  for (const std::size_t n : sizes) {
    const auto a = make_input<T>(1, n);
    const auto b = make_input<T>(2, n);
    // op_kind::none is 0; the reductions are 1 .. op_kind_count - 1.
    (
        [&] {
          constexpr auto k = static_cast<op_kind>(I + 1);
          if constexpr (op_accepts<k, T>()) check_pair<k, T>(table, buf, n, a, b);
        }(),
        ...);
  }
}

}  // namespace

TEST_CASE("the device table holds exactly the reducible pairs with a device form") {
  device_reducers table;
  tutti::detail::fill_device_reducers(table);
  CHECK(table.filled);
  auto expect_row = []<class T>(const device_reducers& t, T* /*tag*/) {
    [&]<std::size_t... I>(std::index_sequence<I...>) {
      (
          [&] {
            constexpr auto k = static_cast<op_kind>(I + 1);
            INFO(tutti::name(k), " on ", tutti::name(tutti::dtype_of<T>));
            CHECK((t.find(k, tutti::dtype_of<T>) != nullptr) == op_accepts<k, T>());
          }(),
          ...);
    }(std::make_index_sequence<tutti::detail::op_kind_count - 1>{});
    CHECK((t.find_divide(tutti::dtype_of<T>) != nullptr) == op_accepts<op_kind::avg, T>());
  };
  [&]<class... Ts>(tutti::detail::cuda::type_list<Ts...>) {
    (expect_row(table, static_cast<Ts*>(nullptr)), ...);
  }(tutti::detail::cuda::device_element_types{});
  for (std::size_t o = 0; o < tutti::detail::op_kind_count; ++o)
    CHECK((table.find(static_cast<op_kind>(o), tutti::dtype::float128) == nullptr));
  CHECK((table.find_divide(tutti::dtype::float128) == nullptr));
  for (std::size_t t = 0; t < tutti::detail::dtype_count; ++t)
    CHECK((table.find(op_kind::none, static_cast<tutti::dtype>(t)) == nullptr));
}

TEST_CASE_TEMPLATE("device kernels match the host kernels bit for bit", T, std::int8_t,
                   std::uint8_t, std::int16_t, std::uint16_t, std::int32_t, std::uint32_t,
                   std::int64_t, std::uint64_t, tutti::half, tutti::bfloat16, float, double, bool,
                   char) {
  check_type<T>(std::make_index_sequence<tutti::detail::op_kind_count - 1>{});
}

TEST_CASE("the program-wide table fills") {
  tutti::detail::fill_device_reducers(tutti::detail::device_reducer_table());
  CHECK(tutti::detail::device_reducer_table().filled);
  CHECK((tutti::detail::device_reducer_table().find(op_kind::sum, tutti::dtype::float32) ==
         &tutti::detail::cuda::launch_combine<op_kind::sum, float>));
}

int main(int argc, char** argv) {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
