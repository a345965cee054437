// tutti::spawn: the forked ranks' environment, exit codes, failure handling (no child left
// running, no zombie), the inline path under a launcher.
//
// Children report through pipes created here (one fixed-size record per write, atomic below
// PIPE_BUF); they must never use doctest's CHECK, which would only fail inside the child.

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <iostream>
#include <set>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/bootstrap/env.hpp>
#include <tutti/bootstrap/spawn.hpp>

#include "scoped_env.hpp"

namespace {

/// A pipe; the parent reads what the children wrote once spawn has returned.
class pipe_pair {
 public:
  pipe_pair() { REQUIRE(::pipe(fds_) == 0); }
  pipe_pair(const pipe_pair&) = delete;
  pipe_pair& operator=(const pipe_pair&) = delete;
  ~pipe_pair() {
    for (int& fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  [[nodiscard]] int write_end() const { return fds_[1]; }
  [[nodiscard]] int read_end() const { return fds_[0]; }
  /// Closes the write end and reads to end of file.
  template <class Record>
  std::vector<Record> drain() {
    ::close(fds_[1]);
    fds_[1] = -1;
    std::string bytes;
    char buf[4096];
    ssize_t got = 0;
    while ((got = ::read(fds_[0], buf, sizeof buf)) > 0) bytes.append(buf, size_t(got));
    REQUIRE(bytes.size() % sizeof(Record) == 0);
    std::vector<Record> out(bytes.size() / sizeof(Record));
    if (!out.empty()) std::memcpy(out.data(), bytes.data(), bytes.size());  // no records: null
    return out;
  }

 private:
  int fds_[2] = {-1, -1};
};

template <class Record>
void put(int fd, const Record& r) noexcept {
  static_assert(sizeof(Record) <= PIPE_BUF, "one write, so records do not interleave");
  (void)!::write(fd, &r, sizeof r);
}

/// Sends stderr (of this process and of the children forked meanwhile) to a temporary file.
class capture_stderr {
 public:
  capture_stderr() : file_(std::tmpfile()) {
    REQUIRE(file_ != nullptr);
    std::fflush(stderr);
    saved_ = ::dup(2);
    REQUIRE(saved_ >= 0);
    REQUIRE(::dup2(::fileno(file_), 2) == 2);
  }
  capture_stderr(const capture_stderr&) = delete;
  capture_stderr& operator=(const capture_stderr&) = delete;
  ~capture_stderr() {
    restore();
    std::fclose(file_);
  }
  /// Restores stderr and returns what was written.
  std::string text() {
    restore();
    std::string out;
    std::rewind(file_);
    char buf[4096];
    std::size_t got = 0;
    while ((got = std::fread(buf, 1, sizeof buf, file_)) > 0) out.append(buf, got);
    return out;
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(stderr);
    ::dup2(saved_, 2);
    ::close(saved_);
    saved_ = -1;
  }
  std::FILE* file_;
  int saved_ = -1;
};

int env_int(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? -2 : std::atoi(v);
}

[[noreturn]] void sleep_forever() {
  for (;;) ::pause();
}

/// The other ranks say they are ready by writing one byte each on a pipe; the failing rank
/// waits for them all, so that every rank has recorded its pid before anything is stopped.
void say_ready(int fd) {
  const char byte = 1;
  (void)!::write(fd, &byte, 1);
}
void wait_ready(int fd, int count) {
  const auto t0 = std::chrono::steady_clock::now();
  while (count > 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(60)) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 1000) <= 0) continue;  // a broken test must not hang forever
    char buf[64];
    const ssize_t got = ::read(fd, buf, std::min<int>(count, sizeof buf));
    if (got > 0) count -= static_cast<int>(got);
  }
}

/// True when no process with this pid exists any more (not even a zombie).
bool gone(pid_t pid) { return ::kill(pid, 0) == -1 && errno == ESRCH; }

/// Pids of this process's children, zombies included.
std::vector<pid_t> my_children() {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (proc == nullptr) return out;
  while (dirent* d = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(d->d_name));
    if (pid <= 0) continue;
    // Plain read(): processes of other programs come and go while we look.
    const int fd = ::open(("/proc/" + std::string(d->d_name) + "/stat").c_str(), O_RDONLY);
    if (fd < 0) continue;
    char buf[1024];
    const ssize_t got = ::read(fd, buf, sizeof buf - 1);
    ::close(fd);
    if (got <= 0) continue;
    const std::string stat(buf, static_cast<std::size_t>(got));
    const auto end = stat.rfind(')');
    if (end == std::string::npos) continue;
    char state = 0;
    int ppid = 0;
    if (std::sscanf(stat.c_str() + end + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid == ::getpid()) out.push_back(pid);
  }
  ::closedir(proc);
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

/// What each forked rank saw.
struct rank_view {
  int rank, size, local_rank, local_size, port;
  int detected_rank, detected_size, detected_source, detected_port, agent_store;
  int store_fd;         // TUTTI_STORE_FD, or -2 when unset
  int store_listening;  // rank 0: the fd is a listening socket on 127.0.0.1:MASTER_PORT
  int peers_accepted;   // rank 0: connections accepted from the other ranks, each sent its rank
  int connected;        // ranks > 0: connected to MASTER_PORT and sent the rank
  int sigchld_ignored;  // the parent's SIGCHLD disposition, restored in the child
  pid_t pid, ppid;
  char addr[32];
  char job_key[64];
};

/// Rank 0 checks the adopted store socket and accepts one connection per other rank.
void check_store(rank_view& v) {
  const int fd = v.store_fd;
  int listening = 0;
  socklen_t len = sizeof listening;
  sockaddr_in addr{};
  socklen_t alen = sizeof addr;
  const int fd_flags = ::fcntl(fd, F_GETFD);
  v.store_listening =
      ::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening == 1 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &alen) == 0 &&
      addr.sin_family == AF_INET && ntohl(addr.sin_addr.s_addr) == INADDR_LOOPBACK &&
      ntohs(addr.sin_port) == v.port && fd_flags >= 0 && (fd_flags & FD_CLOEXEC) == 0;
  timeval timeout{60, 0};  // a broken test must not hang forever
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  std::set<int> seen;
  for (int i = 1; i < v.size; ++i) {
    const int c = ::accept(fd, nullptr, nullptr);
    if (c < 0) break;
    ::setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
    int peer = -1;
    if (::recv(c, &peer, sizeof peer, MSG_WAITALL) == sizeof peer) seen.insert(peer);
    ::close(c);
  }
  v.peers_accepted = static_cast<int>(seen.size());
  if (!seen.empty() && (*seen.begin() != 1 || *seen.rbegin() != v.size - 1)) v.peers_accepted = -1;
}

/// A rank > 0 connects to MASTER_ADDR:MASTER_PORT and sends its rank.
bool connect_to_store(int port, int rank) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool ok = ::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) == 0 &&
                  ::send(fd, &rank, sizeof rank, MSG_NOSIGNAL) == sizeof rank;
  ::close(fd);
  return ok;
}

/// What this forked rank sees: its environment, the world detect_world finds there, and the
/// store socket (rank 0 accepts the others' connections; the others connect).
rank_view observe_rank() {
  rank_view v{};
  v.rank = env_int("RANK");
  v.size = env_int("WORLD_SIZE");
  v.local_rank = env_int("LOCAL_RANK");
  v.local_size = env_int("LOCAL_WORLD_SIZE");
  v.port = env_int("MASTER_PORT");
  v.store_fd = env_int("TUTTI_STORE_FD");
  v.pid = ::getpid();
  v.ppid = ::getppid();
  if (const char* a = std::getenv("MASTER_ADDR")) {
    std::snprintf(v.addr, sizeof v.addr, "%s", a);
  }
  const auto world = tutti::bootstrap::detect_world();
  if (world) {
    v.detected_rank = world->rank;
    v.detected_size = world->size;
    v.detected_source = static_cast<int>(world->source);
    v.detected_port = world->master_port;
    v.agent_store = world->agent_store ? 1 : 0;
  }
  std::snprintf(v.job_key, sizeof v.job_key, "%s", tutti::bootstrap::local_job_key().c_str());
  if (v.rank == 0 && v.store_fd >= 0) {
    check_store(v);
  } else if (v.rank > 0) {
    v.connected = connect_to_store(v.port, v.rank) ? 1 : 0;
  }
  return v;
}

/// One rank of a world of `n` saw what spawn sets up; `first` is rank 0's view.
void check_view(const rank_view& v, const rank_view& first, int n) {
  CAPTURE(v.rank);
  CHECK(v.size == n);
  CHECK(v.local_rank == v.rank);
  CHECK(v.local_size == n);
  CHECK(std::string(v.addr) == "127.0.0.1");
  CHECK(v.port == first.port);
  CHECK(v.port >= 1);
  CHECK(v.port <= 65535);
  CHECK(v.detected_rank == v.rank);
  CHECK(v.detected_size == n);
  CHECK(v.detected_source == static_cast<int>(tutti::bootstrap::launcher::torchrun));
  CHECK(v.detected_port == v.port);
  CHECK(v.agent_store == 0);
  CHECK(v.ppid == ::getpid());
  CHECK(v.pid != ::getpid());
  CHECK(std::string(v.job_key) == std::string(first.job_key));
  CHECK(std::string(v.job_key).rfind(std::to_string(::getpid()) + "-", 0) == 0);
  if (v.rank == 0) {
    CHECK(v.store_fd >= 0);
    CHECK(v.store_listening == 1);
    CHECK(v.peers_accepted == n - 1);
  } else {
    CHECK(v.store_fd == -2);
    CHECK(v.connected == 1);
  }
}

/// The `n` views come from ranks 0 to n - 1, each its own process, all gone now.
void check_views(const std::vector<rank_view>& views, int n) {
  std::set<int> ranks;
  std::set<pid_t> pids;
  for (const auto& v : views) {
    ranks.insert(v.rank);
    pids.insert(v.pid);
    check_view(v, views[0], n);
  }
  CHECK(ranks.size() == static_cast<std::size_t>(n));
  CHECK(*ranks.begin() == 0);
  CHECK(*ranks.rbegin() == n - 1);
  CHECK(pids.size() == static_cast<std::size_t>(n));
  for (pid_t pid : pids) CHECK(gone(pid));
}

}  // namespace

TEST_CASE("every forked rank sees its environment; rank 0 owns the store socket") {
  scoped_env env;
  env.set("TORCHELASTIC_USE_AGENT_STORE", "True");  // not a launch, and must not reach children
  struct sigaction before {};
  ::sigaction(SIGCHLD, nullptr, &before);
  sigset_t mask_before, mask_after;
  ::sigprocmask(SIG_BLOCK, nullptr, &mask_before);

  for (int n : {1, 2, 3, 8}) {
    CAPTURE(n);
    pipe_pair out;
    const int w = out.write_end();
    const int rc = tutti::spawn(n, [w] {
      put(w, observe_rank());
      return 0;
    });
    CHECK(rc == 0);
    const auto views = out.drain<rank_view>();
    REQUIRE(views.size() == static_cast<std::size_t>(n));
    check_views(views, n);
  }
  CHECK(std::getenv("RANK") == nullptr);  // the parent's environment is untouched
  CHECK(std::string(std::getenv("TORCHELASTIC_USE_AGENT_STORE")) == "True");
  struct sigaction after {};
  ::sigaction(SIGCHLD, nullptr, &after);
  const bool same_handler = after.sa_handler == before.sa_handler;
  CHECK(same_handler);
  ::sigprocmask(SIG_BLOCK, nullptr, &mask_after);
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sigismember(&mask_before, sig) != sigismember(&mask_after, sig)) {
      FAIL("signal mask changed at signal ", sig);
    }
  }
  CHECK(my_children().empty());
}

TEST_CASE("exit codes") {
  scoped_env env;
  SUBCASE("void functions: 0") {
    CHECK(tutti::spawn(3, [] {}) == 0);
  }
  SUBCASE("a rank returning 3: spawn returns 3 and says which rank") {
    capture_stderr err;
    const int rc = tutti::spawn(3, [] { return env_int("RANK") == 1 ? 3 : 0; });
    const std::string text = err.text();
    CHECK(rc == 3);
    INFO("stderr: ", text);
    CHECK(text.find("tutti::spawn: rank 1 exited with code 3") != std::string::npos);
  }
  SUBCASE("a result whose low 8 bits are 0 is still a failure") {
    capture_stderr err;
    CHECK(tutti::spawn(2, [] { return env_int("RANK") == 0 ? 256 : 0; }) == 1);
  }
  SUBCASE("a rank throwing: 1, and its message on stderr") {
    capture_stderr err;
    const int rc = tutti::spawn(3, [] {
      if (env_int("RANK") == 2) throw std::runtime_error("boom at two");
    });
    const std::string text = err.text();
    CHECK(rc == 1);
    INFO("stderr: ", text);
    CHECK(text.find("tutti::spawn: rank 2: boom at two") != std::string::npos);
    CHECK(text.find("tutti::spawn: rank 2 exited with code 1") != std::string::npos);
  }
  SUBCASE("a rank throwing something else") {
    capture_stderr err;
    const int rc = tutti::spawn(2, []() -> int {
      if (env_int("RANK") == 0) throw 42;
      return 0;
    });
    const std::string text = err.text();
    CHECK(rc == 1);
    INFO("stderr: ", text);
    CHECK(text.find("tutti::spawn: rank 0: unknown exception") != std::string::npos);
  }
  SUBCASE("stdout written by the children is flushed before they exit") {
    pipe_pair out;
    const int saved = ::dup(1);
    REQUIRE(saved >= 0);
    std::fflush(stdout);
    ::dup2(out.write_end(), 1);
    const int rc = tutti::spawn(2, [] { std::printf("hello from %d\n", env_int("RANK")); });
    std::fflush(stdout);
    ::dup2(saved, 1);
    ::close(saved);
    CHECK(rc == 0);
    const auto bytes = out.drain<char>();
    const std::string text(bytes.begin(), bytes.end());
    CHECK(text.find("hello from 0\n") != std::string::npos);
    CHECK(text.find("hello from 1\n") != std::string::npos);
  }
}

namespace {

struct pid_record {
  int rank;
  pid_t pid;
};

/// What a spawn of ranks that record their pids left: its result, how long it took, its stderr
/// and the records.
struct stopped_world {
  int rc;
  double elapsed;
  std::string text;
  std::vector<pid_record> records;
};

/// Spawns `n` ranks that record their pid, then run `body(rank, ready_r, ready_w)`: the ranks
/// that hang say they are ready on ready_w, the failing one waits for them on ready_r.
template <class Body>
stopped_world spawn_recording_pids(int n, Body body) {
  pipe_pair pids;
  pipe_pair ready;
  const int w = pids.write_end();
  const int ready_w = ready.write_end();
  const int ready_r = ready.read_end();
  capture_stderr err;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = tutti::spawn(n, [=] {
    const int rank = env_int("RANK");
    put(w, pid_record{rank, ::getpid()});
    return body(rank, ready_r, ready_w);
  });
  const double elapsed = seconds_since(t0);
  std::string text = err.text();
  return {rc, elapsed, std::move(text), pids.drain<pid_record>()};
}

/// Every one of the `n` ranks recorded its pid and is gone, and no child is left.
void check_all_gone(const stopped_world& s, std::size_t n) {
  CHECK(s.records.size() == n);
  for (const auto& r : s.records) CHECK(gone(r.pid));
  CHECK(my_children().empty());
}

}  // namespace

TEST_CASE("a failure stops the hanging ranks: none left running, no zombie") {
  scoped_env env;
  SUBCASE("SIGTERM is enough") {
    const stopped_world s = spawn_recording_pids(4, [](int rank, int ready_r, int ready_w) {
      if (rank == 2) {
        wait_ready(ready_r, 3);
        return 5;
      }
      say_ready(ready_w);
      sleep_forever();
    });
    CHECK(s.rc == 5);
    CHECK(s.elapsed < 10.0);
    INFO("stderr: ", s.text);
    CHECK(s.text.find("tutti::spawn: rank 2 exited with code 5") != std::string::npos);
    check_all_gone(s, 4);
  }
  SUBCASE("a rank ignoring SIGTERM is killed after the grace period") {
    env.set("TUTTI_SPAWN_GRACE_MS", "300");
    const stopped_world s = spawn_recording_pids(3, [](int rank, int ready_r, int ready_w) {
      if (rank == 1) {
        wait_ready(ready_r, 2);  // fail only once rank 0 ignores SIGTERM
        return 7;
      }
      if (rank == 0) ::signal(SIGTERM, SIG_IGN);
      say_ready(ready_w);
      sleep_forever();
    });
    CHECK(s.rc == 7);
    CHECK(s.elapsed >= 0.3);  // rank 0 can only die by the SIGKILL sent after the grace period
    CHECK(s.elapsed < 10.0);
    INFO("stderr: ", s.text);
    CHECK(s.text.find("tutti::spawn: rank 1 exited with code 7") != std::string::npos);
    check_all_gone(s, 3);
  }
  SUBCASE("a rank killed by SIGKILL: 128 + 9") {
    const stopped_world s = spawn_recording_pids(3, [](int rank, int ready_r, int ready_w) -> int {
      if (rank == 1) {
        wait_ready(ready_r, 2);
        ::kill(::getpid(), SIGKILL);
      }
      say_ready(ready_w);
      sleep_forever();
    });
    CHECK(s.rc == 128 + SIGKILL);
    CHECK(s.elapsed < 10.0);
    INFO("stderr: ", s.text);
    CHECK(s.text.find("tutti::spawn: rank 1 was killed by signal 9 (SIGKILL)") !=
          std::string::npos);
    check_all_gone(s, 3);
  }
}

namespace {
volatile sig_atomic_t sigterm_seen = 0;
void note_sigterm(int) { sigterm_seen = 1; }
}  // namespace

TEST_CASE("a SIGTERM handler of the caller does not keep a rank from being stopped") {
  scoped_env env;
  env.set("TUTTI_SPAWN_GRACE_MS", "60000");  // only SIGTERM can stop the sleeper in time
  struct sigaction handler {
  }, saved{};
  handler.sa_handler = note_sigterm;
  sigemptyset(&handler.sa_mask);
  REQUIRE(::sigaction(SIGTERM, &handler, &saved) == 0);
  pipe_pair ready;
  const int ready_w = ready.write_end();
  const int ready_r = ready.read_end();
  capture_stderr err;
  const auto t0 = std::chrono::steady_clock::now();
  const int rc = tutti::spawn(2, [=] {
    if (env_int("RANK") == 0) {
      wait_ready(ready_r, 1);
      return 6;
    }
    say_ready(ready_w);
    sleep_forever();
  });
  const double elapsed = seconds_since(t0);
  struct sigaction after {};
  ::sigaction(SIGTERM, &saved, &after);
  CHECK(rc == 6);
  CHECK(elapsed < 10.0);
  const bool kept = after.sa_handler == note_sigterm;  // the caller's handler is untouched
  CHECK(kept);
  CHECK(sigterm_seen == 0);
  CHECK(my_children().empty());
}

TEST_CASE("SIGCHLD ignored by the caller: exit codes still seen, disposition restored") {
  scoped_env env;
  struct sigaction ignore {
  }, saved{};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  REQUIRE(::sigaction(SIGCHLD, &ignore, &saved) == 0);
  pipe_pair out;
  pipe_pair ready;
  const int w = out.write_end();
  const int ready_w = ready.write_end();
  const int ready_r = ready.read_end();
  capture_stderr err;
  const int rc = tutti::spawn(2, [=] {
    struct sigaction now {};
    ::sigaction(SIGCHLD, nullptr, &now);
    put(w, now.sa_handler == SIG_IGN ? 1 : 0);
    if (env_int("RANK") == 0) {
      say_ready(ready_w);
      return 0;
    }
    wait_ready(ready_r, 1);  // rank 0 has reported before rank 1 fails
    return 4;
  });
  struct sigaction after {};
  ::sigaction(SIGCHLD, nullptr, &after);
  ::sigaction(SIGCHLD, &saved, nullptr);
  CHECK(rc == 4);
  const bool still_ignored = after.sa_handler == SIG_IGN;
  CHECK(still_ignored);
  const auto seen = out.drain<int>();
  CHECK(seen == std::vector<int>{1, 1});
}

TEST_CASE("under a launcher spawn runs fn inline") {
  scoped_env env;
  env.set("RANK", "1");
  env.set("WORLD_SIZE", "2");
  SUBCASE("int result, same process, n ignored") {
    int calls = 0;
    pid_t seen = 0;
    CHECK(tutti::spawn(4, [&] {
            ++calls;
            seen = ::getpid();
            return 7;
          }) == 7);
    CHECK(calls == 1);
    CHECK(seen == ::getpid());
    CHECK(tutti::spawn(0, [] {}) == 0);
  }
  SUBCASE("an exception: 1 and the message") {
    capture_stderr err;
    const int rc = tutti::spawn(2, [] { throw std::runtime_error("inline boom"); });
    const std::string text = err.text();
    CHECK(rc == 1);
    CHECK(text.find("tutti::spawn: rank 1: inline boom") != std::string::npos);
  }
  SUBCASE("a malformed launcher environment is an error") {
    env.set("WORLD_SIZE", "1");
    try {
      (void)tutti::spawn(2, [] {});
      FAIL("spawn accepted RANK=1 WORLD_SIZE=1");
    } catch (const tutti::error& e) {
      CHECK(e.kind() == tutti::errc::invalid_argument);
    }
  }
}

TEST_CASE("a fork failing midway: transport_failure, the children already forked reaped") {
  scoped_env env;
  pipe_pair pids;
  const int w = pids.write_end();
  // A helper process, so that the process limit does not reach this one. As root, the limit only
  // binds once the helper is an unprivileged user.
  std::fflush(nullptr);
  std::cout.flush();  // nothing buffered for the helper to print twice
  const pid_t helper = ::fork();
  REQUIRE(helper >= 0);
  if (helper == 0) {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(10);
    const rlimit limit{4, 4};
    if (::setrlimit(RLIMIT_NPROC, &limit) != 0) ::_exit(11);
    int code = 0;
    try {
      (void)tutti::spawn(64, [w] {
        put(w, ::getpid());
        sleep_forever();
      });
      code = 12;
    } catch (const tutti::error& e) {
      const bool named = std::string(e.what()).find("fork of rank") != std::string::npos;
      code = e.kind() == tutti::errc::transport_failure && named ? 0 : 13;
    } catch (...) {
      code = 14;
    }
    if (!my_children().empty()) code = 15;
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(helper, &status, 0) == helper);
  REQUIRE(WIFEXITED(status));
  const int code = WEXITSTATUS(status);
  const auto started = pids.drain<pid_t>();
  if (code == 10 || code == 11) {
    MESSAGE("cannot lower the process limit here (helper exit code ", code, "): not tested");
    return;
  }
  CHECK(code == 0);  // 12: spawn did not fail, 13: wrong error, 14: not a tutti::error
  CHECK(started.size() < 64);
  for (pid_t pid : started) CHECK(gone(pid));
}

TEST_CASE("invalid arguments throw before forking") {
  scoped_env env;
  for (int n : {0, -1, 4097}) {
    CAPTURE(n);
    try {
      (void)tutti::spawn(n, [] {});
      FAIL("spawn accepted n");
    } catch (const tutti::error& e) {
      CHECK(e.kind() == tutti::errc::invalid_argument);
      CHECK(std::string(e.what()).find("n=" + std::to_string(n)) != std::string::npos);
    }
  }
  env.set("TUTTI_SPAWN_GRACE_MS", "soon");
  try {
    (void)tutti::spawn(2, [] {});
    FAIL("spawn accepted TUTTI_SPAWN_GRACE_MS=soon");
  } catch (const tutti::error& e) {
    CHECK(e.kind() == tutti::errc::invalid_argument);
    CHECK(std::string(e.what()).find("TUTTI_SPAWN_GRACE_MS") != std::string::npos);
  }
  CHECK(my_children().empty());
}
