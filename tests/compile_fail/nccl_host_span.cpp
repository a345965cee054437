// Host memory (std::span) handed to a communicator over tutti::nccl is a compile-time error
// whose message says what to pass instead, not a crash in NCCL at run time.
// expect-error: static assertion failed
// expect-error: device_span
#include <cstddef>
#include <span>
#include <vector>

#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

void reduce_host(tutti::communicator<tutti::nccl, tutti::native>& comm, float* device_ptr,
                 std::size_t n);

void reduce_host(tutti::communicator<tutti::nccl, tutti::native>& comm, float* device_ptr,
                 std::size_t n) {
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  (void)device_ptr;
  std::vector<float> host(n, 1.0f);
  comm.all_reduce(std::span<float>(host), tutti::sum);
#else
  comm.all_reduce(tutti::device_span<float>(device_ptr, n), tutti::sum);
#endif
}
