// A bitwise reduction of floating-point data is a compile-time error with a sentence that
// says what to do, not a page of template errors.
// expect-error: bitwise ops .band, bor, bxor. need an integer element type
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

void reduce_bits(tutti::communicator<tutti::inproc, tutti::ring>& comm);

void reduce_bits(tutti::communicator<tutti::inproc, tutti::ring>& comm) {
  std::vector<float> v(8, 1.0f);
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  comm.all_reduce(std::span<float>(v), tutti::band);
#else
  comm.all_reduce(std::span<float>(v), tutti::max);
#endif
}
