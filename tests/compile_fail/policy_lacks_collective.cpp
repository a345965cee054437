// tutti::bruck implements all_gather and all_to_all only: asking it for all_reduce is a
// compile-time error naming the missing collective.
// expect-error: does not implement all_reduce
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

void sum_with_bruck(tutti::communicator<tutti::inproc, tutti::bruck>& comm);

void sum_with_bruck(tutti::communicator<tutti::inproc, tutti::bruck>& comm) {
  std::vector<float> v(8, 1.0f);
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  comm.all_reduce(std::span<float>(v), tutti::sum);
#else
  std::vector<float> all(v.size() * static_cast<std::size_t>(comm.size()));
  comm.all_gather(std::span<const float>(v), std::span<float>(all));
#endif
}
