// A CUDA stream handed to a collective on a host-memory transport is a compile-time error that
// says why (host collectives do not run on a stream), not an argument silently ignored.
// expect-error: static assertion failed
// expect-error: not on a CUDA stream
#include <span>

#include <tutti/tutti.hpp>

void sum_on_stream(tutti::communicator<tutti::shm>& comm, std::span<float> grad,
                   tutti::stream_ref stream);

void sum_on_stream(tutti::communicator<tutti::shm>& comm, std::span<float> grad,
                   tutti::stream_ref stream) {
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  comm.all_reduce(grad, tutti::sum, stream);
#else
  (void)stream;
  comm.all_reduce(grad, tutti::sum, {});
#endif
}
