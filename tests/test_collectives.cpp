// The collective suite (tests/suite.hpp) on inproc: one world of threads per (policy, world
// size) runs the whole sweep, so the matrix costs collectives, not thread starts. The >= 1M
// counts run for float, int32, half and double with sum (all world sizes in Release, sizes 2,
// 5 and 8 under sanitizers). Every element type and world sizes 1-8 in Release; under the
// sanitizers one of each size and kind (harness::sweep_types), and the world sizes of
// harness::sweep_world_sizes.

#include <doctest/doctest.h>

#include "suite.hpp"

namespace {

template <class P>
void sweep_policy() {
  suite::failures f;
  for (int p : harness::sweep_world_sizes())
    tutti::inproc::run<P>(p, [&](auto& comm) { suite::run_suite<P>(comm, f); });
  INFO(P::name);
  CHECK_MESSAGE(f.count.load() == 0, f.text());
}

}  // namespace

TEST_CASE("ring: every collective it implements") { sweep_policy<tutti::ring>(); }
TEST_CASE("tree: every collective it implements") { sweep_policy<tutti::tree>(); }
TEST_CASE("recursive_halving: every collective it implements") {
  sweep_policy<tutti::recursive_halving>();
}
TEST_CASE("recursive_doubling: every collective it implements") {
  sweep_policy<tutti::recursive_doubling>();
}
TEST_CASE("direct: every collective it implements") { sweep_policy<tutti::direct>(); }
TEST_CASE("bruck: every collective it implements") { sweep_policy<tutti::bruck>(); }
TEST_CASE("automatic: every collective") {
  if (harness::sweep_automatic) sweep_policy<tutti::automatic>();
}
