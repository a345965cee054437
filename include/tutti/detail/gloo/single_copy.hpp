#pragma once
/// \file
/// tutti::gloo's single copies (detail/cma.hpp): collective messages between ranks on one host
/// whose pairs passed the probe at bootstrap. The sender writes a descriptor into the
/// receiver's mailbox (detail::cma_inbox), the receiver reads the bytes straight out of the
/// sender's memory (reducing them, in cache-sized chunks, as it reads) and acknowledges in a
/// word of the sender's. Here: the probe, posting, moving descriptors, reading, and waiting.

#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/options.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/cma.hpp"
#include "tutti/detail/gloo/failure.hpp"
#include "tutti/detail/gloo/liveness.hpp"
#include "tutti/detail/gloo/message.hpp"
#include "tutti/detail/gloo/objects.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

/// The chunk a reducing single-copy receive reads and reduces at a time.
inline constexpr std::size_t gloo_single_copy_chunk = std::size_t{256} << 10;

/// Whether collective messages to and from `peer` travel as single copies: it runs on this host,
/// in this PID and network namespace, and each of the two can read the other's memory.
[[nodiscard]] inline bool gloo_single_copy(const gloo_state& st, int peer) noexcept {
  return peer >= 0 && static_cast<std::size_t>(peer) < st.cma_pid.size() &&
         st.cma_pid[static_cast<std::size_t>(peer)] != 0;
}

/// Whether a message in space `sp` to or from `peer` travels as a single copy.
[[nodiscard]] inline bool gloo_single_copy_to(const gloo_state& st, int peer, space sp) noexcept {
  return sp == space::collective && gloo_single_copy(st, peer);
}

/// This rank's single-copy offer (see gloo_setup_single_copy): its host identity, pid and the
/// address of a fresh random word at the head of its mailbox (made here); an empty one where
/// TUTTI_GLOO_CMA=0.
[[nodiscard]] inline cma_offer gloo_cma_offer(gloo_state& st) {
  cma_offer mine;
  if (!env_switch_on("TUTTI_GLOO_CMA")) return mine;
  mine.host = cma_host_identity();
  mine.pid = ::getpid();
  std::random_device rd;
  mine.value = ((std::uint64_t{rd()} << 32) ^ rd()) | 1;
  st.mailbox = cma_mailbox::make(st.size, mine.value);
  mine.address = reinterpret_cast<std::uintptr_t>(st.mailbox);
  return mine;
}

/// Reads the word `theirs` offers out of its process and writes it back as it was
/// (acknowledgements are writes; others may be reading the word): empty where both worked and
/// the word is the one offered, else why not.
[[nodiscard]] inline std::string gloo_cma_try(const cma_offer& theirs) {
  std::uint64_t got = 0;
  int err = cma_read(theirs.pid, &got, theirs.address, sizeof got);
  if (err == 0 && got == theirs.value) err = cma_write_word(theirs.pid, got, theirs.address);
  if (err != 0) return std::generic_category().message(err);
  return got == theirs.value ? std::string() : std::string("wrong word");
}

/// From every rank's list of the peers it could read (index = rank, '1' = readable; this
/// rank's is `lists[rank]`): single copies with each peer that could read this rank too
/// (st.cma_pid, from `pids`), and whether every pair of the world, and every pair inside each
/// host, has them (the same on every rank). Returns the peers, for TUTTI_DEBUG.
inline std::string gloo_cma_agree(gloo_state& st, const std::vector<std::string>& lists,
                                  const std::vector<pid_t>& pids) {
  const auto n = static_cast<std::size_t>(st.size);
  const auto me = static_cast<std::size_t>(st.rank);
  std::string with;
  for (std::size_t q = 0; q < n; ++q)
    if (q != me && lists[me][q] == '1' && lists[q].size() == n && lists[q][me] == '1') {
      st.cma_pid[q] = pids[q];
      with += " " + std::to_string(q);
    }
  // Whether both ranks of every pair that `counts` can read each other's memory.
  const auto every_pair = [&](auto counts) {
    for (std::size_t q = 0; q < n; ++q)
      for (std::size_t j = 0; j < n; ++j)
        if (j != q && counts(q, j) && (lists[q].size() != n || lists[q][j] != '1')) return false;
    return true;
  };
  st.single_copy_world = every_pair([](std::size_t, std::size_t) { return true; });
  st.single_copy_hosts = every_pair(
      [&](std::size_t q, std::size_t j) { return st.hosts.host_of[q] == st.hosts.host_of[j]; });
  return with;
}

/// The probe (detail/cma.hpp): every rank publishes its host identity, pid and a random
/// word's address; each reads the word of every peer on its host back, publishes which it
/// could read, and uses single copies with the peers that could read it too. TUTTI_GLOO_CMA=0
/// leaves this rank out (so every pair with it stays on TCP).
inline void gloo_setup_single_copy(gloo_state& st, clock::time_point deadline) {
  const auto n = static_cast<std::size_t>(st.size);
  st.cma_pid.assign(n, 0);
  if (st.size == 1) return;
  const cma_offer mine = gloo_cma_offer(st);
  const auto key = [&](const char* what, int q) { return st.prefix + what + std::to_string(q); };
  st.store->set_string(key("cma/", st.rank), mine.encode());
  std::vector<std::string> lists(n);
  std::string& readable = lists[static_cast<std::size_t>(st.rank)] = std::string(n, '0');
  std::vector<pid_t> pids(n, 0);
  st.cma_links.assign(n, {});
  std::string refused;
  for (int q = 0; q < st.size; ++q) {
    if (q == st.rank) continue;
    const auto theirs = cma_offer::decode(
        gloo_peer_value(*st.store, key("cma/", q), st.rank, q, deadline, "single-copy offer"));
    if (mine.host.empty() || !theirs || theirs->host != mine.host) continue;
    if (const std::string why = gloo_cma_try(*theirs); !why.empty()) {
      refused += " " + std::to_string(q) + " (" + why + ")";
      continue;
    }
    const auto i = static_cast<std::size_t>(q);
    readable[i] = '1';
    pids[i] = theirs->pid;
    st.cma_links[i].inbox = cma_mailbox::inbox_address(theirs->address, st.rank);
  }
  st.store->set_string(key("cma_ok/", st.rank), readable);
  // Every rank's list, so that every rank knows alike which pairs have single copies.
  for (int q = 0; q < st.size; ++q)
    if (q != st.rank)
      lists[static_cast<std::size_t>(q)] = gloo_peer_value(*st.store, key("cma_ok/", q), st.rank, q,
                                                           deadline, "single-copy answers");
  const std::string with = gloo_cma_agree(st, lists, pids);
  if (debug_info())
    std::fprintf(stderr, "tutti[gloo] rank %d/%d: single copies with ranks:%s%s%s\n", st.rank,
                 st.size, with.empty() ? " none" : with.c_str(),
                 refused.empty() ? "" : "; cannot read the memory of ranks", refused.c_str());
}

/// A process_vm_readv (or, `write`, process_vm_writev) with `peer` for `m` failed with `err`:
/// ESRCH (its process is gone) raises errc::peer_lost as `gloo_lost` does; anything else aborts
/// the world and raises errc::transport_failure: "rank <peer><what> (<call>: <reason>)".
[[noreturn]] inline void gloo_cma_failed(gloo_state& st, gloo_message& m, const call& c, int peer,
                                         int err, bool write, std::string_view what) {
  const std::string fn = write ? "process_vm_writev" : "process_vm_readv";
  m.forget();
  if (err == ESRCH) gloo_lost(st, c, peer, "its process is gone (" + fn + ": ESRCH)");
  const std::string text = "rank " + std::to_string(peer) + std::string(what) + " (" + fn + ": " +
                           std::generic_category().message(err) + ")";
  gloo_abort_world(st, {errc::transport_failure, st.rank, peer, text});
  throw error(errc::transport_failure, c.name_str(), c.seq, st.rank, peer, text);
}

/// Writes the descriptors waiting in the outbox of the link to `peer` into the peer's inbox,
/// as far as it has room: each entry's body, then (after a fence) its stamp. `m` and `c` name
/// the message and call a failure is raised for.
inline void gloo_cma_flush(gloo_state& st, int peer, gloo_message& m, const call& c) {
  auto& link = st.cma_links[static_cast<std::size_t>(peer)];
  const pid_t pid = st.cma_pid[static_cast<std::size_t>(peer)];
  const auto check = [&](int err, bool write) {
    if (err != 0)
      gloo_cma_failed(st, m, c, peer, err, write,
                      write ? "'s mailbox could not be written" : "'s mailbox could not be read");
  };
  constexpr auto cap = cma_inbox::capacity;
  while (!link.outbox.empty()) {
    if (link.sent - link.room_seen >= cap) {
      check(cma_read(pid, &link.room_seen, link.inbox, sizeof link.room_seen), false);
      if (link.sent - link.room_seen >= cap) return;
    }
    const std::uint64_t at = link.inbox + cma_inbox::entry_offset(link.sent);
    check(cma_transfer(pid, &link.outbox.front(), at, sizeof(cma_inbox::body), true), true);
#if !defined(__SANITIZE_THREAD__)  // (ThreadSanitizer rejects fences, and sees no other process)
    std::atomic_thread_fence(std::memory_order_seq_cst);  // the body before the stamp
#endif
    check(cma_write_word(pid, ++link.sent, at + cma_inbox::stamp_offset), true);
    link.outbox.pop_front();
  }
}

/// Moves single-copy descriptors on every link: takes those that peers wrote into this
/// rank's mailbox (each to the first posted receive of its slot, or kept until one is
/// posted), and writes those that waited for room into the peers' inboxes. `m` and `c` name
/// the message and call a failure is raised for.
inline void gloo_cma_progress(gloo_state& st, gloo_message& m, const call& c) {
  for (std::size_t q = 0; q < st.cma_links.size(); ++q) {
    if (st.cma_pid[q] == 0) continue;
    auto& link = st.cma_links[q];
    auto& box = st.mailbox[q + 1];
    for (;;) {
      auto& e = box.entries[link.taken % cma_inbox::capacity];
      if (e.stamp.load(std::memory_order_acquire) != link.taken + 1) break;
      const cma_inbox::body got{e.slot, e.d};
      box.taken.store(++link.taken, std::memory_order_release);
      const auto it = std::find_if(link.posted.begin(), link.posted.end(),
                                   [&](const cma_message* p) { return p->slot == got.slot; });
      if (it == link.posted.end()) {
        link.arrived.push_back(got);
      } else {
        (*it)->d = got.d;
        (*it)->arrived = true;
        link.posted.erase(it);
      }
    }
    if (!link.outbox.empty()) gloo_cma_flush(st, static_cast<int>(q), m, c);
  }
}

/// Posts a single-copy message. A send takes a fresh acknowledgement word and writes its
/// descriptor into the peer's inbox (or, while that is full, into the link's outbox); a
/// receive claims the first descriptor of its slot that arrived unclaimed, or waits for one
/// among the link's posted receives (gloo_cma_progress).
[[nodiscard]] inline gloo_message gloo_post_single_copy(const std::shared_ptr<gloo_state>& s,
                                                        int peer, std::byte* p, std::size_t bytes,
                                                        const call& c, std::uint64_t tag,
                                                        bool is_send) {
  auto& link = s->cma_links[static_cast<std::size_t>(peer)];
  gloo_message m;
  m.s = s;
  m.peer = peer;
  m.is_send = is_send;
  m.total = bytes;
  m.data = p;
  m.msg = std::make_unique<cma_message>();
  m.msg->slot = gloo_slot(c, space::collective, tag, bytes);
  m.cma_open = true;
  if (is_send) {
    const auto [word, value] = cma_ack_words::instance().take();
    m.ack = word;
    m.msg->d = {reinterpret_cast<std::uintptr_t>(p), bytes, reinterpret_cast<std::uintptr_t>(word),
                value};
    link.outbox.push_back({m.msg->slot, m.msg->d});
    gloo_cma_flush(*s, peer, m, c);
  } else {
    const auto it = std::find_if(link.arrived.begin(), link.arrived.end(),
                                 [&](const auto& got) { return got.slot == m.msg->slot; });
    if (it == link.arrived.end()) {
      link.posted.push_back(m.msg.get());
    } else {
      m.msg->d = it->d;
      m.msg->arrived = true;
      link.arrived.erase(it);
    }
  }
  return m;
}

/// A single-copy receive whose descriptor has arrived: reads the bytes out of the sender
/// (reducing them chunk by chunk into reduce_into, or straight into place), makes sure the
/// sender still holds the message, then acknowledges (writes the sender's word), which frees
/// the sender's buffer.
inline void gloo_read_single_copy(gloo_state& st, gloo_message& m, const call& c) {
  const cma_descriptor d = m.msg->d;
  const pid_t pid = st.cma_pid[static_cast<std::size_t>(m.peer)];
  auto fail = [&](errc code, const std::string& what) {
    m.forget();
    const std::string text = "rank " + std::to_string(m.peer) + " " + what;
    gloo_abort_world(st, {code, st.rank, m.peer, text});
    throw error(code, c.name_str(), c.seq, st.rank, m.peer, text);
  };
  if (d.bytes != m.total)
    fail(errc::mismatch, "sent " + std::to_string(d.bytes) + " bytes where this rank expected " +
                             std::to_string(m.total));
  // The sender marks a message it gives up on (unwinding from an error, typically a third
  // rank's death) before its buffer can be freed or reused. Then the cause is in the world's
  // abort record, which the sender wrote before giving up: not the sender.
  const auto gave_up = [&] {
    std::uint64_t state = 0;
    return cma_read(pid, &state, d.ack_address, sizeof state) == 0 &&
           state == cma_ack_words::abandoned;
  };
  const auto raise_gave_up = [&] {
    m.forget();
    if (auto rec = gloo_recorded_abort(st); rec && rec->writer != st.rank)
      gloo_raise_recorded(st, c, *rec);
    fail(errc::aborted, "gave up on its message while this rank read it");
  };
  auto check = [&](int err, bool write = false) {
    if (err == 0) return;
    // A read that fails because the sender freed its abandoned buffer (EFAULT) is that.
    if (!write && err != ESRCH && gave_up()) raise_gave_up();
    gloo_cma_failed(st, m, c, m.peer, err, write,
                    write ? " could not be written" : " could not be read");
  };
  if (m.reduce_into != nullptr) {
    const std::size_t chunk = std::min(m.staging.size(), gloo_single_copy_chunk);
    for (std::size_t at = 0; at < m.total; at += chunk) {
      const std::size_t n = std::min(chunk, m.total - at);
      check(cma_read(pid, m.staging.data(), d.address + at, n));
      c.red(m.reduce_into + at, m.reduce_into + at, m.staging.data(), n / c.elem_size);
    }
  } else {
    check(cma_read(pid, m.data, d.address, m.total));
  }
  // Not marked after the read: the bytes read were the message's.
  std::uint64_t state = 0;
  check(cma_read(pid, &state, d.ack_address, sizeof state));
  if (state == cma_ack_words::abandoned) raise_gave_up();
  check(cma_write_word(pid, d.ack_value, d.ack_address), true);
}

/// Waits until `done()`, moving every link's descriptors meanwhile (gloo_cma_progress). Spins
/// (briefly where this machine's ranks outnumber its CPUs), then yields for up to 1 ms, then
/// sleeps in naps of 20-200 µs; looks at the connection to `m`'s peer every millisecond (a
/// peer that dies is named at once), and polls for aborts, mismatches and the deadline every
/// 100 ms, as gloo_wait_buffer does. Yielding rather than napping at once matters most where
/// ranks outnumber CPUs: a yield hands the CPU to a rank that has work (often the peer) and
/// comes back as soon as none has, where a nap comes back 20 µs plus the timer's slack (50 µs)
/// later at best, once per step (bench/RESULTS.md, "every collective message on one host a
/// single copy; waits that yield"). After 1 ms the wait is for something slow (a peer still
/// computing): naps leave it the CPU.
template <class Done>
void gloo_cma_wait(Done done, gloo_state& st, gloo_message& m, const call& c,
                   clock::time_point deadline) {
  using namespace std::chrono_literals;
  const auto ready = [&] {
    gloo_cma_progress(st, m, c);
    return done();
  };
  const bool shared_cpus = st.oversubscribed;
  for (int i = 0, spins = shared_cpus ? 64 : 1024; i < spins; ++i) {
    if (ready()) return;
    cpu_relax();
  }
  const auto start = clock::now();
  auto next_poll = std::min(start + 100ms, deadline);
  auto next_look = start;
  std::chrono::microseconds nap = 20us;
  while (!ready()) {
    const auto now = clock::now();
    if (now - start < 1ms) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min<std::chrono::microseconds>(nap * 2, 200us);
    }
    if (st.aborted) gloo_raise_aborted(st, c, m.peer);
    if (now >= next_look || now >= next_poll) {
      // A peer that wrote its last word and exited closes its connection after the write:
      // seen closed, the wait may have been met meanwhile.
      if (gloo_connection_closed(st, m.peer)) {
        if (ready()) return;
        gloo_lost(st, m, c, "its connection closed");
      }
      next_look = now + 1ms;
    }
    if (now >= next_poll) {
      gloo_poll(st, c, deadline, m.peer, false);
      next_poll = std::min(clock::now() + 100ms, deadline);
    }
  }
}

/// Waits until the receiver of single-copy send `m` acknowledged it (gloo_read_single_copy
/// writes the word), as gloo_cma_wait waits.
inline void gloo_wait_acknowledged(gloo_state& st, gloo_message& m, const call& c,
                                   clock::time_point deadline) {
  const std::uint64_t want = m.msg->d.ack_value;
  gloo_cma_wait([&] { return m.ack->load(std::memory_order_acquire) == want; }, st, m, c, deadline);
}

/// Waits until the descriptor of single-copy receive `m` has arrived, as gloo_cma_wait waits.
inline void gloo_wait_arrival(gloo_state& st, gloo_message& m, const call& c,
                              clock::time_point deadline) {
  gloo_cma_wait([&] { return m.msg->arrived; }, st, m, c, deadline);
}

}  // namespace tutti::inline v0::detail
