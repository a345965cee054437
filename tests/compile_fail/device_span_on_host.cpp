// GPU memory (tutti::device_span) handed to a communicator over a host-memory transport is a
// compile-time error whose message says what to pass instead.
// expect-error: static assertion failed
// expect-error: device_span is GPU memory
#include <cstddef>
#include <span>

#include <tutti/tutti.hpp>

void gather_blocks(tutti::communicator<tutti::inproc>& comm, float* data, std::size_t n);

void gather_blocks(tutti::communicator<tutti::inproc>& comm, float* data, std::size_t n) {
  const auto p = static_cast<std::size_t>(comm.size());
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  comm.all_gather_async(tutti::device_span<float>(data, n * p)).wait();
#else
  comm.all_gather_async(std::span<float>(data, n * p)).wait();
#endif
}
