// Bandwidth of tutti's device sum kernel (d = a + b) against a device-to-device copy of the
// same number of bytes, for float, half and bfloat16, 1 MiB to 1 GiB per buffer.
//
// Bytes moved: the kernel reads a and b and writes d (3 x bytes); the copy reads and writes
// once (2 x bytes). Both rates count every byte that crosses the memory bus, so their ratio
// says how close the kernel comes to the copy engine's and HBM's limit (target: >= 0.9).
// Each number is the best of 10 timed runs (cudaEvent) after a warm-up run. The sum is
// checked: a = 1 and b = 2 everywhere, so every element of d must be exactly 3.
//
// Usage: tutti-bench-device-reduce [--csv]. Without a usable CUDA device it prints one SKIP
// line and exits with 77.

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "tutti/core/bfloat16.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/cuda_reduce.cuh"
#include "tutti/detail/device_reduce.hpp"

namespace {

constexpr int timed_runs = 10;

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "tutti-bench-device-reduce: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

template <class U>
__global__ void fill_kernel(U* p, std::size_t n, U value) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    p[i] = value;
}

template <class U>
__global__ void count_mismatches(const U* p, std::size_t n, U value, unsigned long long* bad) {
  for (std::size_t i = static_cast<std::size_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<std::size_t>(gridDim.x) * blockDim.x)
    if (p[i] != value) atomicAdd(bad, 1ULL);
}

/// The bits of `v` as the element type T stores them (16-bit floats: their raw bits).
template <class T>
auto bits_of(float v) {
  if constexpr (std::is_same_v<T, float>) {
    std::uint32_t b = 0;
    std::memcpy(&b, &v, 4);
    return b;
  } else {
    return T(v).to_bits();
  }
}

/// Best time in milliseconds of `timed_runs` runs of `body` after one warm-up run.
template <class F>
float best_ms(cudaStream_t s, cudaEvent_t start, cudaEvent_t stop, F body) {
  body();
  float best = 1e30F;
  for (int r = 0; r < timed_runs; ++r) {
    cudaEventRecord(start, s);
    body();
    cudaEventRecord(stop, s);
    cudaEventSynchronize(stop);
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    best = std::min(best, ms);
  }
  return best;
}

struct buffers {
  void* a = nullptr;
  void* b = nullptr;
  void* d = nullptr;
  unsigned long long* bad = nullptr;
};

/// Runs every size for element type T; returns false on a CUDA error or a wrong sum.
template <class T>
bool run_type(const buffers& buf, std::size_t max_bytes, cudaStream_t s, cudaEvent_t start,
              cudaEvent_t stop, bool csv) {
  const auto combine =
      tutti::detail::device_reducer_table().find(tutti::op_kind::sum, tutti::dtype_of<T>);
  const auto one = bits_of<T>(1.0F);
  const auto two = bits_of<T>(2.0F);
  const auto three = bits_of<T>(3.0F);
  using U = std::remove_const_t<decltype(one)>;
  const std::string_view type = tutti::name(tutti::dtype_of<T>);
  for (std::size_t bytes = std::size_t{1} << 20; bytes <= max_bytes; bytes *= 4) {
    const std::size_t n = bytes / sizeof(T);
    fill_kernel<U><<<1024, 256, 0, s>>>(static_cast<U*>(buf.a), n, one);
    fill_kernel<U><<<1024, 256, 0, s>>>(static_cast<U*>(buf.b), n, two);
    int launch = 0;
    const float kernel_ms =
        best_ms(s, start, stop, [&] { launch |= combine(buf.d, buf.a, buf.b, n, s); });
    if (!ok(static_cast<cudaError_t>(launch), "sum kernel launch")) return false;
    const float copy_ms = best_ms(
        s, start, stop, [&] { cudaMemcpyAsync(buf.d, buf.a, bytes, cudaMemcpyDeviceToDevice, s); });
    // The copy overwrote d: run the kernel once more and check every element.
    launch = combine(buf.d, buf.a, buf.b, n, s);
    cudaMemsetAsync(buf.bad, 0, sizeof(unsigned long long), s);
    count_mismatches<U><<<1024, 256, 0, s>>>(static_cast<const U*>(buf.d), n, three, buf.bad);
    unsigned long long bad = 0;
    cudaMemcpyAsync(&bad, buf.bad, sizeof bad, cudaMemcpyDeviceToHost, s);
    if (!ok(cudaStreamSynchronize(s), "benchmark") ||
        !ok(static_cast<cudaError_t>(launch), "sum kernel launch"))
      return false;
    if (bad != 0) {
      std::fprintf(stderr, "tutti-bench-device-reduce: %s, %zu bytes: %llu elements are not 3\n",
                   type.data(), bytes, bad);
      return false;
    }
    const double kernel_gbs = 3.0 * static_cast<double>(bytes) / (kernel_ms * 1e6);
    const double copy_gbs = 2.0 * static_cast<double>(bytes) / (copy_ms * 1e6);
    std::printf(csv ? "%s,%zu,%.1f,%.1f,%.3f\n" : "%-9s %12zu %12.1f %12.1f %7.3f\n", type.data(),
                bytes, kernel_gbs, copy_gbs, kernel_gbs / copy_gbs);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  bool csv = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--csv") {
      csv = true;
    } else {
      std::fprintf(stderr, "usage: %s [--csv]\n", argv[0]);
      return 2;
    }
  }
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    std::printf("SKIP: no CUDA device (%s)\n",
                e != cudaSuccess ? cudaGetErrorString(e) : "cudaGetDeviceCount found none");
    return 77;
  }
  tutti::detail::fill_device_reducers(tutti::detail::device_reducer_table());

  // Three buffers of up to 1 GiB each; smaller if the device cannot hold them.
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (!ok(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo")) return 1;
  std::size_t max_bytes = std::size_t{1} << 30;
  while (max_bytes > (std::size_t{1} << 20) && 3 * max_bytes + (64U << 20) > free_bytes)
    max_bytes /= 4;

  buffers buf;
  cudaStream_t s = nullptr;
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  if (!ok(cudaMalloc(&buf.a, max_bytes), "cudaMalloc") ||
      !ok(cudaMalloc(&buf.b, max_bytes), "cudaMalloc") ||
      !ok(cudaMalloc(&buf.d, max_bytes), "cudaMalloc") ||
      !ok(cudaMalloc(&buf.bad, sizeof(unsigned long long)), "cudaMalloc") ||
      !ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate") ||
      !ok(cudaEventCreate(&start), "cudaEventCreate") ||
      !ok(cudaEventCreate(&stop), "cudaEventCreate"))
    return 1;

  cudaDeviceProp prop{};
  int device = 0;
  cudaGetDevice(&device);
  cudaGetDeviceProperties(&prop, device);
  if (csv) {
    std::printf("type,bytes,kernel_gbps,copy_gbps,ratio\n");
  } else {
    std::printf(
        "# %s, %d SMs; kernel GB/s counts 3 x bytes (read a, b; write d), copy GB/s "
        "2 x bytes; best of %d\n",
        prop.name, prop.multiProcessorCount, timed_runs);
    std::printf("%-9s %12s %12s %12s %7s\n", "type", "bytes", "kernel GB/s", "copy GB/s", "ratio");
  }
  const bool passed = run_type<float>(buf, max_bytes, s, start, stop, csv) &&
                      run_type<tutti::half>(buf, max_bytes, s, start, stop, csv) &&
                      run_type<tutti::bfloat16>(buf, max_bytes, s, start, stop, csv);

  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaStreamDestroy(s);
  cudaFree(buf.a);
  cudaFree(buf.b);
  cudaFree(buf.d);
  cudaFree(buf.bad);
  return passed ? 0 : 1;
}
