// tutti::shm across real processes when things go wrong: a rank killed with SIGKILL in a loop
// of all_reduces (the others raise peer_lost naming it within 1 s; nothing is left in /dev/shm
// or in the process table), mismatched calls, timeouts, point-to-point traffic larger than a
// channel in both directions at once, and the segment's name, owner and mode.
//
// Ranks are forked by hand (not tutti::spawn, which would stop the survivors as soon as one
// rank dies) and meet through a file:// store in a fresh directory.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <new>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/tutti.hpp>

#include "fork_ranks.hpp"

using namespace fork_ranks;  // NOLINT(google-build-using-namespace): test helpers

TEST_CASE("a rank killed during all_reduces: the others raise naming it within 1 s") {
  for (int n : {2, 4, 8}) {
    CAPTURE(n);
    shared_report rep;
    temp_dir dir;
    check_killed_rank(
        n, 300, rep,
        [&](int r) { return tutti::communicator<tutti::shm>::from_url(dir.url(), r, n); },
        [&](auto& comm, int r) {
          if (r != 0) return;
          const auto& name = comm.transport().segment_name();
          std::memcpy(rep->segment, name.data(), std::min(name.size(), sizeof(rep->segment) - 1));
        });
    // Nothing left behind: the segment was unlinked when the world formed, every rank is gone.
    CHECK(std::string(rep->segment).rfind("/tutti-", 0) == 0);
    CHECK_FALSE(std::filesystem::exists("/dev/shm" + std::string(rep->segment)));
    for (int r = 0; r < n; ++r) CHECK((kill(rep->pids[r], 0) == -1 && errno == ESRCH));
  }
}

TEST_CASE("spawn: a rank killed during all_reduces stops the job, nothing is left running") {
  shared_report rep;
  const int rc = tutti::spawn(4, [&] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    rep->pids[comm.rank()] = getpid();
    if (comm.rank() == 0) {
      const auto& name = comm.transport().segment_name();
      std::memcpy(rep->segment, name.data(), std::min(name.size(), sizeof(rep->segment) - 1));
    }
    std::vector<double> v(1000, 1.0);
    for (int i = 0;; ++i) {
      if (comm.rank() == 2 && i == 100) raise(SIGKILL);
      comm.all_reduce(std::span<double>(v), tutti::max);
    }
  });
  // Whichever failure spawn sees first: rank 2's SIGKILL (137) or a survivor exiting with 1
  // after raising peer_lost — often the survivors are faster than spawn's reaper.
  CHECK((rc == 128 + SIGKILL || rc == 1));
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + std::string(rep->segment)));
  for (int r = 0; r < 4; ++r) {
    CAPTURE(r);
    CHECK(rep->pids[r] > 0);
    CHECK((kill(rep->pids[r], 0) == -1 && errno == ESRCH));
  }
}

TEST_CASE("the segment: mode 0600, a random name, gone from /dev/shm once all attached") {
  temp_dir dir;
  const std::string url = dir.url();
  // This process is rank 1 and attaches only after inspecting the segment rank 0 made.
  std::fflush(nullptr);
  const pid_t rank0 = fork();
  REQUIRE(rank0 >= 0);
  if (rank0 == 0) {
    int code = 1;
    try {
      tutti::options opts;
      opts.timeout = std::chrono::seconds(30);
      auto comm = tutti::communicator<tutti::shm>::from_url(url, 0, 2, opts);
      std::vector<int> v{1, 2, 3};
      comm.all_reduce(std::span<int>(v), tutti::sum);
      code = v == std::vector<int>{3, 6, 9} ? 0 : 2;
    } catch (...) {
    }
    _exit(code);
  }
  struct reap_on_failure {
    pid_t pid;
    bool reaped = false;
    ~reap_on_failure() {
      if (reaped) return;
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } guard{rank0};
  // Rank 0's segment, from its own mappings (other tests may be making segments meanwhile).
  std::string seg;
  for (int i = 0; i < 5000 && seg.empty(); ++i) {
    std::ifstream maps("/proc/" + std::to_string(rank0) + "/maps");
    for (std::string line; std::getline(maps, line);) {
      const auto at = line.find("/dev/shm/tutti-");
      if (at != std::string::npos && line.find("(deleted)") == std::string::npos)
        seg = line.substr(at + 9, line.find_first_of(" \n", at) - at - 9);
    }
    if (seg.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  REQUIRE_FALSE(seg.empty());
  struct stat st {};
  REQUIRE(stat(("/dev/shm/" + seg).c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0600);
  CHECK(st.st_uid == geteuid());
  CHECK(tutti::detail::shm_parse_name(seg).has_value());  // tutti-<ns>-<pid>-<32 hex>
  CHECK(seg.substr(seg.rfind('-') + 1).size() == 32);
  {
    auto comm = tutti::communicator<tutti::shm>::from_url(url, 1, 2);
    CHECK("/" + seg == comm.transport().segment_name());
    CHECK_FALSE(std::filesystem::exists("/dev/shm/" + seg));  // unlinked once both attached
    std::vector<int> v{2, 4, 6};
    comm.all_reduce(std::span<int>(v), tutti::sum);
    CHECK(v == std::vector<int>{3, 6, 9});
  }
  int status = 0;
  REQUIRE(waitpid(rank0, &status, 0) == rank0);
  guard.reaped = true;
  CHECK(exited_with(status, 0));
}

TEST_CASE("mismatched calls across processes raise on every rank, naming both sides") {
  // 10 floats travel in flagged cache lines, 100000 through the segment's slots.
  for (std::size_t count : {std::size_t{10}, std::size_t{100000}}) {
    CAPTURE(count);
    shared_report rep;
    temp_dir dir;
    const auto status = run_ranks(3, [&](int r) {
      auto comm = tutti::communicator<tutti::shm, tutti::direct>::from_url(dir.url(), r, 3);
      std::vector<float> v(r == 1 ? count + 1 : count, 1.0f);
      return expect_error(rep.operator->(), r,
                          [&] { comm.all_reduce(std::span<float>(v), tutti::sum); });
    });
    for (int r = 0; r < 3; ++r) {
      CAPTURE(r);
      CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
      CHECK(rep->kind[r] == static_cast<int>(tutti::errc::mismatch));
    }
  }
}

TEST_CASE("a receive polled with done() from a rank that dies: raises naming it within 1 s") {
  temp_dir dir;
  check_killed_rank_polled(
      [&](int r) { return tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2); });
}

TEST_CASE("a rank that never calls: the others time out at their deadline") {
  temp_dir dir;
  check_silent_rank([&](int r, const tutti::options& o) {
    return tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2, o);
  });
}

TEST_CASE("a stopped rank (SIGSTOP): every other rank times out naming it, not a neighbour") {
  // Found by tutti-faults --mode stop: ranks waiting on a live neighbour named that neighbour,
  // or -1 in direct's shared-segment waits. The stopped rank's beat stands still.
  SUBCASE("ring") {
    temp_dir dir;
    check_stopped_rank([&](int r, const tutti::options& o) {
      return tutti::communicator<tutti::shm, tutti::ring>::from_url(dir.url(), r, 4, o);
    });
  }
  SUBCASE("direct") {
    temp_dir dir;
    check_stopped_rank([&](int r, const tutti::options& o) {
      return tutti::communicator<tutti::shm, tutti::direct>::from_url(dir.url(), r, 4, o);
    });
  }
}

TEST_CASE("a stopped rank is named, not a live one whose beat stood still longer") {
  // Found under load: a live rank that did not run for a while (its beat stood still longest)
  // was named "made no progress (stopped?)" instead of the stopped rank; /proc tells them apart.
  temp_dir dir;
  check_stopped_rank(
      [&](int r, const tutti::options& o) {
        return tutti::communicator<tutti::shm, tutti::ring>::from_url(dir.url(), r, 4, o);
      },
      true);
}

TEST_CASE("a survivor that exits without closing after a death: the others still name the dead") {
  // Found under load by faults.kill_shm: rank 1 raised the death of rank 2 and exited without
  // closing its communicator; rank 0, slower, then found rank 1 gone first and named it.
  shared_report rep;
  temp_dir dir;
  constexpr int victim = 2;
  const auto status = run_ranks(3, [&](int r) {
    auto comm = tutti::communicator<tutti::shm, tutti::ring>::from_url(dir.url(), r, 3);
    rep->pids[r] = getpid();
    std::vector<int> v(64, 1);
    for (int i = 0; i < 10; ++i) comm.all_reduce(std::span<int>(v), tutti::sum);
    if (r == victim) raise(SIGKILL);
    if (r == 0) {  // arrives late: rank 2 died and rank 1 left meanwhile
      const auto until = clock_type::now() + std::chrono::seconds(10);
      while (rep->kind[1] == 0 && clock_type::now() < until)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    const int rc =
        expect_error(rep.operator->(), r, [&] { comm.all_reduce(std::span<int>(v), tutti::sum); });
    if (r == 1) {
      std::fflush(nullptr);
      _exit(rc);  // without closing its communicator, as a process that ends on an error may
    }
    return rc;
  });
  CHECK((WIFSIGNALED(status[victim]) && WTERMSIG(status[victim]) == SIGKILL));
  for (int r : {0, 1}) check_named_death(status, rep.operator->(), r, victim);
}

TEST_CASE("process_stopped: /proc's state of a stopped, a continued and a gone process") {
  using tutti::detail::proc_stat_state;
  CHECK(proc_stat_state("1234 (sleep) S 1 1234 1234 0") == 'S');
  CHECK(proc_stat_state("77 (a) b) (c) T 1 2") == 'T');  // comm may hold ") "
  CHECK(proc_stat_state("77 (x)t") == '\0');
  CHECK(proc_stat_state("no parenthesis") == '\0');
  CHECK(proc_stat_state("5 (x)") == '\0');

  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    for (;;) pause();
  }
  CHECK_FALSE(tutti::detail::process_stopped(child));
  kill(child, SIGSTOP);
  int status = 0;
  REQUIRE(waitpid(child, &status, WUNTRACED) == child);  // returns once it is stopped
  REQUIRE(WIFSTOPPED(status));
  CHECK(tutti::detail::process_stopped(child));
  kill(child, SIGCONT);
  REQUIRE(waitpid(child, &status, WCONTINUED) == child);
  CHECK_FALSE(tutti::detail::process_stopped(child));
  kill(child, SIGKILL);
  REQUIRE(waitpid(child, &status, 0) == child);
  CHECK_FALSE(tutti::detail::process_stopped(child));  // gone: nothing to read
  CHECK_FALSE(tutti::detail::process_stopped(0));
}

TEST_CASE("send/recv across processes: tags out of order, messages larger than a channel") {
  temp_dir dir;
  const auto status = run_ranks(2, [&](int r) {
    auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2);
    const int peer = 1 - r;
    // 3 MiB each way, far over a 64 KiB ring: the send streams while the receiver drains.
    const std::size_t big = std::size_t{3} << 20;
    std::vector<std::uint32_t> out(big / 4), in(big / 4, 0);
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::uint32_t>(i * 7 + r);
    if (r == 0) {
      comm.send(std::span<const std::uint32_t>(out), peer, 1);
      comm.recv(std::span<std::uint32_t>(in), peer, 1);
    } else {
      comm.recv(std::span<std::uint32_t>(in), peer, 1);
      comm.send(std::span<const std::uint32_t>(out), peer, 1);
    }
    for (std::size_t i = 0; i < in.size(); ++i)
      if (in[i] != static_cast<std::uint32_t>(i * 7 + static_cast<std::size_t>(peer))) return 2;
    // Tags: rank 0 sends tags 5, 6, 7; rank 1 receives 7, 5, 6.
    if (r == 0) {
      for (int t : {5, 6, 7}) {
        std::vector<int> m(100 + static_cast<std::size_t>(t), t);
        comm.send(std::span<const int>(m), 1, static_cast<std::uint64_t>(t));
      }
    } else {
      for (int t : {7, 5, 6}) {
        std::vector<int> m(100 + static_cast<std::size_t>(t), 0);
        comm.recv(std::span<int>(m), 0, static_cast<std::uint64_t>(t));
        for (int x : m)
          if (x != t) return 3;
      }
    }
    // A size mismatch is an error, not a silent truncation.
    if (r == 0) {
      std::vector<int> m(10, 1);
      comm.send(std::span<const int>(m), 1, 9);
    } else {
      std::vector<int> m(12, 0);
      try {
        comm.recv(std::span<int>(m), 0, 9);
        return 4;
      } catch (const tutti::error& e) {
        if (e.kind() != tutti::errc::mismatch) return 5;
      }
    }
    return 0;
  });
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
}

TEST_CASE("from_url tcp://: rank 0 serves the store, the others connect") {
  // A listening socket made here and handed to rank 0 (as tutti::spawn does), so the port
  // cannot be taken between choosing it and serving it.
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(lfd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  REQUIRE(bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  REQUIRE(listen(lfd, 16) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  const std::string url = "tcp://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  const auto status = run_ranks(3, [&](int r) {
    if (r == 0)
      setenv("TUTTI_STORE_FD", std::to_string(lfd).c_str(), 1);
    else
      close(lfd);
    auto comm = tutti::communicator<tutti::shm>::from_url(url, r, 3);
    std::vector<long> v(1000, r + 1);
    comm.all_reduce(std::span<long>(v), tutti::sum);
    for (long x : v)
      if (x != 6) return 1;
    return 0;
  });
  close(lfd);
  for (int r = 0; r < 3; ++r) CHECK(exited_with(status[static_cast<std::size_t>(r)], 0));
}

TEST_CASE("send/recv after a collective: a slow peer is not a mismatch") {
  temp_dir dir;
  check_slow_send_after_collective([&](int r, const tutti::options& o) {
    return tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2, o);
  });
}

TEST_CASE("after an async call lost a peer, later calls raise aborted naming that peer") {
  // Found by tutti-faults: the next call raised aborted with peer() == -1, so a rank that
  // caught it could not tell which rank was lost without parsing the message.
  shared_report rep;
  temp_dir dir;
  const auto status = run_ranks(2, [&](int r) {
    auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, 2);
    if (r == 1) raise(SIGKILL);
    std::vector<int> v(100, 1);
    auto w = comm.all_reduce_async(std::span<int>(v), tutti::sum);
    while (!w.done()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    int code = 0;
    for (int step = 0; step < 3; ++step) {
      try {
        if (step == 0) comm.barrier();
        if (step == 1) comm.send(std::span<const int>(v), 1);
        if (step == 2) w.wait();
        code = 10 + step;  // no error
      } catch (const tutti::error& e) {
        const auto want = step == 2 ? tutti::errc::peer_lost : tutti::errc::aborted;
        if (e.kind() != want || e.peer() != 1) code = 20 + step;
      }
      if (code != 0) break;
    }
    return code;
  });
  CHECK(WIFSIGNALED(status[1]));
  CHECK(exited_with(status[0], 0));
}

TEST_CASE("an abort that follows a death names the dead rank, not the one that aborted") {
  // Found by tutti-faults: rank 2 is killed; rank 1 notices first and, unwinding, abandons a
  // message, which aborts the world ("rank 1 abandoned a message"). Rank 0 then saw only that
  // abort and raised it naming its own call's peer instead of the rank that died.
  shared_report rep;
  temp_dir dir;
  const auto status = run_ranks(3, [&](int r) {
    auto comm = tutti::communicator<tutti::shm>::from_url(dir.url(), r, 3);
    rep->pids[r] = getpid();
    if (r == 2) raise(SIGKILL);
    if (r == 1) {
      while (rep->pids[2] == 0 || kill(rep->pids[2], 0) == 0)  // until the parent reaped it
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      comm.transport().abort(tutti::errc::aborted, "rank 1 abandoned a message half sent");
      rep->died_ns = now_ns();
      return await_report(rep.operator->(), 0) ? 0 : 1;
    }
    while (rep->died_ns == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::vector<int> v(10, 1);
    const int rc =
        expect_error(rep.operator->(), r, [&] { comm.all_reduce(std::span<int>(v), tutti::sum); });
    return rc;
  });
  CHECK(WIFSIGNALED(status[2]));
  CHECK(exited_with(status[0], 0));
  CHECK(exited_with(status[1], 0));
  CHECK(rep->kind[0] == static_cast<int>(tutti::errc::peer_lost));
  CHECK(rep->peer[0] == 2);
}

TEST_CASE("rank 0 killed while the world forms: a rank that attached removes the segment") {
  // Found by tutti-faults (--mode store): rank 0 created and published the segment, rank 1
  // attached, rank 2 had not arrived when rank 0 died. Rank 1 raised peer_lost but left the
  // name in /dev/shm, where it stayed after every rank was gone.
  shared_report rep;
  temp_dir dir;
  const auto status = run_ranks(3, [&](int r) {
    rep->pids[r] = getpid();
    if (r == 2) {  // arrives late: finds rank 0's segment and kills rank 0 once rank 1 attached
      std::string seg;
      for (int i = 0; i < 5000 && (seg.empty() || rep->pids[0] == 0); ++i) {
        std::ifstream maps("/proc/" + std::to_string(rep->pids[0]) + "/maps");
        for (std::string line; std::getline(maps, line);) {
          const auto at = line.find("/dev/shm/tutti-");
          if (at != std::string::npos)
            seg = line.substr(at + 8, line.find_first_of(" \n", at) - at - 8);
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
      if (seg.empty()) return 2;
      std::memcpy(rep->segment, seg.data(), seg.size());
      std::this_thread::sleep_for(std::chrono::milliseconds(300));  // rank 1 attaches
      rep->died_ns = now_ns();
      kill(rep->pids[0], SIGKILL);
      return await_report(rep.operator->(), 1) ? 0 : 1;
    }
    tutti::options opts;
    opts.timeout = std::chrono::seconds(30);
    return expect_error(rep.operator->(), r, [&] {
      (void)tutti::communicator<tutti::shm>::from_url(dir.url(), r, 3, opts);
    });
  });
  CHECK(WIFSIGNALED(status[0]));
  CHECK(exited_with(status[1], 0));
  CHECK(exited_with(status[2], 0));
  CHECK(rep->kind[1] == static_cast<int>(tutti::errc::peer_lost));
  CHECK(rep->peer[1] == 0);
  const std::string seg(rep->segment);
  CHECK(seg.rfind("/tutti-", 0) == 0);
  CHECK_FALSE(std::filesystem::exists("/dev/shm" + seg));
  if (!seg.empty()) shm_unlink(seg.c_str());  // a failed check leaves nothing behind
}
