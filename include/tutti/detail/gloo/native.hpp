#pragma once
/// \file
/// Gloo's own collectives (tutti::native on tutti::gloo), run by Gloo on tutti's connections:
/// each with the call's tag (gloo_native_tag) and deadline, and Gloo's failures translated into
/// tutti's (a timeout names the rank that stopped, a closed connection the rank that died).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/alltoall.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include "tutti/core/error.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/gloo/failure.hpp"
#include "tutti/detail/gloo/liveness.hpp"
#include "tutti/detail/gloo/objects.hpp"
#include "tutti/detail/gloo/state.hpp"
#include "tutti/detail/gloo/waker.hpp"
#include "tutti/detail/gloo_support.hpp"
#include "tutti/detail/wait.hpp"

namespace tutti::inline v0::detail {

[[nodiscard]] inline ::gloo::AllreduceOptions::Func gloo_reduce_fn(const call& c) {
  const reducer red = c.red;
  return [red](void* d, const void* a, const void* b, std::size_t n) { red(d, a, b, n); };
}

inline void gloo_copy_if_distinct(std::byte* d, const std::byte* s, std::size_t n) noexcept {
  if (d != s && n != 0) std::memmove(d, s, n);
}

/// Runs a Gloo collective with a type of the call's element size (Gloo sizes its segments
/// in elements); translates Gloo's failures.
template <class F>
void gloo_native_run(gloo_state& st, const call& c, clock::time_point deadline, F&& f) {
  if (st.aborted) gloo_raise_aborted(st, c, -1);
  struct b16 {
    std::byte b[16];
  };
  try {
    const sigpipe_guard no_sigpipe;
    const gloo_waker::scope watching((++st.native_call, st.waker));
    switch (c.elem_size) {
      case 1:
        f(std::uint8_t{});
        break;
      case 2:
        f(std::uint16_t{});
        break;
      case 4:
        f(std::uint32_t{});
        break;
      case 8:
        f(std::uint64_t{});
        break;
      default:
        f(b16{});
        break;
    }
  } catch (const error&) {
    throw;
  } catch (const std::exception& e) {
    const std::string what = e.what();
    if (clock::now() >= deadline) {
      if (auto rec = gloo_recorded_abort(st); rec && rec->writer != st.rank)
        gloo_raise_recorded(st, c, *rec);
      const int stopped = gloo_stopped_peer(st);
      const int culprit = stopped >= 0 ? stopped : gloo_native_stalled(st);
      const std::string text =
          "timed out in Gloo's " + c.name_str() + ": " + what +
          (stopped >= 0
               ? "; rank " + std::to_string(culprit) + " is stopped (SIGSTOP or a debugger)"
           : culprit >= 0
               ? "; rank " + std::to_string(culprit) + " made no progress (busy outside tutti?)"
               : std::string());
      gloo_abort_world(
          st, {errc::timeout, st.rank, culprit, "rank " + std::to_string(st.rank) + " " + text});
      throw error(errc::timeout, c.name_str(), c.seq, st.rank, culprit, text);
    }
    gloo_lost(st, c, gloo_dead_peer(st), what);
  }
}

inline void gloo_native_barrier(gloo_state& st, const call& c, clock::time_point deadline) {
  if (st.size == 1) return;
  gloo_native_run(st, c, deadline, [&](auto) {
    ::gloo::BarrierOptions o(st.ctx);
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::barrier(o);
  });
}

/// Gloo's collectives exchange nothing at count 0, so a count-0 call meets the other ranks in
/// a barrier on the call's tag instead (which hashes the sequence number, collective, type,
/// op, root and count): a rank whose call disagrees waits on another tag and every rank
/// raises at the deadline, as for a disagreement at any other count, instead of returning as
/// if all had agreed. True when it ran (count 0).
inline bool gloo_empty_call(gloo_state& st, const call& c, std::size_t count,
                            clock::time_point deadline) {
  if (count != 0) return false;
  gloo_native_barrier(st, c, deadline);
  return true;
}

inline void gloo_native_all_reduce(gloo_state& st, const call& c, const std::byte* in,
                                   std::byte* out, std::size_t count, clock::time_point deadline) {
  gloo_copy_if_distinct(out, in, count * c.elem_size);
  if (st.size == 1 || gloo_empty_call(st, c, count, deadline)) return;
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::AllreduceOptions o(st.ctx);
    o.setOutput(reinterpret_cast<T*>(out), count);
    o.setReduceFunction(gloo_reduce_fn(c));
    o.setAlgorithm(::gloo::AllreduceOptions::Algorithm::RING);
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::allreduce(o);
  });
}

inline void gloo_native_reduce(gloo_state& st, const call& c, const std::byte* in, std::byte* out,
                               std::size_t count, int root, clock::time_point deadline) {
  if (st.rank == root) gloo_copy_if_distinct(out, in, count * c.elem_size);
  if (st.size == 1 || gloo_empty_call(st, c, count, deadline)) return;
  // Gloo's reduce writes scratch into the output of every rank: non-roots get their own.
  std::vector<std::byte> tmp(st.rank == root ? 0 : count * c.elem_size);
  if (st.rank != root) std::memcpy(tmp.data(), in, tmp.size());
  std::byte* buf = st.rank == root ? out : tmp.data();
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::ReduceOptions o(st.ctx);
    o.setOutput(reinterpret_cast<T*>(buf), count);
    o.setRoot(root);
    o.setReduceFunction(gloo_reduce_fn(c));
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::reduce(o);
  });
}

inline void gloo_native_broadcast(gloo_state& st, const call& c, std::byte* buf, std::size_t count,
                                  int root, clock::time_point deadline) {
  if (st.size == 1 || gloo_empty_call(st, c, count, deadline)) return;
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::BroadcastOptions o(st.ctx);
    o.setOutput(reinterpret_cast<T*>(buf), count);
    o.setRoot(root);
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::broadcast(o);
  });
}

inline void gloo_native_all_gather(gloo_state& st, const call& c, const std::byte* in,
                                   std::byte* out, std::size_t count, clock::time_point deadline) {
  const std::size_t bytes = count * c.elem_size;
  gloo_copy_if_distinct(out + static_cast<std::size_t>(st.rank) * bytes, in, bytes);
  if (st.size == 1 || gloo_empty_call(st, c, count, deadline)) return;
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::AllgatherOptions o(st.ctx);
    // Gloo reads this rank's block from the output when no input is set.
    o.setOutput(reinterpret_cast<T*>(out), count * static_cast<std::size_t>(st.size));
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::allgather(o);
  });
}

inline void gloo_native_gather(gloo_state& st, const call& c, const std::byte* in, std::byte* out,
                               std::size_t count, int root, clock::time_point deadline) {
  const std::size_t bytes = count * c.elem_size;
  if (st.rank == root)
    gloo_copy_if_distinct(out + static_cast<std::size_t>(root) * bytes, in, bytes);
  if (st.size == 1 || gloo_empty_call(st, c, count, deadline)) return;
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::GatherOptions o(st.ctx);
    o.setInput(const_cast<T*>(reinterpret_cast<const T*>(in)), count);
    if (st.rank == root)
      o.setOutput(reinterpret_cast<T*>(out), count * static_cast<std::size_t>(st.size));
    o.setRoot(root);
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::gather(o);
  });
}

inline void gloo_native_scatter(gloo_state& st, const call& c, const std::byte* in, std::byte* out,
                                std::size_t count, int root, clock::time_point deadline) {
  const std::size_t bytes = count * c.elem_size;
  if (st.rank == root)
    gloo_copy_if_distinct(out, in + static_cast<std::size_t>(root) * bytes, bytes);
  if (st.size == 1 || gloo_empty_call(st, c, count, deadline)) return;
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::ScatterOptions o(st.ctx);
    if (st.rank == root) {
      std::vector<T*> blocks;
      blocks.reserve(static_cast<std::size_t>(st.size));
      for (int q = 0; q < st.size; ++q)
        blocks.push_back(
            const_cast<T*>(reinterpret_cast<const T*>(in + static_cast<std::size_t>(q) * bytes)));
      o.setInputs(blocks, count);
    }
    o.setOutput(reinterpret_cast<T*>(out), count);
    o.setRoot(root);
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::scatter(o);
  });
}

inline void gloo_native_all_to_all(gloo_state& st, const call& c, const std::byte* in,
                                   std::byte* out, std::size_t count, clock::time_point deadline) {
  const std::size_t total = count * static_cast<std::size_t>(st.size);
  if (st.size == 1) {
    gloo_copy_if_distinct(out, in, total * c.elem_size);
    return;
  }
  if (gloo_empty_call(st, c, count, deadline)) return;
  // In place: Gloo reads its input while peers' blocks land in the output.
  std::vector<std::byte> tmp(in == out ? total * c.elem_size : 0);
  if (in == out) std::memcpy(tmp.data(), in, tmp.size());
  const std::byte* src = in == out ? tmp.data() : in;
  gloo_native_run(st, c, deadline, [&](auto tag) {
    using T = decltype(tag);
    ::gloo::AlltoallOptions o(st.ctx);
    o.setInput(const_cast<T*>(reinterpret_cast<const T*>(src)), total);
    o.setOutput(reinterpret_cast<T*>(out), total);
    o.setTag(gloo_native_tag(c));
    o.setTimeout(gloo_left(deadline));
    ::gloo::alltoall(o);
  });
}

}  // namespace tutti::inline v0::detail
