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

TEST_CASE("gloo irecv: a peer killed while this rank waits is named, within the timeout") {
  fork_ranks::temp_dir dir;
  tutti::options opts;
  opts.timeout = std::chrono::seconds(30);
  const auto status = fork_ranks::run_ranks(2, [&](int r) {
    auto comm = tutti::communicator<tutti::gloo>::from_url(dir.url(), r, 2, opts);
    comm.barrier();
    if (r == 1) ::kill(::getpid(), SIGKILL);
    std::vector<int> v(16);
    const auto start = std::chrono::steady_clock::now();
    auto w = comm.irecv(std::span<int>(v), 1);
    try {
      while (!w.done()) {
      }
      w.wait();
      return 2;
    } catch (const tutti::error& e) {
      if (std::chrono::steady_clock::now() - start >= opts.timeout) return 3;
      if (e.code() != tutti::errc::peer_lost) std::fprintf(stderr, "%s\n", e.what());
      return e.code() == tutti::errc::peer_lost && e.peer() == 1 ? 0 : 4;
    }
  });
  CHECK(fork_ranks::exited_with(status[0], 0));
  CHECK(WIFSIGNALED(status[1]));
}
