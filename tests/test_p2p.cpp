// Non-blocking point-to-point (communicator::isend, irecv, batch) on inproc (threads) and shm
// (processes): rings posted receive-first, tags matched out of order, all-to-all batches in
// every rank's own order at world sizes 2-8, messages pending across collectives, bad
// arguments, a communicator destroyed with a message pending, a peer killed mid-wait; and
// broadcast_object, all_gather_object, gather_object (10 MB strings, per-rank sizes).

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/run.hpp>
#include <tutti/transport/shm.hpp>

#include "fork_ranks.hpp"
#include "harness.hpp"
#include "p2p_checks.hpp"

namespace {

// Large enough that a message does not fit a transport's buffers (a blocking ring of this
// size deadlocks); smaller under the sanitizers, where time is dear.
constexpr std::size_t large = harness::sanitized ? 100'000 : 300'000;

std::vector<int> sizes() {
  if (harness::sanitized) return {2, 3, 4};
  return {2, 3, 4, 5, 6, 7, 8};
}

}  // namespace

TEST_CASE("inproc isend/irecv/batch: rings, tags, all-to-all batches, beside collectives") {
  for (int p : sizes()) {
    CAPTURE(p);
    std::mutex mu;
    std::string first;
    tutti::inproc::run(p, [&](auto& comm) {
      const std::string bad = p2p_checks::all_checks(comm, large);
      std::lock_guard lock(mu);
      if (first.empty()) first = bad;
    });
    CHECK(first == "");
  }
}

TEST_CASE("inproc objects: one rank, and ranks passing different element types") {
  tutti::inproc::run(1, [](auto& comm) { CHECK(p2p_checks::objects(comm) == ""); });
  std::atomic<int> raised{0};
  tutti::inproc::run(3, [&](auto& comm) {
    try {
      if (comm.rank() == 0) {
        (void)comm.all_gather_object(std::vector<std::int32_t>{1, 2});
      } else {
        (void)comm.all_gather_object(std::vector<std::int64_t>{3});
      }
    } catch (const tutti::error& e) {
      if (e.code() == tutti::errc::mismatch && e.peer() == (comm.rank() == 0 ? 1 : 0)) ++raised;
    }
  });
  CHECK(raised == 3);
}

TEST_CASE("shm isend/irecv/batch: rings, tags, all-to-all batches, beside collectives") {
  for (int p : sizes()) {
    CAPTURE(p);
    fork_ranks::temp_dir dir;
    const auto status = fork_ranks::run_ranks(p, [&](int r) {
      auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, p);
      const std::string bad = p2p_checks::all_checks(comm, large);
      if (!bad.empty()) std::fprintf(stderr, "rank %d: %s\n", r, bad.c_str());
      return bad.empty() ? 0 : 1;
    });
    for (int r = 0; r < p; ++r)
      CHECK(fork_ranks::exited_with(status[static_cast<std::size_t>(r)], 0));
  }
}

TEST_CASE("shm irecv: a communicator destroyed with a receive pending fails its work") {
  fork_ranks::temp_dir dir;
  const auto status = fork_ranks::run_ranks(2, [&](int r) {
    std::vector<int> v(16, -1);
    tutti::work w;
    {
      auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2);
      comm.barrier();
      if (r == 0) w = comm.irecv(std::span<int>(v), 1, 5);  // rank 1 never sends
      comm.barrier();
    }
    if (r == 1) return 0;
    if (!w.done()) return 2;
    try {
      w.wait();
      return 3;
    } catch (const tutti::error& e) {
      return e.code() == tutti::errc::aborted ? 0 : 4;
    }
  });
  CHECK(fork_ranks::exited_with(status[0], 0));
  CHECK(fork_ranks::exited_with(status[1], 0));
}

TEST_CASE("shm irecv: a size the two ends disagree on raises mismatch on the receiver") {
  fork_ranks::temp_dir dir;
  const auto status = fork_ranks::run_ranks(2, [&](int r) {
    auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2);
    if (r == 0) {
      std::vector<int> v(10, 1);
      comm.isend(std::span<const int>(v), 1, 2).wait();
      return 0;
    }
    std::vector<int> v(12);
    try {
      comm.irecv(std::span<int>(v), 0, 2).wait();
      return 2;
    } catch (const tutti::error& e) {
      if (e.code() != tutti::errc::mismatch) std::fprintf(stderr, "%s\n", e.what());
      return e.code() == tutti::errc::mismatch && e.peer() == 0 ? 0 : 3;
    }
  });
  CHECK(fork_ranks::exited_with(status[0], 0));
  CHECK(fork_ranks::exited_with(status[1], 0));
}

TEST_CASE("shm irecv: a peer killed while this rank waits is named, within the timeout") {
  fork_ranks::temp_dir dir;
  p2p_checks::check_killed_peer(
      [&](int r, int n, const tutti::options& o) {
        return tutti::communicator<tutti::shm>::from_url(dir.url(), r, n, o);
      },
      false);
}
