// Collectives move tutti::element types only; a struct is rejected by the concept on the
// public entry point.
// expect-error: constraints not satisfied|no matching (member )?function
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

struct particle {
  float x, y, z;
};

void reduce_particles(tutti::communicator<tutti::inproc, tutti::ring>& comm);

void reduce_particles(tutti::communicator<tutti::inproc, tutti::ring>& comm) {
#ifndef TUTTI_COMPILE_FAIL_CONTROL
  std::vector<particle> v(8);
  comm.all_reduce(std::span<particle>(v), tutti::sum);
#else
  std::vector<float> v(8 * 3);
  comm.all_reduce(std::span<float>(v), tutti::sum);
#endif
}
