// The collective suite (tests/suite.hpp) across processes over tutti::gloo on loopback: for
// every policy that runs on point-to-point messages, and tutti::native (Gloo's own
// collectives), at world sizes 1-8; tutti::spawn forks the ranks, each builds
// communicator<gloo, P>::from_env() and runs the sweep. Also the program, as written.
//
// Element types: one of each size and kind (1, 2, 4, 8 and 16 bytes; integer and floating),
// every op they admit. The algorithms see bytes and a type-erased reduction, and test_shm and
// test_collectives run all 17 types through them; what the transport adds per type is the
// element size (Gloo's own collectives are instantiated per size) — and every TCP message
// costs tens of microseconds here, so the full matrix would take many minutes per policy.

#include <cstdint>
#include <cstdio>
#include <tuple>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/transport/gloo.hpp>

#include "suite.hpp"

namespace {

using gloo_types = std::tuple<std::int8_t, tutti::bfloat16, std::uint16_t, std::int32_t, float,
                              double, std::uint64_t, long double>;

template <class P>
void sweep_policy(const std::vector<int>& sizes) {
  for (int p : sizes) {
    CAPTURE(p);
    const int rc = tutti::spawn(p, [] {
      auto comm = tutti::communicator<tutti::gloo, P>::from_env();
      suite::failures f;
      suite::run_suite<P, gloo_types>(comm, f);
      if (f.count.load() == 0) return 0;
      std::fprintf(stderr, "%s rank %d: %ld failures\n%s", P::name, comm.rank(), f.count.load(),
                   f.text().c_str());
      return 1;
    });
    CHECK_MESSAGE(rc == 0, P::name << " at " << p << " ranks failed (see stderr)");
  }
}

// Every policy at every size in Release; under the sanitizers (each TCP message there costs
// much more) the sizes that cover 1, 2, a power of two and the odd ones.
std::vector<int> sizes() {
  if (harness::sanitized) return {1, 2, 3, 5};
  return {1, 2, 3, 4, 5, 6, 7, 8};
}

}  // namespace

TEST_CASE("the issue's program: spawn 4, all_reduce over gloo") {
  const int rc = tutti::spawn(4, [] {
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    std::vector<float> v(1 << 16, comm.rank() + 1.0f);  // NOLINT: verbatim
    comm.all_reduce(std::span<float>(v), tutti::sum);
    return v[0] == 10.0f ? 0 : 1;
  });
  CHECK(rc == 0);
}

TEST_CASE("gloo ring: every collective it implements") { sweep_policy<tutti::ring>(sizes()); }
TEST_CASE("gloo tree: every collective it implements") { sweep_policy<tutti::tree>(sizes()); }
TEST_CASE("gloo recursive_halving: every collective it implements") {
  sweep_policy<tutti::recursive_halving>(sizes());
}
TEST_CASE("gloo recursive_doubling: every collective it implements") {
  sweep_policy<tutti::recursive_doubling>(sizes());
}
TEST_CASE("gloo bruck: every collective it implements") { sweep_policy<tutti::bruck>(sizes()); }
TEST_CASE("gloo native: every collective Gloo has") { sweep_policy<tutti::native>(sizes()); }
TEST_CASE("gloo automatic: every collective") { sweep_policy<tutti::automatic>(sizes()); }
