// tutti-faults (issue 9, item 1): fault injection across real processes.
//
// Each trial forks N ranks that build a communicator (a policy cycled over every policy the
// transport runs) and loop over random collectives drawn from one seeded sequence (collective,
// element type, op, count, root, in place or not, sometimes async), then the parent injects
// one fault at a random moment and checks what every survivor raised:
//
//   kill   SIGKILL a random rank 0..--max-delay-ms after every rank reported ready. Every
//          survivor must raise tutti::error naming it (peer() == victim) within --limit-ms.
//   stop   SIGSTOP a random rank; with a short timeout (--stop-timeout-ms) every survivor must
//          raise errc::timeout (or the aborted / peer_lost a neighbour's timeout causes); which
//          rank it names is counted (--require-naming: checked); the stopped rank is killed.
//   store  rank 0 serves the tcp:// store and is killed during bootstrap; the other ranks start
//          at random moments ("during") or only after it died ("early"), and each must raise a
//          tutti::error that names the store or rank 0, within the store timeout.
//
// After every trial: every forked process is reaped (kill(pid, 0) gives ESRCH) and no new
// /dev/shm/tutti-* entry stays behind. A survivor that does not finish within --hang-s is a
// HANG: the parent kills every rank and the trial fails. Times are CLOCK_MONOTONIC
// (steady_clock), which every process on the host shares.
//
// inproc ranks are threads of one process and cannot be killed one by one: it is not a
// transport of this harness (a rank returning early is covered by tests/test_errors.cpp).

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <memory>
#include <new>
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <tutti/tutti.hpp>
#ifdef TUTTI_HAVE_GLOO
#include <tutti/transport/gloo.hpp>
#endif

#include "../harness_common.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

[[nodiscard]] long long now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(clock_type::now().time_since_epoch())
      .count();
}

void sleep_ms(double ms) {
  std::this_thread::sleep_for(std::chrono::microseconds(static_cast<long long>(ms * 1000.0)));
}

// ---- configuration -------------------------------------------------------------------------

struct config {
  std::string mode = "kill";
  std::vector<std::string> transports{"shm"};
  std::vector<int> nps{2, 3, 4, 5, 6, 7, 8};
  int trials = 5;  // per transport and world size
  double duration_s = 0;
  std::uint64_t seed = 1;
  std::size_t max_count = 4096;
  double max_delay_ms = 200;
  double limit_ms = -1;  // -1: the transport's default
  double hang_s = 10;
  int stop_timeout_ms = 1000;
  int store_timeout_ms = 3000;
  std::string json;
  bool self_test_fail = false;
  bool verbose = false;
  bool strict_shm = false;      // store mode: count even an unreachable segment as a leak
  int require_naming = -1;      // -1: the mode's default (kill, store: yes; stop: record only)
  bool ignore_sigpipe = false;  // ranks ignore SIGPIPE (Gloo writes with writev: see README)
  std::set<std::string> skip_policies;  // --skip-policy NAME, repeatable
};

[[nodiscard]] double default_limit_ms(const std::string& transport) {
  return transport == "shm" ? 1000.0 : 2000.0;
}

// ---- what the ranks report, in memory shared across fork ----------------------------------

constexpr int max_ranks = 16;

enum class stage : int { starting, joined, caught, bootstrap_failed, other_exception };

struct rank_slot {
  std::atomic<int> pid{0};
  std::atomic<int> stage{0};
  std::atomic<int> kind{0};  // tutti::errc of the error caught, 0 for none
  std::atomic<int> peer{-2};
  std::atomic<long long> caught_ns{0};
  std::atomic<long long> exit_ns{0};
  std::atomic<long> ops{0};  // collectives completed before the error
  // The longest any of them took (with its waits): how slow this machine is right now, which
  // the detection limit allows for (a loaded machine delays detection as it delays every call).
  std::atomic<long long> slowest_ns{0};
  char what[320] = {};
  char segment[64] = {};
};

struct report {
  std::atomic<int> go{0};  // store mode, "early": the other ranks may start
  rank_slot slot[max_ranks];
};

class shared_report {
 public:
  shared_report() {
    void* p =
        mmap(nullptr, sizeof(report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      std::perror("tutti-faults: mmap");
      std::exit(2);
    }
    r_ = new (p) report;
  }
  shared_report(const shared_report&) = delete;
  shared_report& operator=(const shared_report&) = delete;
  ~shared_report() { munmap(r_, sizeof(report)); }
  report* operator->() const noexcept { return r_; }

 private:
  report* r_;
};

void copy_text(char* dst, std::size_t cap, std::string_view s) noexcept {
  const std::size_t n = std::min(s.size(), cap - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

void record(rank_slot& s, const tutti::error& e) noexcept {
  s.caught_ns = now_ns();
  s.kind = static_cast<int>(e.kind());
  s.peer = e.peer();
  copy_text(s.what, sizeof s.what, e.what());
}

// ---- random collectives ---------------------------------------------------------------------

enum class coll : int {
  all_reduce,
  reduce,
  broadcast,
  all_gather,
  reduce_scatter,
  gather,
  scatter,
  all_to_all,
  barrier
};
constexpr int n_colls = 9;

/// Which collectives policy A implements over transport X, as a bit mask over `coll`.
template <class A, class X>
constexpr unsigned capabilities() {
  return tutti_harness::capabilities<A, X, coll>();
}

/// One drawn op, the same on every rank.
struct op_desc {
  coll c = coll::barrier;
  int type = 0;
  tutti::op_kind op = tutti::op_kind::sum;
  std::size_t n = 0;
  int root = 0;
  bool in_place = false;
  bool async = false;
};

/// An async op's buffers, kept alive (declared before the communicator) until it is gone.
struct pending {
  tutti::work w;
  std::shared_ptr<void> keep;
};

/// The reductions a drawn op uses, in the order the seed has always drawn them.
constexpr std::array<tutti::op_kind, 3> drawn_ops{tutti::op_kind::sum, tutti::op_kind::max,
                                                  tutti::op_kind::min};

/// One drawn op of element type T on `comm`: its buffers, its async handle, and one member per
/// collective that sizes the buffers and calls it as drawn (blocking or async, in place or not).
/// A member is instantiated only where tutti_harness::call_drawn calls it, for a policy that has
/// the collective.
template <class T, class Comm>
class op_call {
 public:
  op_call(Comm& comm, const op_desc& d)
      : comm_(comm), d_(d), n_(d.n), p_(static_cast<std::size_t>(comm.size())) {}

  void all_reduce() {
    const auto io = sized(n_, d_.in_place ? 0 : n_);
    const std::span<T> i = io.first, o = io.second;
    tutti_harness::with_op(d_.op, [&](auto op) {
      if (d_.in_place)
        d_.async ? void(w_ = comm_.all_reduce_async(i, op)) : comm_.all_reduce(i, op);
      else
        d_.async ? void(w_ = comm_.all_reduce_async(std::span<const T>(i), o, op))
                 : comm_.all_reduce(std::span<const T>(i), o, op);
    });
  }

  void reduce() {
    const auto io = sized(n_, d_.in_place ? 0 : n_);
    const std::span<T> i = io.first, o = io.second;
    tutti_harness::with_op(d_.op, [&](auto op) {
      if (d_.in_place)
        comm_.reduce(i, op, d_.root);
      else
        d_.async ? void(w_ = comm_.reduce_async(std::span<const T>(i), o, op, d_.root))
                 : comm_.reduce(std::span<const T>(i), o, op, d_.root);
    });
  }

  void broadcast() {
    const std::span<T> i = sized(n_, 0).first;
    d_.async ? void(w_ = comm_.broadcast_async(i, d_.root)) : comm_.broadcast(i, d_.root);
  }

  void all_gather() {
    if (d_.in_place) {
      comm_.all_gather(sized(p_ * n_, 0).first);
      return;
    }
    const auto io = sized(n_, p_ * n_);
    const std::span<T> i = io.first, o = io.second;
    d_.async ? void(w_ = comm_.all_gather_async(std::span<const T>(i), o))
             : comm_.all_gather(std::span<const T>(i), o);
  }

  void reduce_scatter() {
    const auto io = sized(p_ * n_, d_.in_place ? 0 : n_);
    const std::span<T> i = io.first, o = io.second;
    tutti_harness::with_op(d_.op, [&](auto op) {
      if (d_.in_place)
        comm_.reduce_scatter(i, op);
      else
        d_.async ? void(w_ = comm_.reduce_scatter_async(std::span<const T>(i), o, op))
                 : comm_.reduce_scatter(std::span<const T>(i), o, op);
    });
  }

  void gather() {
    const auto io = sized(n_, p_ * n_);
    const std::span<T> i = io.first, o = io.second;
    d_.async ? void(w_ = comm_.gather_async(std::span<const T>(i), o, d_.root))
             : comm_.gather(std::span<const T>(i), o, d_.root);
  }

  void scatter() {
    const auto io = sized(p_ * n_, n_);
    const std::span<T> i = io.first, o = io.second;
    d_.async ? void(w_ = comm_.scatter_async(std::span<const T>(i), o, d_.root))
             : comm_.scatter(std::span<const T>(i), o, d_.root);
  }

  void all_to_all() {
    const auto io = sized(p_ * n_, d_.in_place ? 0 : p_ * n_);
    const std::span<T> i = io.first, o = io.second;
    if (d_.in_place)
      comm_.all_to_all(i);
    else
      d_.async ? void(w_ = comm_.all_to_all_async(std::span<const T>(i), o))
               : comm_.all_to_all(std::span<const T>(i), o);
  }

  void barrier() { d_.async ? void(w_ = comm_.barrier_async()) : comm_.barrier(); }

  /// Queues the async op with its buffers, which stay alive as long as it does.
  void enqueue(std::vector<pending>& queue) {
    queue.push_back({std::move(w_), std::make_shared<std::pair<decltype(in_), decltype(out_)>>(
                                        std::move(in_), std::move(out_))});
  }

 private:
  /// Sizes the input to `ni` elements holding rank + 1 and the output to `no` zeros.
  std::pair<std::span<T>, std::span<T>> sized(std::size_t ni, std::size_t no) {
    in_->assign(ni, static_cast<T>(comm_.rank() + 1));
    out_->assign(no, T{});
    return std::pair<std::span<T>, std::span<T>>(*in_, *out_);
  }

  Comm& comm_;
  const op_desc& d_;
  const std::size_t n_, p_;
  std::shared_ptr<std::vector<T>> in_ = std::make_shared<std::vector<T>>();
  std::shared_ptr<std::vector<T>> out_ = std::make_shared<std::vector<T>>();
  tutti::work w_;
};

/// Runs the drawn op `d` with element type T on `comm`; an async one joins `queue`. A collective
/// the policy lacks is never drawn, and call_drawn keeps it from being compiled.
template <class T, class Comm>
void run_op(Comm& comm, const op_desc& d, std::vector<pending>& queue) {
  op_call<T, Comm> call(comm, d);
  tutti_harness::call_drawn<typename Comm::algorithm_type, typename Comm::transport_type>(d.c,
                                                                                          call);
  if (d.async) call.enqueue(queue);
}

[[nodiscard]] bool has_in_place(coll c) {
  return c == coll::all_reduce || c == coll::reduce || c == coll::all_gather ||
         c == coll::reduce_scatter || c == coll::all_to_all;
}

/// Loops over random collectives on `comm` until one raises (the caller catches it).
template <class Comm>
[[noreturn]] void loop(Comm& comm, std::uint64_t seed, std::size_t max_count, rank_slot& s,
                       std::vector<pending>& queue) {
  constexpr unsigned caps =
      capabilities<typename Comm::algorithm_type, typename Comm::transport_type>();
  std::array<int, n_colls> choices{};
  std::size_t m = 0;
  for (int c = 0; c < n_colls; ++c)
    if ((caps >> c) & 1U) choices[m++] = c;
  std::mt19937_64 rng(seed);
  const auto below = [&rng](std::size_t n) { return static_cast<std::size_t>(rng() % n); };
  const std::size_t p = static_cast<std::size_t>(comm.size());
  for (;;) {
    const long long started = now_ns();
    op_desc d;
    d.c = static_cast<coll>(choices[below(m)]);
    d.type = static_cast<int>(below(4));
    d.op = drawn_ops[below(3)];
    switch (below(3)) {
      case 0:
        d.n = below(2 * p + 2);
        break;
      case 1:
        d.n = below(64);
        break;
      default:
        d.n = below(max_count + 1);
    }
    d.root = static_cast<int>(below(p));
    d.in_place = has_in_place(d.c) && below(2) == 0;
    const bool async_form =
        d.c == coll::all_reduce || d.c == coll::broadcast || d.c == coll::barrier || !d.in_place;
    d.async = async_form && below(3) == 0;
    switch (d.type) {
      case 0:
        run_op<float>(comm, d, queue);
        break;
      case 1:
        run_op<double>(comm, d, queue);
        break;
      case 2:
        run_op<std::int32_t>(comm, d, queue);
        break;
      default:
        run_op<std::int64_t>(comm, d, queue);
    }
    const std::size_t cap = below(4);  // up to 3 outstanding
    while (queue.size() > cap) {
      const std::size_t i = below(queue.size());
      queue[i].w.wait();
      queue.erase(queue.begin() + static_cast<std::ptrdiff_t>(i));
    }
    s.ops.fetch_add(1, std::memory_order_relaxed);
    const long long took = now_ns() - started;
    if (took > s.slowest_ns.load(std::memory_order_relaxed))
      s.slowest_ns.store(took, std::memory_order_relaxed);
  }
}

// ---- one rank --------------------------------------------------------------------------------

struct rank_job {
  std::string url;
  int np = 2;
  std::uint64_t seed = 1;
  std::size_t max_count = 4096;
  std::chrono::milliseconds timeout{60'000};
  double start_delay_ms = 0;  // store mode: connect this late
  bool wait_go = false;       // store mode, "early": connect only once rank 0 is dead
};

/// Builds the communicator, reports ready, loops until an error, records it. Exit codes: 0 an
/// error caught and recorded, 5 bootstrap failed (recorded), 3 another exception.
template <class X, class A>
int rank_main(const rank_job& job, int r, report& rep) {
  rank_slot& s = rep.slot[r];
  std::vector<pending> queue;  // outlives the communicator, which may still run queued ops
  try {
    if (job.wait_go) {
      const auto deadline = clock_type::now() + std::chrono::seconds(30);
      while (rep.go.load() == 0 && clock_type::now() < deadline) sleep_ms(1);
    }
    if (job.start_delay_ms > 0) sleep_ms(job.start_delay_ms);
    tutti::options opts;
    opts.timeout = job.timeout;
    auto comm = tutti::communicator<X, A>::from_url(job.url, r, job.np, opts);
    if constexpr (std::is_same_v<X, tutti::shm>)
      copy_text(s.segment, sizeof s.segment, comm.transport().segment_name());
    s.stage = static_cast<int>(stage::joined);
    try {
      loop(comm, job.seed, job.max_count, s, queue);
    } catch (const tutti::error& e) {
      record(s, e);
      s.stage = static_cast<int>(stage::caught);
    }
  } catch (const tutti::error& e) {  // from the bootstrap
    record(s, e);
    s.stage = static_cast<int>(stage::bootstrap_failed);
  } catch (const std::exception& e) {
    copy_text(s.what, sizeof s.what, e.what());
    s.stage = static_cast<int>(stage::other_exception);
    return 3;
  }
  s.exit_ns = now_ns();
  return 0;
}

// The policies a transport is run with, in the order the command line numbers
// them (names[i] is policy i). run(i, ...) runs policy i; any i out of range
// runs the last one, as the switch it replaces did.
template <class X, class... P>
struct policy_list {
  static constexpr std::array<const char*, sizeof...(P)> names{P::name...};
  static int run(int i, const rank_job& job, int r, report& rep) {
    constexpr int last = static_cast<int>(sizeof...(P)) - 1;
    const int pick = (i >= 0 && i < last) ? i : last;
    int k = 0;
    int rc = 0;
    (void)((k++ == pick ? (rc = rank_main<X, P>(job, r, rep), true) : false) || ...);
    return rc;
  }
};

template <class X>
struct policies;

template <>
struct policies<tutti::shm>
    : policy_list<tutti::shm, tutti::automatic, tutti::ring, tutti::tree, tutti::recursive_halving,
                  tutti::recursive_doubling, tutti::direct, tutti::bruck> {};

#ifdef TUTTI_HAVE_GLOO
template <>
struct policies<tutti::gloo>
    : policy_list<tutti::gloo, tutti::automatic, tutti::ring, tutti::tree, tutti::recursive_halving,
                  tutti::recursive_doubling, tutti::bruck, tutti::native> {};
#endif

[[nodiscard]] int n_policies(const std::string& transport) {
  (void)transport;
  return 7;
}

[[nodiscard]] const char* policy_name(const std::string& transport, int i) {
#ifdef TUTTI_HAVE_GLOO
  if (transport == "gloo") return policies<tutti::gloo>::names[static_cast<std::size_t>(i)];
#endif
  (void)transport;
  return policies<tutti::shm>::names[static_cast<std::size_t>(i)];
}

[[nodiscard]] int run_rank(const std::string& transport, int policy, const rank_job& job, int r,
                           report& rep) {
#ifdef TUTTI_HAVE_GLOO
  if (transport == "gloo") return policies<tutti::gloo>::run(policy, job, r, rep);
#endif
  (void)transport;
  return policies<tutti::shm>::run(policy, job, r, rep);
}

// ---- the parent's side: processes, /dev/shm ------------------------------------------------

/// The forked ranks of one trial. The destructor kills and reaps whatever still runs, so no
/// path out of a trial (a failed check, an exception) leaves a process behind.
class fleet {
 public:
  explicit fleet(bool ignore_pipe) : ignore_sigpipe(ignore_pipe) {}
  fleet(const fleet&) = delete;
  fleet& operator=(const fleet&) = delete;
  ~fleet() { kill_all(); }

  /// Forks rank `r` running `body()`; the child dies with this process (PR_SET_PDEATHSIG).
  template <class Body>
  void fork_rank(Body&& body) {
    std::fflush(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("tutti-faults: fork");
      std::exit(2);
    }
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(97);
      if (ignore_sigpipe) ::signal(SIGPIPE, SIG_IGN);
      int code = 99;
      try {
        code = body();
      } catch (...) {
        code = 98;
      }
      std::fflush(nullptr);
      _exit(code);
    }
    pids_.push_back(pid);
    status_.push_back(-1);
  }

  [[nodiscard]] pid_t pid(int r) const { return pids_[static_cast<std::size_t>(r)]; }
  [[nodiscard]] bool exited(int r) const { return status_[static_cast<std::size_t>(r)] != -1; }
  [[nodiscard]] int status(int r) const { return status_[static_cast<std::size_t>(r)]; }
  [[nodiscard]] int size() const { return static_cast<int>(pids_.size()); }

  /// Reaps whatever exited; returns how many ranks still run.
  int reap() {
    int left = 0;
    for (std::size_t i = 0; i < pids_.size(); ++i) {
      if (status_[i] != -1) continue;
      int st = 0;
      if (waitpid(pids_[i], &st, WNOHANG) == pids_[i])
        status_[i] = st;
      else
        ++left;
    }
    return left;
  }

  /// Waits until every rank in `which` exited or `deadline` passed; true when they all did.
  template <class Which>
  bool wait_for(Which&& which, clock_type::time_point deadline) {
    for (;;) {
      reap();
      bool all = true;
      for (int r = 0; r < size(); ++r)
        if (which(r) && !exited(r)) all = false;
      if (all) return true;
      if (clock_type::now() >= deadline) return false;
      sleep_ms(0.5);
    }
  }

  /// SIGKILLs every rank still running and reaps it (SIGKILL ends stopped processes too).
  void kill_all() noexcept {
    for (std::size_t i = 0; i < pids_.size(); ++i)
      if (status_[i] == -1) ::kill(pids_[i], SIGKILL);
    for (std::size_t i = 0; i < pids_.size(); ++i)
      if (status_[i] == -1) {
        int st = 0;
        while (waitpid(pids_[i], &st, 0) < 0 && errno == EINTR) {
        }
        status_[i] = st;
      }
  }

  /// Ranks whose pid still exists after everything was reaped.
  [[nodiscard]] std::vector<int> orphans() const {
    std::vector<int> v;
    for (int r = 0; r < size(); ++r)
      if (!(::kill(pid(r), 0) == -1 && errno == ESRCH)) v.push_back(r);
    return v;
  }

 private:
  bool ignore_sigpipe = false;
  std::vector<pid_t> pids_;
  std::vector<int> status_;
};

[[nodiscard]] std::set<std::string> shm_entries() {
  std::set<std::string> s;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("tutti-", 0) == 0) s.insert(name);
  }
  return s;
}

/// /dev/shm/tutti-* entries that appeared since `before`, made by one of `pids` (this trial's
/// ranks: a test running alongside makes segments of its own; a name that does not parse
/// counts), and still there after a grace second; each one found is removed so one leak does
/// not fail later trials.
[[nodiscard]] std::vector<std::string> shm_leaks(const std::set<std::string>& before,
                                                 const std::set<long long>& pids) {
  std::vector<std::string> fresh;
  for (const auto& n : shm_entries()) {
    const auto parts = tutti::detail::shm_parse_name(n);
    if (before.count(n) == 0 && (!parts || pids.count(parts->pid) != 0)) fresh.push_back(n);
  }
  if (fresh.empty()) return fresh;
  sleep_ms(1000);
  std::vector<std::string> leaked;
  for (const auto& n : fresh)
    if (std::filesystem::exists("/dev/shm/" + n)) {
      leaked.push_back(n);
      std::error_code ec;
      std::filesystem::remove("/dev/shm/" + n, ec);
    }
  return leaked;
}

/// A listening socket on 127.0.0.1 and a free port, handed to rank 0 through TUTTI_STORE_FD
/// (as tutti::spawn does), so the port cannot be taken between choosing and serving it.
class store_listener {
 public:
  store_listener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        listen(fd_, 64) != 0 || getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      std::perror("tutti-faults: store socket");
      std::exit(2);
    }
    port_ = ntohs(addr.sin_port);
  }
  store_listener(const store_listener&) = delete;
  store_listener& operator=(const store_listener&) = delete;
  ~store_listener() { close(); }
  void close() noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  /// In rank 0's child: hands the socket over (without close-on-exec, as the variable says).
  void adopt_in_child() const {
    ::fcntl(fd_, F_SETFD, 0);
    setenv("TUTTI_STORE_FD", std::to_string(fd_).c_str(), 1);
  }
  [[nodiscard]] std::string url() const { return "tcp://127.0.0.1:" + std::to_string(port_); }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// ---- results -----------------------------------------------------------------------------

struct cell_stats {
  std::vector<double> ms;  // one detection time per survivor
  int trials = 0;
  int failures = 0;
  std::map<std::string, int> outcomes;  // "peer_lost names victim" -> count
};

[[nodiscard]] std::string kind_name(int k) {
  if (k == 0) return "none";
  return tutti::error_category().message(k);
}

[[nodiscard]] double pct(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, i == 0 ? 0 : i - 1)];
}

/// Whether `text` names rank `r` as "rank r" outside "on rank r" (this rank's own prefix).
[[nodiscard]] bool names_rank(std::string_view text, int r) {
  const std::string needle = "rank " + std::to_string(r);
  for (std::size_t at = text.find(needle); at != std::string_view::npos;
       at = text.find(needle, at + 1)) {
    const std::size_t end = at + needle.size();
    const bool whole = end == text.size() || !std::isdigit(static_cast<unsigned char>(text[end]));
    const bool own = at >= 3 && text.substr(at - 3, 3) == "on ";
    if (whole && !own) return true;
  }
  return false;
}

struct harness {
  config cfg;
  std::mt19937_64 rng;
  std::map<std::pair<std::string, int>, cell_stats> cells;
  std::vector<std::string> failures;
  std::string json_trials;
  int trials_run = 0;
  int unreachable_segments = 0;

  explicit harness(config c) : cfg(std::move(c)), rng(cfg.seed) {}

  double uniform(double lo, double hi) {
    return std::uniform_real_distribution<double>(lo, hi)(rng);
  }
  int pick(int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); }

  void fail(const std::string& what) {
    std::printf("  FAIL: %s\n", what.c_str());
    failures.push_back(what);
  }

  /// One trial: what it drew before its ranks started, and whether everything held.
  struct trial {
    std::string transport, mode, where;
    int np = 2, policy = 0, victim = 0;
    std::uint64_t op_seed = 1;  // the ranks' operations
    bool store_mode = false;    // rank 0, the store's host, dies while the world forms
    bool early = false;         // store mode: before any other rank started
    double delay = 0;  // ms from "every rank joined" (store mode: from the start) to the fault
    double limit = 0;  // ms a survivor may take to raise, on a quiet machine
    bool ok = true;
  };

  /// Every survivor's record, checked; adds detection times to `cell`.
  struct survivor_rule {
    int want_kind = 0;             // 0: any tutti::error
    bool must_name_victim = true;  // peer() == victim or the message names "rank victim"
    double limit_ms = 1000;
  };

  void bad(trial& t, const std::string& what) {
    t.ok = false;
    fail(t.where + ": " + what);
  }

  /// The trial's random choices, in the order the seed has always drawn them.
  trial draw(const std::string& transport, int np, int policy, const std::string& tag) {
    trial t;
    t.transport = transport;
    t.mode = cfg.mode;
    t.np = np;
    t.policy = policy;
    t.op_seed = rng();
    t.store_mode = t.mode == "store";
    t.early = t.store_mode && pick(2) == 1;
    t.victim = t.store_mode ? 0 : pick(np);
    t.delay = pick(8) == 0 ? 0.0 : uniform(0, cfg.max_delay_ms);
    t.limit = cfg.limit_ms > 0 ? cfg.limit_ms : default_limit_ms(transport);
    t.where = tag + " " + transport + " np=" + std::to_string(np) + " " +
              policy_name(transport, policy) + " victim=" + std::to_string(t.victim) +
              (t.early ? " early" : "");
    return t;
  }

  /// What every rank of `t` runs, meeting at `url`.
  rank_job job_for(const trial& t, std::string url) const {
    rank_job job;
    job.np = t.np;
    job.seed = t.op_seed;
    job.max_count = cfg.max_count;
    job.url = std::move(url);
    if (t.mode == "stop")
      job.timeout = std::chrono::milliseconds(cfg.stop_timeout_ms);
    else if (t.store_mode)
      job.timeout = std::chrono::milliseconds(cfg.store_timeout_ms);
    return job;
  }

  /// Waits until the moment of the fault: every rank joined, then `t.delay` (store mode: a
  /// random moment while the others start, or before any started). False if a rank did not
  /// join.
  bool await_fault_moment(trial& t, fleet& f, const shared_report& rep) {
    if (t.store_mode) {
      sleep_ms(t.early ? uniform(5, 50) : t.delay);
      return true;
    }
    const auto ready_by = clock_type::now() + std::chrono::seconds(60);
    (void)f.wait_for(
        [&](int r) { return rep->slot[r].stage.load() == static_cast<int>(stage::starting); },
        ready_by);
    for (int r = 0; r < t.np; ++r)
      if (rep->slot[r].stage.load() != static_cast<int>(stage::joined) || f.exited(r))
        bad(t, "rank " + std::to_string(r) + " did not join: " + rep->slot[r].what);
    if (!t.ok) return false;
    sleep_ms(t.delay);
    return true;
  }

  /// Waits for every survivor to end, reports those that hang, and kills what is left. True if
  /// every survivor ended in time.
  bool await_survivors(trial& t, fleet& f, const shared_report& rep) {
    const double hang_s =
        cfg.hang_s + (t.mode == "stop" ? cfg.stop_timeout_ms / 1000.0 : 0.0) +
        (t.store_mode ? cfg.store_timeout_ms / 1000.0 + (t.early ? 0 : cfg.max_delay_ms / 1000.0)
                      : 0.0);
    const auto hard =
        clock_type::now() + std::chrono::microseconds(static_cast<long long>(hang_s * 1e6));
    const bool finished = f.wait_for([&](int r) { return r != t.victim; }, hard);
    if (!finished)
      for (int r = 0; r < t.np; ++r)
        if (r != t.victim && !f.exited(r))
          bad(t, "HANG: rank " + std::to_string(r) + " still running " + std::to_string(hang_s) +
                     " s after the fault (stage " + std::to_string(rep->slot[r].stage.load()) +
                     ")");
    f.kill_all();
    if (!WIFSIGNALED(f.status(t.victim)))
      bad(t, "the victim was not killed by the fault (exit status " +
                 std::to_string(f.status(t.victim)) + ")");
    for (int r : f.orphans()) bad(t, "orphan: rank " + std::to_string(r) + " still exists");
    return finished;
  }

  /// What the survivors of `t` must do. The limit holds on a quiet machine; a busy one
  /// stretches detection as it stretches every call, so the limit grows by ten times the
  /// slowest call any rank made before the fault.
  survivor_rule rule_for(const trial& t, const shared_report& rep) const {
    long long slowest_ns = 0;
    for (int r = 0; r < t.np; ++r)
      slowest_ns = std::max(slowest_ns, rep->slot[r].slowest_ns.load());
    const double stretch_ms = t.store_mode ? 0.0 : 10 * double(slowest_ns) * 1e-6;
    survivor_rule rule;
    rule.limit_ms = t.limit + stretch_ms;
    rule.must_name_victim = cfg.require_naming >= 0 ? cfg.require_naming == 1 : t.mode != "stop";
    if (t.mode == "kill") rule.want_kind = static_cast<int>(tutti::errc::peer_lost);
    if (t.mode == "stop") rule.want_kind = static_cast<int>(tutti::errc::timeout);
    return rule;
  }

  /// How a survivor's error names the fault, for the outcome table.
  static std::string outcome_of(const trial& t, const rank_slot& s, int kind, int peer) {
    const std::string_view what = s.what;
    std::string outcome = kind_name(kind);
    if (peer == t.victim)
      outcome += " peer=victim";
    else if (names_rank(what, t.victim))
      outcome += " message names victim";
    else if (what.find("store") != std::string_view::npos)
      outcome += " message names the store";
    else
      outcome += " names rank " + std::to_string(peer);
    if (s.stage.load() == static_cast<int>(stage::bootstrap_failed)) outcome += " (bootstrap)";
    return outcome;
  }

  /// Appends survivor `r`'s record to the JSON trials (up to 64 MiB of them).
  void record_json(const trial& t, int r, int kind, int peer, double ms, const char* what) {
    if (json_trials.size() >= (std::size_t{64} << 20)) return;
    std::string w = what;
    for (char& ch : w)
      if (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = '\'';
    std::string rec = json_trials.empty() ? "{" : ",\n{";
    rec += "\"mode\":\"" + t.mode;
    rec += "\",\"transport\":\"" + t.transport + "\"";
    rec += ",\"np\":" + std::to_string(t.np);
    rec += std::string(",\"policy\":\"") + policy_name(t.transport, t.policy) + "\"";
    rec += ",\"victim\":" + std::to_string(t.victim) + ",\"rank\":" + std::to_string(r);
    rec += ",\"kind\":\"" + kind_name(kind) + "\",\"peer\":" + std::to_string(peer);
    rec += ",\"ms\":" + std::to_string(ms) + ",\"what\":\"" + w + "\"}";
    json_trials += rec;
  }

  /// Survivor `r` (exit status `st`): it must have caught an error of the rule's kind, naming
  /// the victim where the rule says so, within the rule's limit of the fault.
  void judge_survivor(trial& t, int r, const rank_slot& s, int st, bool finished,
                      long long fault_ns, const survivor_rule& rule, cell_stats& cell) {
    const std::string who = "rank " + std::to_string(r);
    if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
      if (finished) bad(t, who + " ended with status " + std::to_string(st) + ": " + s.what);
      return;
    }
    const int kind = s.kind.load();
    const int peer = s.peer.load();
    const double ms = double(s.caught_ns.load() - fault_ns) * 1e-6;
    // kill mode: peer() must name the victim; stop mode: peer() or the message; store
    // mode: rank 0 (the store's host) or the store.
    const std::string_view what = s.what;
    const bool named = cfg.self_test_fail ? peer == t.victim + 1
                       : t.mode == "kill" ? peer == t.victim
                       : t.store_mode     ? peer == t.victim || names_rank(what, t.victim) ||
                                            what.find("store") != std::string_view::npos
                                      : peer == t.victim || names_rank(what, t.victim);
    ++cell.outcomes[outcome_of(t, s, kind, peer)];
    cell.ms.push_back(ms);
    if (cfg.verbose)
      std::printf("  %s %s: %.2f ms, %ld ops: %s\n", t.where.c_str(), who.c_str(), ms, s.ops.load(),
                  s.what);
    record_json(t, r, kind, peer, ms, s.what);
    const bool kind_ok =
        rule.want_kind == 0 || kind == rule.want_kind ||
        (!t.store_mode && kind == static_cast<int>(tutti::errc::aborted)) ||
        // stop: a rank whose live neighbour timed out and closed sees that close first
        (t.mode == "stop" && !rule.must_name_victim &&
         kind == static_cast<int>(tutti::errc::peer_lost));
    if (!kind_ok)
      bad(t, who + " raised " + kind_name(kind) + ", expected " + kind_name(rule.want_kind) + ": " +
                 s.what);
    if (rule.must_name_victim && !named)
      bad(t, who + " did not name rank " + std::to_string(t.victim) +
                 (t.store_mode ? " or the store" : "") + " (peer " + std::to_string(peer) +
                 "): " + s.what);
    const double lim = t.mode == "stop" ? cfg.stop_timeout_ms + rule.limit_ms
                       : t.store_mode
                           ? cfg.store_timeout_ms + t.limit + (t.early ? 0.0 : cfg.max_delay_ms)
                           : rule.limit_ms;
    if (ms > lim || ms < 0)
      bad(t, who + " raised " + std::to_string(ms) + " ms after the fault (limit " +
                 std::to_string(lim) + " ms): " + s.what);
  }

  /// Segments the trial's ranks left in /dev/shm. One rank 0 made before any other rank
  /// fetched its name died with the store: no surviving process knows the name, so none can
  /// remove it (a limitation, README.md). Where a survivor attached (it says "while the world
  /// was forming"), it must remove it.
  void check_segments(trial& t, const std::set<std::string>& before,
                      const std::set<long long>& rank_pids, const shared_report& rep) {
    bool attached = false;
    for (int r = 1; r < t.np; ++r)
      attached = attached || std::string_view(rep->slot[r].what).find("world was forming") !=
                                 std::string_view::npos;
    for (const auto& n : shm_leaks(before, rank_pids)) {
      if (t.store_mode && !attached && !cfg.strict_shm) {
        ++unreachable_segments;
        std::printf("  note: %s: %s left in /dev/shm, its name known to no survivor (removed)\n",
                    t.where.c_str(), n.c_str());
      } else {
        bad(t, "left in /dev/shm: " + n);
      }
    }
  }

  void run_trial(const std::string& transport, int np, int policy, const std::string& tag) {
    cell_stats& cell = cells[{transport, np}];
    ++cell.trials;
    ++trials_run;
    trial t = draw(transport, np, policy, tag);

    shared_report rep;
    tutti_harness::temp_dir dir("tutti-faults");
    std::unique_ptr<store_listener> listener;
    if (t.store_mode) listener = std::make_unique<store_listener>();
    const rank_job job = job_for(t, listener ? listener->url() : dir.url());
    std::vector<double> start_delay(static_cast<std::size_t>(np), 0.0);
    if (t.store_mode && !t.early)
      for (int r = 1; r < np; ++r)
        start_delay[static_cast<std::size_t>(r)] = uniform(0, cfg.max_delay_ms);

    const auto shm_before = shm_entries();
    std::set<long long> rank_pids;
    {
      fleet f(cfg.ignore_sigpipe);
      for (int r = 0; r < np; ++r) {
        rank_job jr = job;
        jr.start_delay_ms = start_delay[static_cast<std::size_t>(r)];
        jr.wait_go = t.early && r != 0;
        f.fork_rank([&, jr, r] {
          if (t.store_mode && r == 0) listener->adopt_in_child();
          if (t.store_mode && r != 0) listener->close();
          rep->slot[r].pid = getpid();
          return run_rank(transport, policy, jr, r, *rep.operator->());
        });
      }
      if (listener) listener->close();  // rank 0 holds the only copy: its death closes it
      for (int r = 0; r < np; ++r) rank_pids.insert(f.pid(r));

      if (!await_fault_moment(t, f, rep)) {
        ++cell.failures;
        return;
      }
      const long long fault_ns = now_ns();
      ::kill(f.pid(t.victim), t.mode == "stop" ? SIGSTOP : SIGKILL);
      if (t.early) rep->go = 1;
      const bool finished = await_survivors(t, f, rep);
      const survivor_rule rule = rule_for(t, rep);
      for (int r = 0; r < np; ++r)
        if (r != t.victim)
          judge_survivor(t, r, rep->slot[r], f.status(r), finished, fault_ns, rule, cell);
    }
    check_segments(t, shm_before, rank_pids, rep);
    if (!t.ok) ++cell.failures;
  }

  int run() {
    const auto start = clock_type::now();
    std::map<std::string, int> policy_counter;
    bool out_of_time = false;
    for (int t = 0; t < cfg.trials && !out_of_time; ++t)
      for (const auto& transport : cfg.transports)
        for (int np : cfg.nps) {
          if (cfg.duration_s > 0 &&
              clock_type::now() - start > std::chrono::duration<double>(cfg.duration_s)) {
            out_of_time = true;
            break;
          }
          // The store mode needs a world to form; the policy matters little there.
          int policy = policy_counter[transport]++ % n_policies(transport);
          for (int k = 0; k < n_policies(transport) &&
                          cfg.skip_policies.count(policy_name(transport, policy)) != 0;
               ++k)
            policy = policy_counter[transport]++ % n_policies(transport);
          run_trial(transport, np, policy, cfg.mode + " #" + std::to_string(t));
        }
    const double secs = std::chrono::duration<double>(clock_type::now() - start).count();
    print(secs);
    if (!cfg.json.empty()) write_json(secs);
    if (failures.empty()) {
      std::printf("tutti-faults: OK (%d trials, %.1f s)\n", trials_run, secs);
      return 0;
    }
    std::printf("tutti-faults: FAILED (%zu failures in %d trials; first: %s)\n", failures.size(),
                trials_run, failures.front().c_str());
    return 1;
  }

  void print(double secs) const {
    std::printf(
        "\nmode %s, seed %llu, %d trials in %.1f s; times from the fault to the catch, ms\n",
        cfg.mode.c_str(), static_cast<unsigned long long>(cfg.seed), trials_run, secs);
    std::printf("%-9s %3s %6s %6s %8s %8s %8s %8s %8s %8s\n", "transport", "np", "trials", "count",
                "min", "p50", "p90", "p99", "max", "failures");
    for (const auto& [key, c] : cells) {
      std::printf("%-9s %3d %6d %6zu %8.2f %8.2f %8.2f %8.2f %8.2f %8d\n", key.first.c_str(),
                  key.second, c.trials, c.ms.size(), pct(c.ms, 0), pct(c.ms, 0.5), pct(c.ms, 0.9),
                  pct(c.ms, 0.99), pct(c.ms, 1.0), c.failures);
    }
    std::map<std::string, std::vector<double>> all;
    std::map<std::string, std::map<std::string, int>> outcomes;
    for (const auto& [key, c] : cells) {
      all[key.first].insert(all[key.first].end(), c.ms.begin(), c.ms.end());
      for (const auto& [o, k] : c.outcomes) outcomes[key.first][o] += k;
    }
    for (const auto& [t, v] : all)
      std::printf("%-9s all %6s %6zu %8.2f %8.2f %8.2f %8.2f %8.2f\n", t.c_str(), "", v.size(),
                  pct(v, 0), pct(v, 0.5), pct(v, 0.9), pct(v, 0.99), pct(v, 1.0));
    for (const auto& [t, m] : outcomes)
      for (const auto& [o, k] : m) std::printf("  %s: %d x %s\n", t.c_str(), k, o.c_str());
    if (unreachable_segments > 0)
      std::printf(
          "  limitation: %d segment(s) left in /dev/shm by a rank 0 that died before any "
          "rank fetched the name (removed by the harness)\n",
          unreachable_segments);
  }

  void write_json(double secs) const {
    std::FILE* f = std::fopen(cfg.json.c_str(), "w");
    if (f == nullptr) {
      std::perror(cfg.json.c_str());
      return;
    }
    std::fprintf(f, "{\"mode\":\"%s\",\"seed\":%llu,\"trials\":%d,\"seconds\":%.3f,\"cells\":[",
                 cfg.mode.c_str(), static_cast<unsigned long long>(cfg.seed), trials_run, secs);
    bool first = true;
    for (const auto& [key, c] : cells) {
      std::fprintf(f,
                   "%s\n{\"transport\":\"%s\",\"np\":%d,\"trials\":%d,\"count\":%zu,\"min\":%.3f,"
                   "\"p50\":%.3f,\"p90\":%.3f,\"p99\":%.3f,\"max\":%.3f,\"failures\":%d}",
                   first ? "" : ",", key.first.c_str(), key.second, c.trials, c.ms.size(),
                   pct(c.ms, 0), pct(c.ms, 0.5), pct(c.ms, 0.9), pct(c.ms, 0.99), pct(c.ms, 1.0),
                   c.failures);
      first = false;
    }
    std::fprintf(f, "],\n\"survivors\":[\n%s]}\n", json_trials.c_str());
    std::fclose(f);
  }
};

// ---- command line ----------------------------------------------------------------------------

constexpr const char* help_text =
    "usage: tutti-faults [options]\n"
    "  --mode kill|stop|store   the fault (default kill):\n"
    "      kill   SIGKILL a random rank at a random moment; survivors raise peer_lost naming it\n"
    "      stop   SIGSTOP a random rank; survivors raise timeout naming it\n"
    "      store  kill rank 0, which serves the tcp:// store, during bootstrap\n"
    "  --transport shm|gloo|all (default shm; gloo needs a TUTTI_WITH_GLOO build)\n"
    "  --np LIST                world sizes, e.g. 2-8 or 2,4,8 (default 2-8, at most 16)\n"
    "  --trials N               trials per transport and world size (default 5)\n"
    "  --duration-s S           start no trial after S seconds\n"
    "  --seed S                 seeds victims, moments, policies and op sequences (default 1)\n"
    "  --max-count C            largest count per collective (default 4096)\n"
    "  --max-delay-ms D         the fault lands 0..D ms after all ranks are ready (default 200)\n"
    "  --limit-ms L             detection limit (default 1000 on shm, 2000 on gloo); stop and\n"
    "                           store modes add their timeout to it, kill and stop ten times\n"
    "                           the slowest call any rank made before the fault (a busy machine)\n"
    "  --hang-s H               a survivor still running H s after the fault is a HANG (10)\n"
    "  --stop-timeout-ms T      the options timeout in stop mode (default 1000)\n"
    "  --store-timeout-ms T     the options timeout in store mode (default 3000)\n"
    "  --json FILE              write the figures and every survivor's record\n"
    "  --verbose                print every survivor's error\n"
    "  --require-naming         fail a survivor that does not name the victim (the default\n"
    "                           in kill and store modes)\n"
    "  --record-naming          only count which rank each survivor named (stop's default)\n"
    "  --strict-shm             store mode: fail on a segment no survivor could know the name\n"
    "                           of (rank 0 died before any rank fetched it); else counted\n"
    "  --skip-policy NAME       leave a policy out of the cycle (repeatable)\n"
    "  --ignore-sigpipe         ranks ignore SIGPIPE (a gloo rank writing to a dead peer's\n"
    "                           socket is otherwise killed by it: see tests/faults/README.md)\n"
    "  --self-test-fail         check for the wrong rank: the run must end FAILED\n"
    "inproc is not a transport here: its ranks are threads of one process, which cannot be\n"
    "killed or stopped one by one.\n";

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "tutti-faults: %s\n%s", why.c_str(), help_text);
  std::exit(2);
}

[[nodiscard]] double number(const std::string& flag, const char* v) {
  char* end = nullptr;
  const double x = std::strtod(v, &end);
  if (end == v || *end != '\0' || !(x >= 0)) usage("not a number after " + flag + ": " + v);
  return x;
}

/// --seed's value: every 64-bit seed, exactly (a double would round those above 2^53).
[[nodiscard]] std::uint64_t parse_seed(const char* v) {
  std::uint64_t x = 0;
  const char* end = v + std::strlen(v);
  const auto [at, ec] = std::from_chars(v, end, x);
  if (ec != std::errc{} || at != end || at == v)
    usage(std::string("not a seed after --seed (0..18446744073709551615): ") + v);
  return x;
}

[[nodiscard]] std::vector<int> parse_np(const std::string& s) {
  std::vector<int> v;
  std::size_t at = 0;
  while (at <= s.size()) {
    const std::size_t comma = s.find(',', at);
    const std::string part =
        s.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const std::size_t dash = part.find('-');
    const int lo = std::atoi(part.substr(0, dash).c_str());
    const int hi = dash == std::string::npos ? lo : std::atoi(part.substr(dash + 1).c_str());
    if (lo < 2 || hi > max_ranks || lo > hi)
      usage("--np takes sizes in 2.." + std::to_string(max_ranks) + ": " + s);
    for (int n = lo; n <= hi; ++n) v.push_back(n);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return v;
}

/// Sets the option `a` names if it takes no value (--help prints the usage and exits 0); false
/// when it takes one or is unknown.
[[nodiscard]] bool parse_flag(config& cfg, const std::string& a) {
  if (a == "--help" || a == "-h") {
    std::printf("%s", help_text);
    std::exit(0);
  }
  if (a == "--self-test-fail")
    cfg.self_test_fail = true;
  else if (a == "--verbose")
    cfg.verbose = true;
  else if (a == "--require-naming" || a == "--record-naming")
    cfg.require_naming = a == "--require-naming" ? 1 : 0;
  else if (a == "--strict-shm")
    cfg.strict_shm = true;
  else if (a == "--ignore-sigpipe")
    cfg.ignore_sigpipe = true;
  else
    return false;
  return true;
}

/// Sets the transports from --transport's value: shm, gloo where built, or all of those.
void parse_transport(config& cfg, const std::string& t) {
  if (t == "all") {
    cfg.transports = {"shm"};
#ifdef TUTTI_HAVE_GLOO
    cfg.transports.emplace_back("gloo");
#endif
  } else if (t == "shm"
#ifdef TUTTI_HAVE_GLOO
             || t == "gloo"
#endif
  ) {
    cfg.transports = {t};
  } else if (t == "inproc") {
    usage("inproc ranks are threads of one process: they cannot be killed one by one");
  } else {
    usage("unknown or unbuilt transport " + t);
  }
}

/// Sets the numeric option `a` names to `x`; false when `a` names none.
[[nodiscard]] bool parse_number(config& cfg, const std::string& a, double x) {
  if (a == "--trials")
    cfg.trials = static_cast<int>(x);
  else if (a == "--duration-s")
    cfg.duration_s = x;
  else if (a == "--max-count")
    cfg.max_count = static_cast<std::size_t>(x);
  else if (a == "--max-delay-ms")
    cfg.max_delay_ms = x;
  else if (a == "--limit-ms")
    cfg.limit_ms = x;
  else if (a == "--hang-s")
    cfg.hang_s = x;
  else if (a == "--stop-timeout-ms")
    cfg.stop_timeout_ms = static_cast<int>(x);
  else if (a == "--store-timeout-ms")
    cfg.store_timeout_ms = static_cast<int>(x);
  else
    return false;
  return true;
}

/// Sets the option `a` names from its value `v`. An option that is none of the others must
/// first have a number for a value ("not a number" is reported before "unknown option").
void parse_value(config& cfg, const std::string& a, const char* v) {
  if (a == "--mode") {
    cfg.mode = v;
    if (cfg.mode != "kill" && cfg.mode != "stop" && cfg.mode != "store")
      usage("unknown mode " + cfg.mode);
  } else if (a == "--transport") {
    parse_transport(cfg, v);
  } else if (a == "--np") {
    cfg.nps = parse_np(v);
  } else if (a == "--skip-policy") {
    cfg.skip_policies.insert(v);
  } else if (a == "--json") {
    cfg.json = v;
  } else if (a == "--seed") {
    cfg.seed = parse_seed(v);
  } else if (!parse_number(cfg, a, number(a, v))) {
    usage("unknown option " + a);
  }
}

config parse(int argc, char** argv) {
  config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (parse_flag(cfg, a)) continue;
    if (i + 1 >= argc) usage("missing value after " + a);
    parse_value(cfg, a, argv[++i]);
  }
  if (cfg.max_count < 1 || cfg.max_count > (std::size_t{1} << 22))
    usage("--max-count must be 1..4194304");
  return cfg;
}

}  // namespace

int main(int argc, char** argv) {
  harness h(parse(argc, argv));
  return h.run();
}
