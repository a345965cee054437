// bool admits only min, max and the bitwise ops: summing it is a compile-time error.
// expect-error: this op cannot reduce this element type
#include <span>

#include <tutti/tutti.hpp>

void any_flag(tutti::communicator<tutti::inproc, tutti::ring>& comm, std::span<bool> flags);

void any_flag(tutti::communicator<tutti::inproc, tutti::ring>& comm, std::span<bool> flags) {
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  comm.all_reduce(flags, tutti::sum);
#else
  comm.all_reduce(flags, tutti::bor);
#endif
}
