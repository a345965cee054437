// The collective suite (tests/suite.hpp) on inproc: one world of threads per (policy, world
// size) runs the whole sweep, so the matrix costs collectives, not thread starts. The >= 1M
// counts run for float, int32, half and double with sum (all world sizes in Release, sizes 2,
// 5 and 8 under sanitizers). World sizes 1-8 in Release, harness::sweep_world_sizes under the
// sanitizers; under TSan the policies harness::sweeps_policy names. Element types: automatic, which
// has every collective, runs every one (harness::sweep_types: all 17 in Release), the other
// policies one of each size and kind (harness::representative_sweep_types). A policy moves bytes
// and reduces through the element type's kernel: what a type changes is its size, alignment and
// kernel, which automatic's sweep takes for every type through the policies' schedules (and each
// type is an instantiation of the whole suite per policy).

#include <doctest/doctest.h>

#include "suite.hpp"

namespace {

// A policy TSan does not sweep (harness::sweeps_policy) is not instantiated there.
template <class P, class Types = harness::representative_sweep_types>
void sweep_policy() {
  if constexpr (harness::sweeps_policy<P>) {
    suite::failures f;
    for (int p : harness::sweep_world_sizes())
      tutti::inproc::run<P>(p, [&](auto& comm) { suite::run_suite<P, Types>(comm, f); });
    INFO(P::name);
    CHECK_MESSAGE(f.count.load() == 0, f.text());
  }
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
TEST_CASE("automatic: every collective, every element type") {
  sweep_policy<tutti::automatic, harness::sweep_types>();
}
