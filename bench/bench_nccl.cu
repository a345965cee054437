// tutti-bench-nccl: what tutti adds to NCCL's all_reduce. For every size, nccl-tests style, on
// float sum, raw NCCL on tutti's own NCCL communicator and stream (comm.transport().handle(),
// .stream()) next to tutti, like for like: a loop of ncclAllReduce then one stream
// synchronisation (raw) against a loop of comm.all_reduce_async then a wait (async); and
// ncclAllReduce + cudaStreamSynchronize per call (raw+sync) against tutti's blocking
// comm.all_reduce (one GPU round trip per call). One rank per GPU (tutti::spawn, or the ranks a
// launcher started). Every size is checked: each rank contributes rank + 1, every element must
// become n(n+1)/2, through tutti and through raw NCCL.
//
//   tutti-bench-nccl [-b 8] [-e 1G] [-f 2] [-n 20] [-w 5]
//
// Times are rank 0's wall clock per call, in microseconds (enqueue to completion, averaged over
// -n calls after -w warm-up calls); busbw = size / time * 2(n-1)/n (nccl-tests' factor).
// Exits 77 where there is no GPU, 1 when a check fails, 2 on a bad argument.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

namespace {

struct settings {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{1} << 30;
  std::size_t factor = 2;
  int iters = 20;
  int warmup = 5;
};

/// "8", "64K", "1M", "1G" as bytes; 0 when it does not parse.
std::size_t parse_size(std::string_view s) {
  std::size_t v = 0, i = 0;
  for (; i < s.size() && s[i] >= '0' && s[i] <= '9'; ++i) v = v * 10 + (s[i] - '0');
  if (i == 0) return 0;
  if (i + 1 == s.size()) {
    switch (s[i]) {
      case 'K':
      case 'k':
        return v << 10;
      case 'M':
      case 'm':
        return v << 20;
      case 'G':
      case 'g':
        return v << 30;
      default:
        return 0;
    }
  }
  return i == s.size() ? v : 0;
}

void cuda_ok(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(r));
}

__global__ void fill(float* x, std::size_t n, float value) {
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    x[i] = value;
}

__global__ void count_wrong(const float* x, std::size_t n, float want, unsigned long long* wrong) {
  unsigned long long mine = 0;
  for (std::size_t i = blockIdx.x * std::size_t{blockDim.x} + threadIdx.x; i < n;
       i += std::size_t{gridDim.x} * blockDim.x)
    mine += x[i] != want ? 1 : 0;
  if (mine != 0) atomicAdd(wrong, mine);
}

/// Raw NCCL on tutti's communicator, which is non-blocking (ncclConfig_t::blocking = 0): a
/// call may answer ncclInProgress, to be polled to completion before the next NCCL call.
void raw_all_reduce(float* buf, std::size_t n, ncclComm_t comm, cudaStream_t s) {
  ncclResult_t r = ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, s);
  while (r == ncclInProgress) {
    if (ncclCommGetAsyncError(comm, &r) != ncclSuccess) break;
  }
  if (r != ncclSuccess)
    throw std::runtime_error(std::string("ncclAllReduce: ") + ncclGetErrorString(r));
}

using clock_type = std::chrono::steady_clock;
double micros_since(clock_type::time_point t0, int calls) {
  return std::chrono::duration<double, std::micro>(clock_type::now() - t0).count() / calls;
}

/// DDP's communication for a 25.2M-parameter model (24 gradients of 1024 x 1024 floats, in
/// GPU memory) per step: tutti::bucketer (25 MiB buckets on the GPU, copies on the stream,
/// NCCL's avg), 24 separate all_reduce calls, and one all_reduce of all of it as a floor.
/// Returns the gradient elements that did not come out as the mean of the ranks' values.
template <class Comm>
unsigned long long bucket_step(Comm& comm, const settings& cfg) {
  constexpr std::size_t grads = 24, each = std::size_t{1} << 20;
  const int rank = comm.rank(), world = comm.size();
  const cudaStream_t stream = comm.transport().stream();
  float* flat = nullptr;
  cuda_ok(cudaMalloc(&flat, grads * each * sizeof(float)), "cudaMalloc");
  tutti::bucketer b(comm);
  for (std::size_t g = 0; g < grads; ++g) b.add(tutti::device_span<float>(flat + g * each, each));
  auto reset = [&] {
    fill<<<1024, 256, 0, stream>>>(flat, grads * each, static_cast<float>(rank + 1));
    cuda_ok(cudaGetLastError(), "fill");
  };
  auto time_steps = [&](auto step) {
    for (int i = 0; i < cfg.warmup; ++i) step();
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    comm.barrier();
    const auto t0 = clock_type::now();
    for (int i = 0; i < cfg.iters; ++i) step();
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return micros_since(t0, cfg.iters);
  };
  const double bucketer_us = time_steps([&] {
    for (std::size_t g = grads; g-- > 0;) b.mark_ready(g);
    b.finish();
  });
  const double separate_us = time_steps([&] {
    std::vector<tutti::work> w;
    for (std::size_t g = grads; g-- > 0;)
      w.push_back(
          comm.all_reduce_async(tutti::device_span<float>(flat + g * each, each), tutti::avg));
    for (auto& x : w) x.wait();
  });
  const double flat_us = time_steps(
      [&] { comm.all_reduce(tutti::device_span<float>(flat, grads * each), tutti::avg); });
  // Check: every rank's rank + 1, averaged by the bucketer, is (world + 1) / 2 everywhere.
  reset();
  for (std::size_t g = grads; g-- > 0;) b.mark_ready(g);
  b.finish();
  unsigned long long* wrong = nullptr;
  unsigned long long bad = 0;
  cuda_ok(cudaMalloc(&wrong, sizeof *wrong), "cudaMalloc");
  cuda_ok(cudaMemsetAsync(wrong, 0, sizeof *wrong, stream), "cudaMemsetAsync");
  count_wrong<<<1024, 256, 0, stream>>>(flat, grads * each, static_cast<float>(world + 1) / 2,
                                        wrong);
  cuda_ok(cudaMemcpyAsync(&bad, wrong, sizeof bad, cudaMemcpyDeviceToHost, stream), "copy");
  cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cuda_ok(cudaFree(wrong), "cudaFree");
  if (rank == 0)
    std::printf(
        "# DDP step, 24 x 1024 x 1024 float gradients on the GPU, %d rank(s): bucketer %.1f us, "
        "24 separate all_reduce %.1f us, one flat all_reduce %.1f us; wrong %llu\n",
        world, bucketer_us, separate_us, flat_us, bad);
  cuda_ok(cudaFree(flat), "cudaFree");
  return bad;
}

int rank_main(const settings& cfg) {
  auto comm = tutti::communicator<tutti::nccl, tutti::native>::from_env();
  const int rank = comm.rank(), world = comm.size();
  const ncclComm_t raw = comm.transport().handle();
  const cudaStream_t stream = comm.transport().stream();

  const std::size_t max_count = cfg.max_bytes / sizeof(float);
  float* buf = nullptr;
  unsigned long long* wrong = nullptr;
  cuda_ok(cudaMalloc(&buf, std::max<std::size_t>(max_count, 1) * sizeof(float)), "cudaMalloc");
  cuda_ok(cudaMalloc(&wrong, sizeof *wrong), "cudaMalloc");
  const auto set = [&](std::size_t n, float v) {
    fill<<<1024, 256, 0, stream>>>(buf, n, v);
    cuda_ok(cudaGetLastError(), "fill");
  };
  // Elements of buf[0, n) that are not `want`.
  const auto misses = [&](std::size_t n, float want) {
    unsigned long long host = 0;
    cuda_ok(cudaMemsetAsync(wrong, 0, sizeof *wrong, stream), "cudaMemsetAsync");
    count_wrong<<<1024, 256, 0, stream>>>(buf, n, want, wrong);
    cuda_ok(cudaMemcpyAsync(&host, wrong, sizeof host, cudaMemcpyDeviceToHost, stream), "copy");
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    return host;
  };

  if (rank == 0) {
    cudaDeviceProp prop{};
    cuda_ok(cudaGetDeviceProperties(&prop, comm.transport().device()), "cudaGetDeviceProperties");
    std::printf(
        "# tutti-bench-nccl: all_reduce, float, sum, in place; %d rank(s), one per GPU "
        "(%s); NCCL %d; %d warm-up + %d timed calls per size\n",
        world, prop.name, NCCL_VERSION_CODE, cfg.warmup, cfg.iters);
    std::printf("# %12s %12s %11s %11s %7s %11s %11s %7s %9s %6s\n", "size(B)", "count", "raw(us)",
                "async(us)", "ratio", "raw+sync", "tutti(us)", "ratio", "busbw", "wrong");
  }
  const float want = static_cast<float>(world) * (world + 1) / 2;
  unsigned long long total_wrong = 0;
  for (std::size_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= cfg.factor) {
    const std::size_t n = bytes / sizeof(float);
    if (n == 0) continue;
    const tutti::device_span<float> span(buf, n);
    set(n, 0.0f);  // zeros stay zeros however often they are summed

    // Raw NCCL: enqueue every call, then wait for the stream.
    for (int i = 0; i < cfg.warmup; ++i) raw_all_reduce(buf, n, raw, stream);
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    comm.barrier();
    auto t0 = clock_type::now();
    for (int i = 0; i < cfg.iters; ++i) raw_all_reduce(buf, n, raw, stream);
    cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    const double raw_us = micros_since(t0, cfg.iters);

    // Raw NCCL, blocking: every call waits for its stream.
    comm.barrier();
    t0 = clock_type::now();
    for (int i = 0; i < cfg.iters; ++i) {
      raw_all_reduce(buf, n, raw, stream);
      cuda_ok(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    }
    const double raw_sync_us = micros_since(t0, cfg.iters);

    // tutti, blocking: every call returns once its work on the GPU is done.
    for (int i = 0; i < cfg.warmup; ++i) comm.all_reduce(span, tutti::sum);
    comm.barrier();
    t0 = clock_type::now();
    for (int i = 0; i < cfg.iters; ++i) comm.all_reduce(span, tutti::sum);
    const double tutti_us = micros_since(t0, cfg.iters);

    // tutti, async: enqueue every call, then wait (stream order: the last one finishes last).
    comm.barrier();
    t0 = clock_type::now();
    std::vector<tutti::work> inflight;
    inflight.reserve(static_cast<std::size_t>(cfg.iters));
    for (int i = 0; i < cfg.iters; ++i) inflight.push_back(comm.all_reduce_async(span, tutti::sum));
    inflight.back().wait();
    const double async_us = micros_since(t0, cfg.iters);
    for (auto& w : inflight) w.wait();

    // Checks: rank + 1 everywhere sums to n(n+1)/2, through tutti and through raw NCCL.
    set(n, static_cast<float>(rank + 1));
    comm.all_reduce(span, tutti::sum);
    unsigned long long bad = misses(n, want);
    set(n, static_cast<float>(rank + 1));
    raw_all_reduce(buf, n, raw, stream);
    bad += misses(n, want);
    total_wrong += bad;

    if (rank == 0) {
      const double busbw =
          world > 1 ? static_cast<double>(bytes) / raw_us / 1e3 * 2.0 * (world - 1) / world : 0.0;
      std::printf("  %12zu %12zu %11.2f %11.2f %7.2f %11.2f %11.2f %7.2f %9.2f %6llu\n", bytes, n,
                  raw_us, async_us, async_us / raw_us, raw_sync_us, tutti_us,
                  tutti_us / raw_sync_us, busbw, bad);
      std::fflush(stdout);
    }
  }
  total_wrong += bucket_step(comm, cfg);
  cuda_ok(cudaFree(wrong), "cudaFree");
  cuda_ok(cudaFree(buf), "cudaFree");
  if (total_wrong != 0) std::fprintf(stderr, "rank %d: %llu wrong elements\n", rank, total_wrong);
  return total_wrong == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  settings cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    const char* value = i + 1 < argc ? argv[i + 1] : nullptr;
    bool ok = value != nullptr;
    if (ok && arg == "-b") {
      ok = (cfg.min_bytes = parse_size(value)) != 0;
    } else if (ok && arg == "-e") {
      ok = (cfg.max_bytes = parse_size(value)) != 0;
    } else if (ok && arg == "-f") {
      ok = (cfg.factor = parse_size(value)) >= 2;
    } else if (ok && arg == "-n") {
      ok = (cfg.iters = std::atoi(value)) > 0;
    } else if (ok && arg == "-w") {
      cfg.warmup = std::atoi(value);
      ok = cfg.warmup >= 0;
    } else {
      ok = false;
    }
    if (!ok) {
      std::fprintf(stderr,
                   "usage: %s [-b MIN_BYTES] [-e MAX_BYTES] [-f FACTOR>=2] [-n ITERS] "
                   "[-w WARMUP]  (sizes take K/M/G)\n",
                   argv[0]);
      return 2;
    }
    ++i;
  }
  if (cfg.min_bytes > cfg.max_bytes) {
    std::fprintf(stderr, "-b %zu is larger than -e %zu\n", cfg.min_bytes, cfg.max_bytes);
    return 2;
  }
  const int gpus = tutti::nccl::local_gpus();
  if (gpus == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  return tutti::spawn(gpus, [&cfg] { return rank_main(cfg); });
}
