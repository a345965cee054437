// Non-blocking point-to-point (communicator::isend, irecv, batch) over tutti::gloo across
// processes on loopback: the checks of tests/p2p_checks.hpp at 2-4 ranks (point-to-point
// messages always ride Gloo's TCP pairs), polling through done(), and a peer killed while a
// rank waits for its message.

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/spawn.hpp>
#include <tutti/transport/gloo.hpp>

#include "fork_ranks.hpp"
#include "harness.hpp"
#include "p2p_checks.hpp"

TEST_CASE("gloo isend/irecv/batch: rings, tags, all-to-all batches, beside collectives") {
  for (int p : {2, 3, 4}) {
    CAPTURE(p);
    const int rc = tutti::spawn(p, [] {
      auto comm = tutti::communicator<tutti::gloo>::from_env();
      const std::string bad = p2p_checks::all_checks(comm, harness::sanitized ? 100'000 : 300'000);
      if (!bad.empty()) std::fprintf(stderr, "rank %d: %s\n", comm.rank(), bad.c_str());
      return bad.empty() ? 0 : 1;
    });
    CHECK(rc == 0);
  }
}

TEST_CASE("gloo irecv: a peer killed while this rank polls is named, within the timeout") {
  fork_ranks::temp_dir dir;
  p2p_checks::check_killed_peer(
      [&](int r, int n, const tutti::options& o) {
        return tutti::communicator<tutti::gloo>::from_url(dir.url(), r, n, o);
      },
      true);
}
