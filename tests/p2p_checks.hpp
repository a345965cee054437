#pragma once
// Checks for non-blocking point-to-point (communicator::isend, irecv, batch) and, through
// object_checks.hpp, payloads of a size only the sender knows, shared by test_p2p.cpp (inproc,
// shm) and test_gloo_p2p.cpp. Every payload is a function of (sender,
// receiver, tag, index), so a message that lands in the wrong buffer, out of order or short
// gives wrong numbers. Each check returns "" or what went wrong on this rank.

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <doctest/doctest.h>

#include <tutti/communicator.hpp>
#include <tutti/core/error.hpp>
#include <tutti/core/ops.hpp>
#include <tutti/work.hpp>

#include "fork_ranks.hpp"
#include "object_checks.hpp"

namespace p2p_checks {

/// Element i of the message `from` sends `to` with `tag`.
inline std::int64_t value(int from, int to, std::uint64_t tag, std::size_t i) {
  return (static_cast<std::int64_t>(from) * 1'000'003 + to * 10'007 +
          static_cast<std::int64_t>(tag) * 101) *
             1'000'000 +
         static_cast<std::int64_t>(i);
}

inline std::vector<std::int64_t> payload(int from, int to, std::uint64_t tag, std::size_t n) {
  std::vector<std::int64_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = value(from, to, tag, i);
  return v;
}

inline std::string compare(const std::vector<std::int64_t>& got, int from, int to,
                           std::uint64_t tag, const char* what) {
  for (std::size_t i = 0; i < got.size(); ++i)
    if (got[i] != value(from, to, tag, i))
      return std::string(what) + ": rank " + std::to_string(to) + " from " + std::to_string(from) +
             " tag " + std::to_string(tag) + " element " + std::to_string(i) + " is " +
             std::to_string(got[i]) + ", expected " + std::to_string(value(from, to, tag, i));
  return {};
}

/// A ring where every rank posts its receive from the left before its send to the right, and
/// then waits for the receive first: blocking calls in this order deadlock once a message does
/// not fit the transport's buffers (`n` elements: pass a large n). Then the same with the send
/// waited first.
template <class Comm>
std::string ring(Comm& comm, std::size_t n) {
  const int p = comm.size();
  const int r = comm.rank();
  if (p < 2) return {};
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  for (const bool recv_first : {true, false}) {
    const std::uint64_t tag = recv_first ? 3 : 4;
    std::vector<std::int64_t> in(n, -1);
    const auto out = payload(r, right, tag, n);
    tutti::work rw = comm.irecv(std::span<std::int64_t>(in), left, tag);
    tutti::work sw = comm.isend(std::span<const std::int64_t>(out), right, tag);
    if (recv_first) {
      rw.wait();
      sw.wait();
    } else {
      sw.wait();
      rw.wait();
    }
    if (auto bad = compare(in, left, r, tag, "ring"); !bad.empty()) return bad;
  }
  return {};
}

/// Rank 0 sends tags 1, 2, 3 in that order; rank 1 posts receives for 3, 1, 2 and must get
/// each tag's own payload. Then two messages on one tag arrive in posting order.
template <class Comm>
std::string tags_out_of_order(Comm& comm) {
  if (comm.size() < 2 || comm.rank() > 1) return {};
  const std::size_t n = 1000;
  if (comm.rank() == 0) {
    const auto a = payload(0, 1, 1, n), b = payload(0, 1, 2, n), c = payload(0, 1, 3, n);
    auto wa = comm.isend(std::span<const std::int64_t>(a), 1, 1);
    auto wb = comm.isend(std::span<const std::int64_t>(b), 1, 2);
    auto wc = comm.isend(std::span<const std::int64_t>(c), 1, 3);
    wc.wait();
    wa.wait();
    wb.wait();
    const auto first = payload(0, 1, 7, n), second = payload(0, 1, 8, n);
    auto w1 = comm.isend(std::span<const std::int64_t>(first), 1, 9);
    auto w2 = comm.isend(std::span<const std::int64_t>(second), 1, 9);
    w2.wait();
    w1.wait();
    return {};
  }
  std::vector<std::int64_t> a(n), b(n), c(n);
  auto wc = comm.irecv(std::span<std::int64_t>(c), 0, 3);
  auto wa = comm.irecv(std::span<std::int64_t>(a), 0, 1);
  auto wb = comm.irecv(std::span<std::int64_t>(b), 0, 2);
  wb.wait();
  wa.wait();
  wc.wait();
  for (auto bad :
       {compare(a, 0, 1, 1, "tag 1"), compare(b, 0, 1, 2, "tag 2"), compare(c, 0, 1, 3, "tag 3")})
    if (!bad.empty()) return bad;
  std::vector<std::int64_t> first(n), second(n);
  auto w1 = comm.irecv(std::span<std::int64_t>(first), 0, 9);
  auto w2 = comm.irecv(std::span<std::int64_t>(second), 0, 9);
  w2.wait();
  w1.wait();
  if (auto bad = compare(first, 0, 1, 7, "first on tag 9"); !bad.empty()) return bad;
  return compare(second, 0, 1, 8, "second on tag 9");
}

/// Byte messages of every size from 0 to 40 (shm carries up to 32 inside a frame's header),
/// rank 0 to rank 1, each on its own tag: first into receives posted before anything is sent,
/// then sent before any receive is posted (buffered by the receiver) and received in reverse.
template <class Comm>
std::string small_sizes(Comm& comm) {
  if (comm.size() < 2 || comm.rank() > 1) return {};
  constexpr std::size_t largest = 40;
  const auto byte = [](std::size_t n, std::size_t i, bool late) {
    return static_cast<std::uint8_t>(n * 31 + i * 7 + (late ? 101 : 3));
  };
  std::uint8_t go = 1;
  for (const bool late : {false, true}) {
    const std::uint64_t sync = 100;
    if (comm.rank() == 0) {
      std::vector<std::vector<std::uint8_t>> out(largest + 1);
      std::vector<tutti::work> ws;
      if (!late) comm.recv(std::span<std::uint8_t>(&go, 1), 1, sync);
      for (std::size_t n = 0; n <= largest; ++n) {
        for (std::size_t i = 0; i < n; ++i) out[n].push_back(byte(n, i, late));
        ws.push_back(comm.isend(std::span<const std::uint8_t>(out[n]), 1, n));
      }
      if (late) comm.send(std::span<const std::uint8_t>(&go, 1), 1, sync);
      for (auto& w : ws) w.wait();
      continue;
    }
    std::vector<std::vector<std::uint8_t>> in(largest + 1);
    std::vector<tutti::work> ws(largest + 1);
    if (late) comm.recv(std::span<std::uint8_t>(&go, 1), 0, sync);  // after every message
    for (std::size_t k = 0; k <= largest; ++k) {
      const std::size_t n = late ? largest - k : k;
      in[n].assign(n, 0);
      ws[n] = comm.irecv(std::span<std::uint8_t>(in[n]), 0, n);
    }
    if (!late) comm.send(std::span<const std::uint8_t>(&go, 1), 0, sync);
    for (std::size_t n = 0; n <= largest; ++n) {
      ws[n].wait();
      for (std::size_t i = 0; i < n; ++i)
        if (in[n][i] != byte(n, i, late))
          return std::string("small sizes (") + (late ? "buffered" : "posted") +
                 "): " + std::to_string(n) + "-byte message, byte " + std::to_string(i) + " is " +
                 std::to_string(in[n][i]) + ", expected " + std::to_string(byte(n, i, late));
    }
  }
  return {};
}

/// Messages of 256 KiB and more, rank 0 to rank 1, sizes at and around shm's 128 KiB chunks
/// (which the receiver and a waiting sender copy between them), in three arrangements: the
/// sender waits at once (it copies chunks too); the sender makes no call for 30 ms after
/// sending (the receiver copies every chunk, unless it is slower than that); the receives are
/// posted 20 ms after the messages were sent, in reverse order (all but the last buffered).
/// Every element is checked.
template <class Comm>
std::string large_single_copies(Comm& comm) {
  if (comm.size() < 2 || comm.rank() > 1) return {};
  constexpr std::size_t chunk = (std::size_t{128} << 10) / sizeof(std::int64_t);
  const std::vector<std::size_t> sizes{2 * chunk - 1, 2 * chunk, 2 * chunk + 1, 5 * chunk + 3};
  const std::uint64_t sync = 200;
  std::uint8_t go = 1;
  for (int arrangement = 0; arrangement < 3; ++arrangement) {
    const std::uint64_t base = 210 + 10 * static_cast<std::uint64_t>(arrangement);
    if (comm.rank() == 0) {
      std::vector<std::vector<std::int64_t>> out;
      std::vector<tutti::work> ws;
      for (std::size_t k = 0; k < sizes.size(); ++k)
        out.push_back(payload(0, 1, base + k, sizes[k]));
      if (arrangement == 0) comm.recv(std::span<std::uint8_t>(&go, 1), 1, sync);
      for (std::size_t k = 0; k < sizes.size(); ++k)
        ws.push_back(comm.isend(std::span<const std::int64_t>(out[k]), 1, base + k));
      // Makes no call for a while, so the receiver copies alone (as long as it takes).
      if (arrangement == 1) std::this_thread::sleep_for(std::chrono::milliseconds(30));
      for (auto& w : ws) w.wait();
      continue;
    }
    std::vector<std::vector<std::int64_t>> in(sizes.size());
    std::vector<tutti::work> ws(sizes.size());
    for (std::size_t k = 0; k < sizes.size(); ++k) in[k].assign(sizes[k], -1);
    const auto post = [&](std::size_t k) {
      ws[k] = comm.irecv(std::span<std::int64_t>(in[k]), 0, base + k);
    };
    if (arrangement == 2) {
      // Every message arrived (as far as its frame) before any receive: the sender's progress
      // is not needed for that, so wait a little for the frames, then post in reverse.
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      for (std::size_t k = sizes.size(); k-- > 0;) post(k);
    } else {
      for (std::size_t k = 0; k < sizes.size(); ++k) post(k);
      if (arrangement == 0) comm.send(std::span<const std::uint8_t>(&go, 1), 0, sync);
    }
    for (auto& w : ws) w.wait();
    for (std::size_t k = 0; k < sizes.size(); ++k)
      if (auto bad = compare(in[k], 0, 1, base + k, "large single copies"); !bad.empty())
        return bad + " (arrangement " + std::to_string(arrangement) + ", " +
               std::to_string(sizes[k]) + " elements)";
  }
  return {};
}

/// One rank's buffers of an all-to-all with a tag: the payload for each peer, and a receive
/// buffer of the size each peer sends (`size_of(from, to)`), poisoned.
struct exchange {
  std::vector<std::vector<std::int64_t>> out, in;

  template <class SizeOf>
  exchange(int p, int r, std::uint64_t tag, SizeOf&& size_of)
      : out(static_cast<std::size_t>(p)), in(static_cast<std::size_t>(p)) {
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      out[static_cast<std::size_t>(q)] = payload(r, q, tag, size_of(r, q));
      in[static_cast<std::size_t>(q)].assign(size_of(q, r), -1);
    }
  }
};

/// The exchange as one batch: even ranks post to their peers upwards, odd ones downwards, and
/// receives and sends interleave differently from peer to peer.
template <class Comm>
std::string exchange_in_batch(Comm& comm, exchange& x, std::uint64_t tag) {
  const int p = comm.size(), r = comm.rank();
  auto b = comm.batch();
  for (int k = 1; k < p; ++k) {
    const int q = (r + k * (r % 2 == 0 ? 1 : p - 1)) % p;  // even ranks up, odd down
    const auto qi = static_cast<std::size_t>(q);
    if ((k + r) % 2 == 0) {
      b.recv(std::span<std::int64_t>(x.in[qi]), q, tag);
      b.send(std::span<const std::int64_t>(x.out[qi]), q, tag);
    } else {
      b.send(std::span<const std::int64_t>(x.out[qi]), q, tag);
      b.recv(std::span<std::int64_t>(x.in[qi]), q, tag);
    }
  }
  if (b.size() != 2 * static_cast<std::size_t>(p - 1)) return "batch size";
  b.run();
  return {};
}

/// The exchange as separate isend/irecv: the first half of them polled with done(), the rest
/// waited with wait_for.
template <class Comm>
std::string exchange_one_by_one(Comm& comm, exchange& x, std::uint64_t tag) {
  const int p = comm.size(), r = comm.rank();
  std::vector<tutti::work> ws;
  for (int k = p - 1; k >= 1; --k) {
    const int q = (r + k) % p;
    const auto qi = static_cast<std::size_t>(q);
    ws.push_back(comm.isend(std::span<const std::int64_t>(x.out[qi]), q, tag));
    ws.push_back(comm.irecv(std::span<std::int64_t>(x.in[qi]), q, tag));
  }
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  for (std::size_t i = 0; i < ws.size(); ++i) {
    if (i < ws.size() / 2) {
      while (!ws[i].done())
        if (std::chrono::steady_clock::now() > give_up) return "done() never became true";
      ws[i].wait();  // rethrows a failure
    } else {
      while (!ws[i].wait_for(std::chrono::milliseconds(1)))
        if (std::chrono::steady_clock::now() > give_up) return "wait_for never returned true";
    }
  }
  return {};
}

/// An all-to-all as one batch per rank: every rank sends to and receives from every other,
/// each rank posting its messages in its own order (rotated, receives and sends interleaved
/// differently), sizes from 0 to large. Then the same as separate isend/irecv, polled with
/// done() and wait_for instead of wait.
template <class Comm>
std::string batch_all_to_all(Comm& comm, std::size_t large) {
  const int p = comm.size();
  const int r = comm.rank();
  if (p < 2) return {};
  const auto size_of = [&](int from, int to) -> std::size_t {
    return (from * 7 + to * 3) % 4 == 0 ? 0 : ((from + to) % 2 == 0 ? large : 17);
  };
  for (int round = 0; round < 2; ++round) {
    const std::uint64_t tag = 20 + static_cast<std::uint64_t>(round);
    exchange x(p, r, tag, size_of);
    if (std::string bad =
            round == 0 ? exchange_in_batch(comm, x, tag) : exchange_one_by_one(comm, x, tag);
        !bad.empty())
      return bad;
    for (int q = 0; q < p; ++q) {
      if (q == r) continue;
      if (auto bad = compare(x.in[static_cast<std::size_t>(q)], q, r, tag, "all-to-all");
          !bad.empty())
        return bad + (round == 0 ? " (batch)" : " (isend/irecv)");
    }
  }
  return {};
}

/// Receives posted before collectives and sent after them: the collectives run while the
/// receives are pending, and the messages still land.
template <class Comm>
std::string across_collectives(Comm& comm) {
  const int p = comm.size();
  const int r = comm.rank();
  if (p < 2) return {};
  const int right = (r + 1) % p;
  const int left = (r + p - 1) % p;
  const std::size_t n = 5000;
  std::vector<std::int64_t> in(n, -1);
  auto rw = comm.irecv(std::span<std::int64_t>(in), left, 30);
  std::vector<std::int64_t> v{r + 1};
  comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
  if (v[0] != static_cast<std::int64_t>(p) * (p + 1) / 2) return "all_reduce beside an irecv";
  auto aw = comm.all_reduce_async(std::span<std::int64_t>(v), tutti::max);
  const auto out = payload(r, right, 30, n);
  comm.send(std::span<const std::int64_t>(out), right, 30);  // waits for the async one first
  aw.wait();
  rw.wait();
  if (v[0] != static_cast<std::int64_t>(p) * (p + 1) / 2) return "all_reduce_async";
  return compare(in, left, r, 30, "irecv across collectives");
}

/// Arguments refused at once, on the rank that passed them: no peer is waited for.
template <class Comm>
std::string bad_arguments(Comm& comm) {
  std::vector<int> v(4);
  for (const int peer : {-1, comm.size(), comm.rank()}) {
    try {
      (void)comm.isend(std::span<const int>(v), peer);
      return "isend to rank " + std::to_string(peer) + " did not raise";
    } catch (const tutti::error& e) {
      if (e.code() != tutti::errc::invalid_argument)
        return std::string("isend to a bad rank raised ") + e.what();
    }
    try {
      (void)comm.batch().recv(std::span<int>(v), peer).start();
      return "batch recv from rank " + std::to_string(peer) + " did not raise";
    } catch (const tutti::error& e) {
      if (e.code() != tutti::errc::invalid_argument)
        return std::string("batch recv from a bad rank raised ") + e.what();
    }
  }
  if (!comm.batch().start().done()) return "an empty batch is not done";
  return {};
}

/// Rank 1 of 2 is killed after a barrier while rank 0 waits for its message (by polling done()
/// when `poll`, else wait()): rank 0 must raise peer_lost naming rank 1 well before the 30 s
/// timeout. `join(rank, size, options)` makes each rank's communicator. Run inside a test case.
template <class Join>
void check_killed_peer(Join&& join, bool poll) {
  tutti::options opts;
  opts.timeout = std::chrono::seconds(30);
  const auto status = fork_ranks::run_ranks(2, [&](int r) {
    auto comm = join(r, 2, opts);
    comm.barrier();
    if (r == 1) ::kill(::getpid(), SIGKILL);
    std::vector<int> v(16);
    const auto start = std::chrono::steady_clock::now();
    try {
      auto w = comm.irecv(std::span<int>(v), 1);
      while (poll && !w.done()) {
      }
      w.wait();
      return 2;
    } catch (const tutti::error& e) {
      if (std::chrono::steady_clock::now() - start >= opts.timeout) return 3;  // not the death
      if (e.code() != tutti::errc::peer_lost) std::fprintf(stderr, "%s\n", e.what());
      return e.code() == tutti::errc::peer_lost && e.peer() == 1 ? 0 : 4;
    }
  });
  CHECK(fork_ranks::exited_with(status[0], 0));
  CHECK(WIFSIGNALED(status[1]));
}

/// Every check above, in an order every rank follows.
template <class Comm>
std::string all_checks(Comm& comm, std::size_t large) {
  // One after another, stopping at the first failure: a rank that goes on into the next check
  // after leaving one early is out of step with the others, which then wait for their deadline
  // instead of learning at once that this rank returned.
  std::string bad = bad_arguments(comm);
  if (bad.empty()) bad = ring(comm, large);
  if (bad.empty()) bad = tags_out_of_order(comm);
  if (bad.empty()) bad = small_sizes(comm);
  if (bad.empty()) bad = large_single_copies(comm);
  if (bad.empty()) bad = batch_all_to_all(comm, large);
  if (bad.empty()) bad = across_collectives(comm);
  if (bad.empty()) bad = objects(comm);
  return bad;
}

}  // namespace p2p_checks
