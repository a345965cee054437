// The collective suite (tests/suite.hpp) across processes over tutti::shm: for every policy
// and world sizes 1-8 (more ranks than this machine has cores included; under the sanitizers
// harness::sweep_world_sizes), tutti::spawn forks
// the ranks, each builds communicator<shm, P>::from_env() and runs the whole sweep; a rank
// with failures prints them and exits non-zero.
//
// Element types: one of each size and kind (harness::representative_sweep_types: the
// representative ten in Release, fewer under the sanitizers), as test_gloo's: what the
// transport adds per type is the element's size and alignment, and test_collectives runs all
// 17 types through automatic.

#include <cstdio>

#include <doctest/doctest.h>

#include "suite.hpp"

namespace {

template <class P>
void sweep_policy() {
  for (int p : harness::sweep_world_sizes()) {
    CAPTURE(p);
    const int rc = tutti::spawn(p, [] {
      auto comm = tutti::communicator<tutti::shm, P>::from_env();
      suite::failures f;
      suite::run_suite<P, harness::representative_sweep_types>(comm, f);
      if (f.count.load() == 0) return 0;
      std::fprintf(stderr, "%s rank %d: %ld failures\n%s", P::name, comm.rank(), f.count.load(),
                   f.text().c_str());
      return 1;
    });
    CHECK_MESSAGE(rc == 0, P::name << " at " << p << " ranks failed (see stderr)");
  }
}

}  // namespace

TEST_CASE("shm ring: every collective it implements") { sweep_policy<tutti::ring>(); }
TEST_CASE("shm tree: every collective it implements") { sweep_policy<tutti::tree>(); }
TEST_CASE("shm recursive_halving: every collective it implements") {
  sweep_policy<tutti::recursive_halving>();
}
TEST_CASE("shm recursive_doubling: every collective it implements") {
  sweep_policy<tutti::recursive_doubling>();
}
TEST_CASE("shm direct: every collective it implements") { sweep_policy<tutti::direct>(); }
TEST_CASE("shm bruck: every collective it implements") { sweep_policy<tutti::bruck>(); }
TEST_CASE("shm automatic: every collective") { sweep_policy<tutti::automatic>(); }
