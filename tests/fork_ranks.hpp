#pragma once
// Ranks as forked processes for the fault tests (not tutti::spawn, which stops the survivors as
// soon as one rank dies): run_ranks forks them, a report in shared memory carries what each
// caught, temp_dir gives each world a fresh file:// store.

#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/core/error.hpp>
#include <tutti/core/ops.hpp>
#include <tutti/core/options.hpp>
#include <tutti/detail/cma.hpp>

#include "harness_common.hpp"

namespace fork_ranks {

using clock_type = std::chrono::steady_clock;

inline long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

/// Whether two sibling processes (as forked or spawned ranks are) may read and write each
/// other's memory here, so that tutti::gloo's single copies are on between them: Yama's
/// ptrace_scope or a container's seccomp profile may forbid it.
inline bool siblings_can_read_memory() {
  static std::uint64_t word = 0x5eed;
  int fds[2];
  if (::pipe(fds) != 0) return false;
  const pid_t holder = ::fork();
  if (holder == 0) {
    ::close(fds[1]);
    char c = 0;
    (void)!::read(fds[0], &c, 1);  // until the parent closes the pipe
    ::_exit(0);
  }
  ::close(fds[0]);
  const pid_t reader = ::fork();
  if (reader == 0) {
    const auto at = reinterpret_cast<std::uintptr_t>(&word);
    std::uint64_t got = 0;
    ::_exit(tutti::detail::cma_read(holder, &got, at, sizeof got) == 0 && got == 0x5eed &&
                    tutti::detail::cma_write_word(holder, got, at) == 0
                ? 0
                : 1);
  }
  int status = 0;
  ::waitpid(reader, &status, 0);
  ::close(fds[1]);
  ::waitpid(holder, nullptr, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0;
}

/// What the ranks tell the test, in memory shared across fork.
struct report {
  std::atomic<long long> died_ns{0};
  std::atomic<int> pids[8] = {};
  std::atomic<int> kind[8] = {};  // tutti::errc of the error caught, 0 for none
  std::atomic<int> peer[8] = {};
  std::atomic<long long> caught_ns[8] = {};
  std::atomic<long long> slowest_ns[8] = {};  // the longest call before the fault, per rank
  char what[8][1024] = {};  // the start of the error's message, for the checks and the output
  char segment[64] = {};
};

class shared_report {
 public:
  shared_report() {
    void* p =
        mmap(nullptr, sizeof(report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(p != MAP_FAILED);
    r_ = new (p) report;
  }
  shared_report(const shared_report&) = delete;
  shared_report& operator=(const shared_report&) = delete;
  ~shared_report() { munmap(r_, sizeof(report)); }
  report* operator->() const noexcept { return r_; }

 private:
  report* r_;
};

/// A fresh directory for one world's file store, removed afterwards (shared with the harnesses).
using tutti_harness::temp_dir;

/// Forks n ranks running body(rank); returns their wait statuses. Any rank still running after
/// `limit` is killed (and the test fails on its status).
inline std::vector<int> run_ranks(int n, const std::function<int(int)>& body,
                                  std::chrono::seconds limit = std::chrono::seconds(60)) {
  std::fflush(nullptr);
  std::vector<pid_t> pids;
  for (int r = 0; r < n; ++r) {
    const pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
      int code = 99;
      try {
        code = body(r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: unexpected exception: %s\n", r, e.what());
        code = 98;
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids.push_back(pid);
  }
  std::vector<int> status(static_cast<std::size_t>(n), -1);
  const auto deadline = clock_type::now() + limit;
  std::size_t left = pids.size();
  while (left > 0) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (status[i] != -1) continue;
      int st = 0;
      if (waitpid(pids[i], &st, WNOHANG) == pids[i]) {
        status[i] = st;
        --left;
      }
    }
    if (left > 0 && clock_type::now() > deadline)
      for (std::size_t i = 0; i < pids.size(); ++i)
        if (status[i] == -1) kill(pids[i], SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return status;
}

inline bool exited_with(int status, int code) {
  return WIFEXITED(status) && WEXITSTATUS(status) == code;
}

/// Waits until `rank` has reported what it caught (its `kind` is set), at most `limit`
/// (a rank that never reports fails the test some other way; this never hangs it). False if the
/// limit passed first.
inline bool await_report(const report* rep, int rank,
                         std::chrono::milliseconds limit = std::chrono::seconds(10)) {
  const auto until = clock_type::now() + limit;
  while (rep->kind[rank] == 0) {
    if (clock_type::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

template <class Fn>
int expect_error(report* rep, int rank, Fn&& fn) {
  try {
    fn();
  } catch (const tutti::error& e) {
    rep->caught_ns[rank] = now_ns();
    std::snprintf(rep->what[rank], sizeof rep->what[rank], "%s", e.what());
    rep->kind[rank] = static_cast<int>(e.kind());
    rep->peer[rank] = e.peer();
    return 0;
  }
  return 1;  // no error: the test fails on this exit code
}

/// Runs `call` as the `i`-th call of rank `r` and keeps the longest any call took in
/// `slowest_ns[r]`: how slow the machine is right now, which a detection limit allows for.
template <class Call>
void timed_call(report* rep, int r, Call&& call) {
  const long long started = now_ns();
  call();
  const long long took = now_ns() - started;
  if (took > rep->slowest_ns[r]) rep->slowest_ns[r] = took;
}

/// The limit for naming a fault: `quiet` as on a quiet machine, plus ten times the slowest call
/// any rank made before it (a busy machine stretches detection as it stretches every call).
inline double stretched_limit_s(const report* rep, int n, double quiet) {
  long long slowest = 0;
  for (int r = 0; r < n; ++r) slowest = std::max(slowest, rep->slowest_ns[r].load());
  return quiet + 10 * double(slowest) * 1e-9;
}

/// Survivor `r` of a world whose rank `victim` died exited 0 after raising peer_lost naming it.
inline void check_named_death(const std::vector<int>& status, const report* rep, int r,
                              int victim) {
  CAPTURE(r);
  const std::string what = rep->what[r];
  CAPTURE(what);
  CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
  CHECK(rep->kind[r] == static_cast<int>(tutti::errc::peer_lost));
  CHECK(rep->peer[r] == victim);
}

/// n ranks loop over all_reduce; rank n - 1 kills itself (SIGKILL) at its call `at`. Every
/// other rank must raise peer_lost naming it within 1 s (stretched_limit_s). `make(rank)`
/// builds a rank's communicator; `joined(comm, rank)` runs once it exists.
template <class Make, class Joined>
void check_killed_rank(int n, int at, shared_report& rep, Make&& make, Joined&& joined,
                       std::size_t count = 4096) {
  const int victim = n - 1;
  const auto status = run_ranks(n, [&](int r) {
    auto comm = make(r);
    rep->pids[r] = getpid();
    joined(comm, r);
    std::vector<float> v(count, 1.0f);
    return expect_error(rep.operator->(), r, [&] {
      for (int i = 0;; ++i) {
        if (r == victim && i == at) {
          rep->died_ns = now_ns();
          raise(SIGKILL);
        }
        timed_call(rep.operator->(), r, [&] { comm.all_reduce(std::span<float>(v), tutti::max); });
      }
    });
  });
  CHECK(WIFSIGNALED(status[static_cast<std::size_t>(victim)]));
  const double limit = stretched_limit_s(rep.operator->(), n, 1.0);
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    check_named_death(status, rep.operator->(), r, victim);
    const double seconds = double(rep->caught_ns[r] - rep->died_ns) * 1e-9;
    CAPTURE(r);
    CHECK(seconds >= 0.0);
    CHECK(seconds < limit);
  }
}

/// Two ranks; rank 1 dies (SIGKILL) after a barrier while rank 0 polls a receive from it with
/// done() (as MPI_Test loops do). Rank 0 must raise peer_lost naming rank 1 within 1 s
/// (stretched_limit_s), as a blocking wait does. `make(rank)` builds a rank's communicator.
template <class Make>
void check_killed_rank_polled(Make&& make) {
  shared_report rep;
  const auto status = run_ranks(2, [&](int r) {
    auto comm = make(r);
    timed_call(rep.operator->(), r, [&] { comm.barrier(); });
    if (r == 1) {
      rep->died_ns = now_ns();
      raise(SIGKILL);
    }
    std::vector<int> v(5, 0);
    return expect_error(rep.operator->(), r, [&] {
      const tutti::work w = comm.irecv(std::span<int>(v), 1, 7);
      while (!w.done()) std::this_thread::sleep_for(std::chrono::microseconds(50));
      w.wait();
    });
  });
  CHECK(WIFSIGNALED(status[1]));
  check_named_death(status, rep.operator->(), 0, 1);
  const double seconds = double(rep->caught_ns[0] - rep->died_ns) * 1e-9;
  CHECK(seconds >= 0.0);
  CHECK(seconds < stretched_limit_s(rep.operator->(), 2, 1.0));
}

/// Two ranks; rank 1 stays alive but never calls. Rank 0's broadcast must raise timeout at its
/// deadline (300 ms), well before 5 s. `make(rank, opts)` builds a rank's communicator.
template <class Make>
void check_silent_rank(Make&& make) {
  shared_report rep;
  const auto status = run_ranks(2, [&](int r) {
    tutti::options opts;
    opts.timeout = std::chrono::milliseconds(300);
    auto comm = make(r, opts);
    if (r == 1) {  // stays alive but never calls, until rank 0 is done
      return await_report(rep.operator->(), 0) ? 0 : 1;
    }
    std::vector<int> v(5, 1);
    const auto t0 = clock_type::now();
    const int rc = expect_error(rep.operator->(), r, [&] { comm.broadcast(std::span<int>(v), 1); });
    const auto waited = clock_type::now() - t0;
    return rc == 0 && waited >= std::chrono::milliseconds(300) && waited < std::chrono::seconds(5)
               ? 0
               : 1;
  });
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
  CHECK(rep->kind[0] == static_cast<int>(tutti::errc::timeout));
}

/// Two ranks: a barrier, then rank 1 sends to rank 0 after 300 ms. The receive waits long
/// enough to poll and must not be compared with the barrier (no false mismatch).
template <class Make>
void check_slow_send_after_collective(Make&& make) {
  const auto status = run_ranks(2, [&](int r) {
    auto comm = make(r, tutti::options{});
    std::vector<int> msg{r == 1 ? 21 : 0};
    comm.barrier();
    if (r == 1) {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.send(std::span<const int>(msg), 0);
      return 0;
    }
    comm.recv(std::span<int>(msg), 1);
    return msg[0] == 21 ? 0 : 1;
  });
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
}

/// Four ranks loop over all_reduce; rank 2 stops itself (SIGSTOP) at its call 50. Every other
/// rank must raise timeout naming rank 2, whoever it waited on, between its 500 ms timeout and
/// 5 s after the stop; then rank 0 kills rank 2 (SIGKILL ends a stopped process) and all are
/// reaped. `make(rank, opts)` builds a rank's communicator. With `idle_neighbour`, rank 1
/// sleeps 2 s outside tutti before its call 50, so its beat stands still as long as rank 2's
/// (the lower rank won such a tie): a live rank that does not run for a while, as on a busy
/// machine, must not be taken for the stopped one.
template <class Make>
void check_stopped_rank(Make&& make, bool idle_neighbour = false) {
  constexpr int n = 4;
  constexpr int victim = 2;
  shared_report rep;
  const auto status = run_ranks(
      n,
      [&](int r) {
        tutti::options opts;
        opts.timeout = std::chrono::milliseconds(500);
        auto comm = make(r, opts);
        rep->pids[r] = getpid();
        std::vector<float> v(4096, 1.0f);
        const int rc = expect_error(rep.operator->(), r, [&] {
          for (int i = 0;; ++i) {
            if (r == victim && i == 50) {
              rep->died_ns = now_ns();
              raise(SIGSTOP);
            }
            if (idle_neighbour && r == 1 && i == 50)
              std::this_thread::sleep_for(std::chrono::seconds(2));
            timed_call(rep.operator->(), r,
                       [&] { comm.all_reduce(std::span<float>(v), tutti::max); });
          }
        });
        if (r == 0) {  // once every survivor raised (or 10 s passed), end the stopped rank
          const auto until = clock_type::now() + std::chrono::seconds(10);
          while ((rep->kind[1] == 0 || rep->kind[3] == 0) && clock_type::now() < until)
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
          kill(rep->pids[victim], SIGKILL);
        }
        return rc;
      },
      std::chrono::seconds(30));
  CHECK((WIFSIGNALED(status[victim]) && WTERMSIG(status[victim]) == SIGKILL));
  for (int r = 0; r < n; ++r) {
    if (r == victim) continue;
    CAPTURE(r);
    const std::string what = rep->what[r];
    CAPTURE(what);
    CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
    CHECK(rep->kind[r] == static_cast<int>(tutti::errc::timeout));
    CHECK(rep->peer[r] == victim);
    const double seconds = double(rep->caught_ns[r] - rep->died_ns) * 1e-9;
    CHECK(seconds >= 0.0);
    CHECK(seconds < stretched_limit_s(rep.operator->(), n, 5.0));
  }
}

}  // namespace fork_ranks
