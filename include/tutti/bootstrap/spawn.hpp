#pragma once
/// \file
/// tutti::spawn: run a function as the n ranks of one job forked on this host, or as this
/// process's own rank when a launcher (mpirun, torchrun, srun, another spawn) started it.

#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <concepts>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <iostream>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tutti/bootstrap/env.hpp>
#include <tutti/core/error.hpp>
#include <tutti/detail/unique_fd.hpp>

namespace tutti::inline v0::detail {

/// What tutti::spawn runs: callable with no arguments, returning int or void.
template <class Fn>
concept rank_function = std::invocable<Fn&> && (std::is_void_v<std::invoke_result_t<Fn&>> ||
                                                std::same_as<std::invoke_result_t<Fn&>, int>);

inline constexpr int spawn_max_ranks = 4096;
inline constexpr long spawn_default_grace_ms = 2000;

[[noreturn]] inline void spawn_system_failure(const std::string& what, int err) {
  throw tutti::error(errc::transport_failure, "", 0, -1, -1,
                     "spawn: " + what + ": " + std::strerror(err));
}

/// A listening TCP socket on 127.0.0.1 and an ephemeral port, close-on-exec.
[[nodiscard]] inline unique_fd spawn_listen(int backlog, int& port) {
  unique_fd fd(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (fd.get() < 0) spawn_system_failure("socket", errno);
  const int one = 1;
  if (::setsockopt(fd.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0) {
    spawn_system_failure("setsockopt(SO_REUSEADDR)", errno);
  }
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  if (::bind(fd.get(), reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    spawn_system_failure("bind(127.0.0.1:0)", errno);
  }
  if (::listen(fd.get(), backlog) != 0) spawn_system_failure("listen", errno);
  socklen_t len = sizeof addr;
  if (::getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    spawn_system_failure("getsockname", errno);
  }
  port = ntohs(addr.sin_port);
  return fd;
}

inline void spawn_flush() noexcept {
  std::fflush(nullptr);
  try {
    std::cout.flush();
    std::cerr.flush();
    std::clog.flush();
  } catch (...) {  // a stream with exceptions enabled: nothing more to do
  }
}

/// Runs fn: its int result, 0 for void, 1 (after a message on stderr) when it throws.
template <class Fn>
[[nodiscard]] int spawn_run_rank(Fn& fn, int rank) noexcept {
  try {
    if constexpr (std::is_void_v<std::invoke_result_t<Fn&>>) {
      std::invoke(fn);
      return 0;
    } else {
      return std::invoke(fn);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti::spawn: rank %d: %s\n", rank, e.what());
  } catch (...) {
    std::fprintf(stderr, "tutti::spawn: rank %d: unknown exception\n", rank);
  }
  return 1;
}

[[nodiscard]] inline const char* spawn_signal_name(int sig) noexcept {
  static constexpr std::pair<int, const char*> names[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"}};
  for (const auto& [number, name] : names) {
    if (number == sig) return name;
  }
  return "unknown signal";
}

/// The signal state spawn changes, and puts back.
///  - SIGCHLD ignored (or SA_NOCLDWAIT) would reap the children before spawn sees their exit
///    codes: the default action is put back while spawn runs, the caller's restored after.
///  - SIGTERM is blocked in the calling thread around each fork, so that a child cannot take the
///    stop signal while it still has the caller's SIGTERM handler (see child_setup).
class spawn_signal_guard {
 public:
  spawn_signal_guard() noexcept {
    if (::sigaction(SIGCHLD, nullptr, &sigchld_) != 0) return;
    if (sigchld_.sa_handler == SIG_IGN || (sigchld_.sa_flags & SA_NOCLDWAIT) != 0) {
      struct sigaction dfl {};
      dfl.sa_handler = SIG_DFL;
      sigemptyset(&dfl.sa_mask);
      sigchld_changed_ = ::sigaction(SIGCHLD, &dfl, nullptr) == 0;
    }
  }
  spawn_signal_guard(const spawn_signal_guard&) = delete;
  spawn_signal_guard& operator=(const spawn_signal_guard&) = delete;
  ~spawn_signal_guard() { restore_sigchld(); }

  void block_sigterm() noexcept {
    sigset_t term;
    sigemptyset(&term);
    sigaddset(&term, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &term, &mask_);
  }
  void unblock_sigterm() noexcept { ::pthread_sigmask(SIG_SETMASK, &mask_, nullptr); }

  /// In a child: the caller's SIGCHLD action back; a SIGTERM handler inherited from the caller
  /// (written for the caller, not for a rank) replaced by the default action, so spawn's SIGTERM
  /// stops the rank (SIG_IGN stays, as across exec); then the caller's signal mask back.
  void child_setup() noexcept {
    restore_sigchld();
    struct sigaction term {};
    if (::sigaction(SIGTERM, nullptr, &term) == 0 && term.sa_handler != SIG_IGN &&
        term.sa_handler != SIG_DFL) {
      ::signal(SIGTERM, SIG_DFL);
    }
    unblock_sigterm();
  }

 private:
  void restore_sigchld() noexcept {
    if (sigchld_changed_) ::sigaction(SIGCHLD, &sigchld_, nullptr);
    sigchld_changed_ = false;
  }

  struct sigaction sigchld_ {};
  bool sigchld_changed_ = false;
  sigset_t mask_{};
};

/// The forked rank: set up its environment, run fn, exit without touching the parent's state.
template <class Fn>
[[noreturn]] void spawn_child(Fn& fn, int rank, int n, int port, int listen_fd, pid_t parent,
                              spawn_signal_guard& signals) noexcept {
  // Die with the parent; it may have died before the prctl took effect.
  if (::prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || ::getppid() != parent) ::_exit(1);
  signals.child_setup();
  for (const char* var :
       {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
        "OMPI_COMM_WORLD_LOCAL_SIZE", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
        "TORCHELASTIC_USE_AGENT_STORE", "TUTTI_STORE_FD"}) {
    ::unsetenv(var);
  }
  const std::string r = std::to_string(rank), size = std::to_string(n);
  ::setenv("RANK", r.c_str(), 1);
  ::setenv("WORLD_SIZE", size.c_str(), 1);
  ::setenv("LOCAL_RANK", r.c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", size.c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  if (rank == 0) {
    // Rank 0's store server adopts the bound socket: no other process can take the port.
    const int flags = ::fcntl(listen_fd, F_GETFD);
    if (flags < 0 || ::fcntl(listen_fd, F_SETFD, flags & ~FD_CLOEXEC) != 0) ::_exit(1);
    ::setenv("TUTTI_STORE_FD", std::to_string(listen_fd).c_str(), 1);
  } else {
    ::close(listen_fd);
  }
  int code = spawn_run_rank(fn, rank);
  if (code != 0 && (code & 0xff) == 0) code = 1;  // keep a failure a failure in 8 bits
  spawn_flush();
  ::_exit(code & 0xff);
}

inline void spawn_sleep(long micros) noexcept {
  timespec ts{micros / 1000000, (micros % 1000000) * 1000};
  ::nanosleep(&ts, nullptr);  // an interruption only shortens one polling step
}

[[nodiscard]] inline long spawn_now_ms() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<long>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

/// What rank `rank`'s end means for spawn (`got`: waitpid's result, `status`: the status it
/// gave): 0 for a clean exit, else the exit code (128 + the signal, 1 when another reaped it),
/// reported on stderr.
[[nodiscard]] inline int spawn_outcome(int rank, pid_t got, int status) noexcept {
  if (got < 0) {  // ECHILD: someone else (a SIGCHLD handler?) reaped it
    std::fprintf(stderr, "tutti::spawn: rank %d was reaped elsewhere; exit status unknown\n", rank);
    return 1;
  }
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    std::fprintf(stderr, "tutti::spawn: rank %d was killed by signal %d (%s)\n", rank, sig,
                 spawn_signal_name(sig));
    return 128 + sig;
  }
  if (WEXITSTATUS(status) != 0)
    std::fprintf(stderr, "tutti::spawn: rank %d exited with code %d\n", rank, WEXITSTATUS(status));
  return WEXITSTATUS(status);
}

/// Waits for the children `pids` (rank i is pids[i]; live[i] != 0 for each, allocated before
/// forking so that nothing here can throw). On the first failure, reports it, sends SIGTERM to
/// the rest, and SIGKILL to those still alive after `grace_ms`. Reaps every child.
/// \returns 0, the first failure's exit code, or 128 + its signal.
[[nodiscard]] inline int spawn_wait(const std::vector<pid_t>& pids, std::vector<char>& live,
                                    long grace_ms) noexcept {
  std::size_t remaining = pids.size();
  int result = 0;
  // Reaps the children that have exited (blocking when `block`); true when any had.
  auto reap = [&](bool block) {
    bool progress = false;
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (!live[i]) continue;
      int status = 0;
      pid_t got = ::waitpid(pids[i], &status, block ? 0 : WNOHANG);
      while (got < 0 && errno == EINTR) got = ::waitpid(pids[i], &status, block ? 0 : WNOHANG);
      if (got == 0) continue;
      live[i] = 0;
      --remaining;
      progress = true;
      if (result != 0) continue;  // failures after the first are our own SIGTERM and SIGKILL
      result = spawn_outcome(static_cast<int>(i), got, status);
    }
    return progress;
  };
  auto poll_until = [&](auto done) {
    long step_us = 100;
    while (!done()) {
      if (reap(false)) {
        step_us = 100;
      } else if (!done()) {
        spawn_sleep(step_us);
        step_us = std::min(step_us * 2, 10000L);
      }
    }
  };
  auto signal_live = [&](int sig) {
    for (std::size_t i = 0; i < pids.size(); ++i) {
      if (live[i]) ::kill(pids[i], sig);  // unreaped, so the pid is still ours
    }
  };

  poll_until([&] { return remaining == 0 || result != 0; });
  if (remaining == 0) return result;
  std::fprintf(stderr, "tutti::spawn: stopping the %zu other running rank(s)\n", remaining);
  signal_live(SIGTERM);
  const long deadline = spawn_now_ms() + grace_ms;
  poll_until([&] { return remaining == 0 || spawn_now_ms() >= deadline; });
  if (remaining != 0) {
    signal_live(SIGKILL);
    reap(true);
  }
  return result;
}

/// Kills and reaps the children forked so far, after a fork failed.
inline void spawn_abort(const std::vector<pid_t>& pids) noexcept {
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
  for (pid_t pid : pids) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
}

[[nodiscard]] inline long spawn_grace_ms() {
  const char* value = std::getenv("TUTTI_SPAWN_GRACE_MS");
  if (value == nullptr) return spawn_default_grace_ms;
  auto ms = parse_non_negative(value);
  if (!ms) env_invalid(env_show("TUTTI_SPAWN_GRACE_MS", value) + " is not a non-negative integer");
  return *ms;
}

}  // namespace tutti::inline v0::detail

namespace tutti::inline v0 {

/// Runs `fn()` as every rank of a job and returns the job's exit status.
///
/// Under a launcher (bootstrap::detect_world() finds RANK/WORLD_SIZE, Open MPI, Hydra or Slurm
/// variables: mpirun, torchrun, srun, or an enclosing spawn), this process is already one rank:
/// fn runs here, once, and `n` is ignored (the launcher's world size wins). So one binary runs
/// unchanged under spawn, mpirun and torchrun.
///
/// Otherwise spawn forks `n` children on this host. Each sees RANK, WORLD_SIZE, LOCAL_RANK,
/// LOCAL_WORLD_SIZE (= n), MASTER_ADDR=127.0.0.1 and MASTER_PORT, the port of a TCP socket
/// spawn bound and put in listening state before forking; rank 0 also gets TUTTI_STORE_FD, that
/// socket's descriptor (close-on-exec cleared), which its store server adopts, so no other
/// process can take the port. The children die with SIGKILL when this thread exits (prctl
/// PR_SET_PDEATHSIG). A child's exit code is fn's result (0 for void, 1 for a non-zero result
/// whose low 8 bits are 0), or 1 when fn throws ("tutti::spawn: rank R: <what>" on stderr); it
/// leaves with _exit after flushing stdio and iostreams, running no static destructors.
/// When a child fails (non-zero exit or a signal), spawn reports it on stderr, sends SIGTERM to
/// the others, SIGKILL to those alive after a grace period (2 s; TUTTI_SPAWN_GRACE_MS
/// overrides), and reaps them all. spawn reaps only its own children.
///
/// Signals: a SIGCHLD set to SIG_IGN is set to the default while spawn runs and restored after;
/// SIGTERM is blocked only around each fork. The children inherit the caller's signal mask and
/// handlers, except a SIGTERM handler, which is reset to the default so the stop works (SIG_IGN
/// stays ignored, as across exec); fn may install its own.
///
/// Call spawn before starting threads: fork copies only the calling thread, so a child could
/// find a mutex another thread held locked forever.
///
/// \returns fn's result under a launcher (void: 0; an exception: 1, reported on stderr);
///   otherwise 0 when every child exited 0, else the first failure's exit code, or 128 + the
///   signal number of a child killed by a signal.
/// \throws tutti::error(errc::invalid_argument) when n is not in 1..4096 (and no launcher is
///   found), a launcher variable or TUTTI_SPAWN_GRACE_MS is malformed;
///   tutti::error(errc::transport_failure) when the socket or a fork fails (the children already
///   forked are killed and reaped first).
template <class Fn>
[[nodiscard]] int spawn(int n, Fn&& fn) {
  static_assert(detail::rank_function<Fn>,
                "tutti::spawn(n, fn): fn must be callable with no arguments and return int or "
                "void");
  if (auto world = bootstrap::detect_world()) return detail::spawn_run_rank(fn, world->rank);

  if (n < 1 || n > detail::spawn_max_ranks) {
    detail::env_invalid("spawn: n=" + std::to_string(n) + " ranks is not in 1.." +
                        std::to_string(detail::spawn_max_ranks));
  }
  const long grace_ms = detail::spawn_grace_ms();
  int port = 0;
  detail::unique_fd listener = detail::spawn_listen(std::max(128, n), port);
  std::vector<pid_t> pids;
  pids.reserve(static_cast<std::size_t>(n));
  std::vector<char> live(static_cast<std::size_t>(n), 1);
  detail::spawn_signal_guard signals;
  const pid_t parent = ::getpid();
  detail::spawn_flush();
  for (int rank = 0; rank < n; ++rank) {
    signals.block_sigterm();
    const pid_t pid = ::fork();
    if (pid == 0) detail::spawn_child(fn, rank, n, port, listener.get(), parent, signals);
    const int fork_errno = errno;
    signals.unblock_sigterm();
    if (pid < 0) {
      detail::spawn_abort(pids);
      detail::spawn_system_failure(
          "fork of rank " + std::to_string(rank) + " of " + std::to_string(n), fork_errno);
    }
    pids.push_back(pid);
  }
  listener.reset();
  return detail::spawn_wait(pids, live, grace_ms);
}

}  // namespace tutti::inline v0
