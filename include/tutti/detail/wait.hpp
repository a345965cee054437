#pragma once
/// \file
/// Spin-then-sleep waiting on a doorbell word: ranks may outnumber cores, so a waiter spins
/// briefly, yields, then sleeps on a futex in bounded slices, polling for deadlines and aborts.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#if defined(__linux__)
#include <linux/futex.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <ctime>
#endif

namespace tutti::inline v0::detail {

using clock = std::chrono::steady_clock;

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();  // _mm_pause(), without <immintrin.h>: a second of parsing per file
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

/// Sleeps while `word == expected`, at most `limit`. `shared` selects a futex usable across
/// processes (the word lives in shared memory).
inline void futex_wait(std::atomic<std::uint32_t>& word, std::uint32_t expected,
                       std::chrono::nanoseconds limit, bool shared) noexcept {
#if defined(__linux__)
  static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t));
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(limit.count() / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(limit.count() % 1'000'000'000);
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word),
          shared ? FUTEX_WAIT : FUTEX_WAIT_PRIVATE, expected, &ts, nullptr, 0);
#else
  (void)shared;
  if (word.load(std::memory_order_acquire) == expected)
    std::this_thread::sleep_for(
        std::min<std::chrono::nanoseconds>(limit, std::chrono::microseconds(50)));
#endif
}

inline void futex_wake_all(std::atomic<std::uint32_t>& word, bool shared) noexcept {
#if defined(__linux__)
  syscall(SYS_futex, reinterpret_cast<std::uint32_t*>(&word),
          shared ? FUTEX_WAKE : FUTEX_WAKE_PRIVATE, 0x7fffffff, nullptr, nullptr, 0);
#else
  (void)word;
  (void)shared;
#endif
}

/// A word that changes whenever something a waiter may be waiting for changes. Standard layout,
/// no pointers: it may live in shared memory.
struct doorbell {
  std::atomic<std::uint32_t> ring_count{0};
  std::atomic<std::uint32_t> sleepers{0};

  /// Wakes everyone sleeping on this doorbell. Call after publishing the state change. Costs
  /// a fence and one load when nobody sleeps: a waiter announces itself in `sleepers` before
  /// its last look at the state, so either it sees the change or this sees it (Dekker).
  void ring(bool shared) noexcept {
#if defined(__SANITIZE_THREAD__)
    // ThreadSanitizer does not model fences; an acq_rel read-modify-write orders the same way.
    if (sleepers.fetch_add(0, std::memory_order_acq_rel) == 0) return;
#else
    std::atomic_thread_fence(std::memory_order_seq_cst);
    if (sleepers.load(std::memory_order_relaxed) == 0) return;
#endif
    ring_count.fetch_add(1, std::memory_order_seq_cst);
    futex_wake_all(ring_count, shared);
  }
};

/// The CPUs this process may run on (its affinity mask: what taskset, cpusets and schedulers
/// leave it), else the machine's; at least 1.
[[nodiscard]] inline unsigned usable_cpus() noexcept {
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
    return static_cast<unsigned>(CPU_COUNT(&set));
#endif
  const unsigned hw = std::thread::hardware_concurrency();
  return hw != 0 ? hw : 1;
}

/// Whether `ranks` processes or threads on one host outnumber the CPUs this one may use: then
/// a spinning waiter takes the CPU from the rank it waits for, so waits spin less and sleep
/// sooner. (tutti::automatic's notion, cost_model::ranks_per_cpu, must be the same on every
/// rank, so it counts the machine's CPUs rather than this process's affinity.)
[[nodiscard]] inline bool oversubscribed(int ranks) noexcept {
  return ranks > 1 && static_cast<unsigned>(ranks) > usable_cpus();
}

/// How long to spin and sleep. Spinning is short because ranks may outnumber cores.
///
/// Where every rank has a CPU (for_host), a wait spins for `spin_for` (50 µs) before it yields
/// and then sleeps: a rank that sleeps pays the wake-up — tens of microseconds on a virtual machine
/// whose idle CPU must be woken — and ranks driven from an interpreter arrive microseconds
/// apart, so a shorter spin left torch.distributed's small all_reduce sleeping in many calls
/// (bench/RESULTS.md, "all_reduce and DDP through torch.distributed").
struct wait_tuning {
  int spins = 256;                       // pause loops before the timed spin
  std::chrono::nanoseconds spin_for{0};  // then spin until this much time passed
  int yields = 16;                       // sched_yield calls before sleeping
  std::chrono::milliseconds slice{20};   // longest single sleep between polls

  /// The tuning for `ranks` ranks sharing this host: 50 µs of spinning where each has a CPU;
  /// where they outnumber its CPUs few spins and more yields (a yield lets the rank being
  /// waited for run).
  [[nodiscard]] static wait_tuning for_host(int ranks) noexcept {
    wait_tuning t;
    if (oversubscribed(ranks)) {
      t.spins = 8;
      t.yields = 128;
    } else {
      t.spin_for = std::chrono::microseconds(50);
    }
    return t;
  }
};

/// Waits until `ready()` holds. `poll()` runs before every sleep and may throw (deadline
/// passed, communicator aborted, peer dead, mismatch seen); its exception propagates unless
/// `ready()` holds by then.
template <class Ready, class Poll>
void wait_on(doorbell& bell, bool shared, Ready&& ready, Poll&& poll,
             const wait_tuning& tune = {}) {
  for (int i = 0; i < tune.spins; ++i) {
    if (ready()) return;
    cpu_relax();
  }
  if (tune.spin_for > std::chrono::nanoseconds::zero()) {
    const auto until = std::chrono::steady_clock::now() + tune.spin_for;
    do {
      for (int i = 0; i < 64; ++i) {  // ~0.6 µs of pauses between clock reads
        if (ready()) return;
        cpu_relax();
      }
    } while (std::chrono::steady_clock::now() < until);
  }
  for (int i = 0; i < tune.yields; ++i) {
    if (ready()) return;
    std::this_thread::yield();
  }
  for (;;) {
    bell.sleepers.fetch_add(1, std::memory_order_seq_cst);
#if !defined(__SANITIZE_THREAD__)
    std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
    const std::uint32_t seen = bell.ring_count.load(std::memory_order_seq_cst);
    if (ready()) {
      bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    try {
      poll();
    } catch (...) {
      bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
      // What the poll found (a peer that returned or died, the deadline) may have come after
      // the wait was over: a peer completes this rank's receive and then exits, between the
      // look at ready() above and the poll. The wait succeeded; the next call sees the rest.
      if (ready()) return;
      throw;
    }
    if (ready()) {  // poll may have found the state changed (or made progress itself)
      bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
      return;
    }
    futex_wait(bell.ring_count, seen, tune.slice, shared);
    bell.sleepers.fetch_sub(1, std::memory_order_relaxed);
    if (ready()) return;
  }
}

}  // namespace tutti::inline v0::detail
