#pragma once
/// \file
/// Joining a tutti::shm world once its rendezvous is known: rank 0 chooses the geometry
/// (shm_default_layout), creates the segment and publishes its name; the others fetch the
/// name and attach; every rank then waits until all attached, unlinks the name (the rank that
/// completes the world) and starts watching its peers' processes. A failure on the way sweeps
/// the segments whose creator died.

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/shm_layout.hpp"
#include "tutti/detail/shm_segment.hpp"
#include "tutti/detail/shm_state.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// Slot and channel sizes: TUTTI_SHM_SLOT_BYTES / TUTTI_SHM_CHANNEL_BYTES on rank 0 or defaults.
[[nodiscard]] inline shm_layout shm_default_layout(int ranks) {
  auto read = [](const char* var, std::size_t fallback, std::size_t lo, std::size_t hi) {
    const std::string s = env_string(var);
    if (s.empty()) return fallback;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (end == s.c_str() || *end != '\0' || v < lo || v > hi)
      throw error(errc::invalid_argument, "", 0, -1, -1,
                  std::string(var) + "=" + s + " is not a byte count in [" + std::to_string(lo) +
                      ", " + std::to_string(hi) + "]");
    return static_cast<std::size_t>(v);
  };
  shm_layout l;
  l.ranks = static_cast<std::size_t>(ranks);
  l.slot_bytes =
      round_up(read("TUTTI_SHM_SLOT_BYTES", std::size_t{1} << 20, 8192, std::size_t{1} << 30),
               shm_layout::page);
  // Rings: 64 KiB per pair and space up to 16 ranks, smaller beyond (the pair count grows as p²).
  std::size_t ring = ranks <= 16 ? std::size_t{64} << 10 : std::size_t{16} << 10;
  ring = read("TUTTI_SHM_CHANNEL_BYTES", ring, 4096, std::size_t{64} << 20);
  std::size_t pow2 = 4096;
  while (pow2 < ring) pow2 <<= 1;
  l.channel_bytes = pow2;
  return l;
}

/// Marks this rank attached, unlinks the segment's name if that completes the world, and waits
/// until all `st.size` ranks attached; then watches the peers' processes. Raises
/// tutti::error(errc::peer_lost) if a rank dies meanwhile, errc::timeout naming the ranks that
/// never attached by `deadline`.
/// The word this process offers for the single-copy probe: its address and value are published
/// in the rank's block, and a peer that reads the value back can read this process's memory.
[[nodiscard]] inline const std::uint64_t& shm_probe_word() {
  static const std::uint64_t word = [] {
    std::random_device rd;
    return ((std::uint64_t{rd()} << 32) ^ rd()) | 1;
  }();
  return word;
}

/// Whether this rank offers and takes single copies (TUTTI_SHM_CMA, default on).
[[nodiscard]] inline bool shm_single_copy_enabled() { return env_switch_on("TUTTI_SHM_CMA"); }

/// Reads every peer's probe word through process_vm_readv; where it reads back, marks the
/// peer's user channel to this rank single-copy (its sender may then send addresses).
inline void shm_probe_single_copy(shm_state& st) {
  if (!shm_single_copy_enabled()) return;
  auto& v = st.view;
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    const auto& b = v.block(q);
    const std::uint64_t address = b.probe_address.load(std::memory_order_relaxed);
    const std::uint64_t value = b.probe_value.load(std::memory_order_relaxed);
    const auto pid = static_cast<pid_t>(b.pid.load(std::memory_order_relaxed));
    std::uint64_t got = 0;
    if (address == 0 || pid <= 0 || cma_read(pid, &got, address, sizeof got) != 0 || got != value)
      continue;
    v.channel(space::p2p, q, st.rank).single_copy.store(1, std::memory_order_relaxed);
  }
}

inline void shm_await_world(shm_state& st, clock::time_point deadline) {
  const int rank = st.rank;
  const int size = st.size;
  const std::string& name = st.name;
  auto& v = st.view;
  auto& me = v.block(rank);
  if (shm_single_copy_enabled()) {
    me.probe_address.store(reinterpret_cast<std::uintptr_t>(&shm_probe_word()),
                           std::memory_order_relaxed);
    me.probe_value.store(shm_probe_word(), std::memory_order_relaxed);
  }
  me.pid.store(static_cast<std::int32_t>(::getpid()), std::memory_order_relaxed);
  me.state.store(static_cast<std::uint32_t>(shm_rank_state::attached), std::memory_order_release);
  if (v.header().attached.fetch_add(1, std::memory_order_acq_rel) + 1 ==
      static_cast<std::uint32_t>(size))
    ::shm_unlink(name.c_str());  // the world is complete: nothing needs the name any more
  for (int q = 0; q < size; ++q) v.block(q).bell.ring(true);

  auto all_attached = [&] {
    return v.header().attached.load(std::memory_order_acquire) == static_cast<std::uint32_t>(size);
  };
  // Rank 0 created the segment: its name carries rank 0's pid, which this rank watches too
  // before rank 0 attaches (rank 0 may die between publishing the name and attaching; the
  // ranks that had the name would otherwise wait for the deadline and blame nobody).
  const auto creator = shm_parse_name(name);
  const pid_t creator_pid =
      creator && creator->pid_ns == pid_namespace() ? static_cast<pid_t>(creator->pid) : pid_t{0};
  auto check = [&] {
    for (int q = 0; q < size; ++q) {
      std::int32_t pid = v.block(q).pid.load(std::memory_order_relaxed);
      if (q == 0 && pid <= 0) pid = creator_pid;
      if (q != rank && pid > 0 && ::kill(pid, 0) != 0 && errno == ESRCH) {
        ::shm_unlink(name.c_str());  // the world can never form: nobody else removes the name
        throw error(errc::peer_lost, "", 0, rank, q,
                    "tutti::shm: rank " + std::to_string(q) + " died while the world was forming");
      }
    }
    if (clock::now() < deadline) return;
    ::shm_unlink(name.c_str());
    std::string missing;
    for (int q = 0; q < size; ++q)
      if (v.block(q).state.load(std::memory_order_acquire) == 0)
        missing += (missing.empty() ? "" : ", ") + std::to_string(q);
    throw error(errc::timeout, "", 0, rank, -1,
                "tutti::shm: ranks " + missing + " did not attach to the segment in time");
  };
  if (!all_attached()) wait_on(me.bell, true, all_attached, check, st.tuning);
  std::vector<std::int32_t> pids(static_cast<std::size_t>(size));
  for (int q = 0; q < size; ++q)
    if (q != rank)
      pids[static_cast<std::size_t>(q)] = v.block(q).pid.load(std::memory_order_relaxed);
  st.watch = shm_watch(std::move(pids));
  shm_probe_single_copy(st);
}

/// Creates (rank 0) or attaches to the segment and waits until all `size` ranks attached,
/// then unlinks its name: tutti::shm::join.
template <class Publish, class Fetch>
[[nodiscard]] std::shared_ptr<shm_state> shm_join(int rank, int size, Publish&& publish,
                                                  Fetch&& fetch, const options& opts) {
  if (size < 1 || rank < 0 || rank >= size)
    throw error(errc::invalid_argument, "", 0, rank, -1,
                "tutti::shm: rank " + std::to_string(rank) + " is not in a world of " +
                    std::to_string(size));
  const auto deadline = clock::now() + opts.timeout;
  std::string name;
  shm_mapping map;
  shm_layout layout;
  if (rank == 0) {
    (void)shm_sweep_orphans();  // segments of earlier worlds whose rank 0 died early
    layout = shm_default_layout(size);
    name = shm_random_name(rank);
    map = shm_create(name, layout);
    try {
      publish(name);
    } catch (...) {
      ::shm_unlink(name.c_str());
      throw;
    }
  } else {
    try {
      name = fetch();
    } catch (...) {
      // Rank 0 may have died after creating the segment, before publishing its name: nobody
      // can name it now, so remove every segment whose creator is gone.
      (void)shm_sweep_orphans();
      throw;
    }
    std::tie(map, layout) = shm_attach(name, rank, size);
  }
  auto st = std::make_shared<shm_state>(std::move(map), layout, rank, size);
  st->name = name;
  shm_await_world(*st, deadline);
  return st;
}

}  // namespace tutti::inline v0::detail
