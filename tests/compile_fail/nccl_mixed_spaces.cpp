// On tutti::nccl both buffers of a collective live on the GPU: a host input beside a device
// output is a compile-time error whose message says what to pass, not a crash in NCCL.
// expect-error: static assertion failed
// expect-error: pass tutti::device_span
#include <cstddef>
#include <span>
#include <vector>

#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

void gather_to_device(tutti::communicator<tutti::nccl>& comm, const float* mine, float* all,
                      std::size_t n);

void gather_to_device(tutti::communicator<tutti::nccl>& comm, const float* mine, float* all,
                      std::size_t n) {
  const auto p = static_cast<std::size_t>(comm.size());
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  std::vector<float> host(mine, mine + n);  // host memory
  comm.all_gatherv_async(std::span<const float>(host), tutti::device_span<float>(all, n * p),
                         std::vector<std::size_t>(p, n))
      .wait();
#else
  comm.all_gatherv_async(tutti::device_span<const float>(mine, n),
                         tutti::device_span<float>(all, n * p), std::vector<std::size_t>(p, n))
      .wait();
#endif
}
