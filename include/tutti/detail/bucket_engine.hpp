#pragma once
/// \file
/// tutti::bucketer's machinery (detail::bucket_engine): its gradients and buckets, their
/// layout and DDP's one-time rebuild, a synchronised iteration (the presence count, each
/// bucket's launch, the waits, averages and write-back) and the layout's log line.
/// tutti/adapters/bucketer.hpp is the API over it: registration, argument checks, mark_ready,
/// finish, join and no_sync.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "tutti/adapters/bucket_options.hpp"
#include "tutti/core/bfloat16.hpp"
#include "tutti/core/device_span.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/half.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/bucket_layout.hpp"
#include "tutti/detail/bucket_memory.hpp"
#include "tutti/transport/concepts.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0::detail {

/// The state and steps of a tutti::bucketer<Comm> (see there for the semantics). One thread.
template <class Comm>
struct bucket_engine {
  /// Buckets in GPU memory: the communicator's collectives take device memory (tutti::nccl).
  static constexpr bool on_device = !std::is_same_v<typename Comm::memory_space, host_memory>;
  using memory = bucket_memory<on_device>;

  bucket_engine(Comm& c, bucketer_options o) : comm(&c), opts(std::move(o)) {}
  bucket_engine(const bucket_engine&) = delete;
  bucket_engine& operator=(const bucket_engine&) = delete;
  /// Waits for buckets still in flight (each bounded by the communicator's deadline).
  ~bucket_engine() {
    for (bucket& b : buckets) {
      try {
        b.work.wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): finish() reports errors; a destructor cannot
      }
    }
  }

  /// With uneven_inputs: the ranks that train in this synchronised iteration, the divisor of
  /// its averages. Otherwise the world size.
  [[nodiscard]] int active_ranks() const noexcept {
    return opts.uneven_inputs ? active : comm->size();
  }

  /// Gradient i is final for this iteration (checked by the caller): copies it into its bucket
  /// and launches every bucket, in order, whose gradients are all ready.
  void ready(std::size_t i) {
    start_iteration();
    marked[i] = 1;
    if (!rebuilt) ready_order.push_back(i);
    slot& s = slots[i];
    if (s.external != nullptr)
      memory::copy(buckets[s.bucket].storage.data() + s.offset, s.external, s.count * s.elem,
                   stream);
    bucket& b = buckets[s.bucket];
    --b.pending;
    while (next < buckets.size() && buckets[next].pending == 0) launch(next++);
  }

  // The body of a synchronised iteration, once its presence is counted: starts the buckets not
  // yet started, waits, averages and writes back, then the one-time rebuild.
  void run_iteration() {
    if (slots.empty()) {
      reset_iteration();
      return;
    }
    while (next < buckets.size()) launch(next++);
    // Which gradients any rank used in the window: an OR across ranks, after the buckets.
    global_used = window_used;
    std::exception_ptr first;
    tutti::work used_work;
    if constexpr (!on_device) {
      try {
        // max of 0/1 bytes is their or, and NCCL has max (not bor) for the device path.
        used_work = comm->all_reduce_async(std::span<std::uint8_t>(global_used), tutti::max);
      } catch (...) {
        first = std::current_exception();
      }
    }
    std::exception_ptr bucket_error;
    for (bucket& b : buckets) {
      try {
        b.work.wait();
      } catch (...) {
        if (!bucket_error) bucket_error = std::current_exception();
      }
      if (b.error && !bucket_error) bucket_error = b.error;
    }
    try {
      if constexpr (on_device)
        reduce_host(std::span<std::uint8_t>(global_used), tutti::max);
      else
        used_work.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    if (bucket_error) first = bucket_error;  // the buckets' come first: they were issued first
    if (!first) {
      for (std::size_t k = 0; k < buckets.size(); ++k) complete(k);
    }
    reset_iteration();
    if (first) std::rethrow_exception(first);
    if (opts.rebuild_from_ready_order && !rebuilt) rebuild();
  }

  using slot = bucket_slot;
  using bucket = bucket_state<on_device>;

  [[noreturn]] static void invalid(const std::string& what) {
    throw error(errc::invalid_argument, "", 0, -1, -1, "bucketer: " + what);
  }
  void check_index(std::size_t i, const char* what) const {
    if (i >= slots.size())
      invalid(std::string(what) + "(" + std::to_string(i) + "): only " +
              std::to_string(slots.size()) + " gradients are registered");
  }

  std::size_t add_slot(dtype t, std::size_t elem, std::size_t count, void* external) {
    if (built)
      invalid(
          "add() after the bucket layout was fixed (by mark_ready, finish, gradient or "
          "layout): register every gradient first");
    slots.push_back(slot{t, elem, count, external});
    return slots.size() - 1;
  }

  [[nodiscard]] void* where(std::size_t i) const {
    const slot& s = slots[i];
    if (s.external != nullptr) return s.external;
    return buckets[s.bucket].storage.data() + s.offset;
  }

  // fn.template operator()<W>() with W the 16-bit type a compressed bucket travels as.
  template <class Fn>
  void with_wire_type(Fn&& fn) const {
    if (opts.compress == compression::fp16)
      fn.template operator()<half>();
    else
      fn.template operator()<bfloat16>();
  }

  [[nodiscard]] bool compressed(const bucket& b) const noexcept {
    return opts.compress != compression::none && !opts.all_reduce_hook &&
           (b.type == dtype::float32 || b.type == dtype::float64 || b.type == dtype::float128);
  }

  void build() {
    if (built) return;
    std::vector<std::size_t> order(slots.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
    lay_out(order, true, false);
    built = true;
    marked.assign(slots.size(), 0);
    window_used.assign(slots.size(), 0);
    reset_iteration();
  }

  // Computes buckets over `order` and moves every owned gradient's values into them.
  void lay_out(const std::vector<std::size_t>& order, bool sort, bool rebuilding) {
    std::vector<dtype> types;
    std::vector<std::size_t> bytes;
    for (const slot& s : slots) {
      types.push_back(s.type);
      bytes.push_back(s.count * s.elem);
    }
    const std::size_t limits[] = {opts.first_bucket_bytes, opts.bucket_bytes};
    const auto groups = detail::assign_buckets(order, types, bytes, limits, sort);
    std::vector<bucket> fresh(groups.size());
    std::vector<slot> placed = slots;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      bucket& b = fresh[k];
      b.type = slots[groups[k].front()].type;
      b.elem = slots[groups[k].front()].elem;
      b.grads = groups[k];
      for (const std::size_t g : groups[k]) {
        placed[g].bucket = k;
        placed[g].offset = b.bytes;
        b.bytes += bytes[g];
      }
      b.count = b.bytes / b.elem;
      b.storage = memory::allocate(b.bytes, stream);
      if (compressed(b)) b.wire = memory::allocate(b.count * 2, stream);
    }
    if (built) {
      for (std::size_t g = 0; g < slots.size(); ++g)
        if (slots[g].external == nullptr && bytes[g] != 0)
          memory::copy(fresh[placed[g].bucket].storage.data() + placed[g].offset,
                       buckets[slots[g].bucket].storage.data() + slots[g].offset, bytes[g], stream);
    }
    buckets = std::move(fresh);
    slots = std::move(placed);
    log_bucket_layout(comm->rank(), slots.size(), std::span<const bucket>(buckets), rebuilding);
  }

  // Opens a synchronised iteration (once): with uneven_inputs, counts the ranks that train in
  // it — a max all-reduce of one byte per rank, this rank's 1 unless it shadows.
  void start_iteration() {
    if (in_iteration) return;
    in_iteration = true;
    ready_order.clear();
    if (!opts.uneven_inputs) return;
    presence.assign(static_cast<std::size_t>(comm->size()), 0);
    if (!shadowing) presence[static_cast<std::size_t>(comm->rank())] = 1;
    try {
      reduce_host(std::span<std::uint8_t>(presence), tutti::max);
    } catch (...) {
      in_iteration = false;
      throw;
    }
    active = 0;
    for (std::size_t q = 0; q < presence.size(); ++q) {
      if (presence[q] == 0) continue;
      ++active;
      last_joiner = static_cast<int>(q);  // the highest rank present, in the last count > 0
    }
  }

  void reset_iteration() {
    in_iteration = false;
    next = 0;
    std::fill(marked.begin(), marked.end(), 0);
    std::fill(window_used.begin(), window_used.end(), 0);
    for (bucket& b : buckets) {
      b.pending = b.grads.size();
      b.work = tutti::work{};
      b.error = nullptr;
      b.divide_after = false;
    }
  }

  [[nodiscard]] bucket_view view(std::size_t k) {
    bucket& b = buckets[k];
    return bucket_view{k, buckets.size(), b.type, b.count, b.storage.data(), b.grads};
  }

  // Starts bucket k's all_reduce: fills unmarked gradients, runs the before-hook, divides or
  // compresses, and issues the async collective. Errors are kept for finish().
  void launch(std::size_t k) {
    bucket& b = buckets[k];
    try {
      for (const std::size_t g : b.grads) {
        if (marked[g] != 0) continue;
        const slot& s = slots[g];
        if (s.count == 0) continue;
        std::byte* dst = b.storage.data() + s.offset;
        if (shadowing || window_used[g] == 0) {
          memory::zero(dst, s.count * s.elem, stream);
        } else if (s.external != nullptr) {
          memory::copy(dst, s.external, s.count * s.elem, stream);
        }
      }
      if (opts.before_all_reduce) opts.before_all_reduce(view(k));
      if (opts.all_reduce_hook) {
        b.work = opts.all_reduce_hook(view(k));
        return;
      }
      const int p = active_ranks();
      detail::visit_sum_type(b.type, [&]<class T>() {
        T* data = reinterpret_cast<T*>(b.storage.data());
        if constexpr (on_device) {
          // On the GPU: NCCL averages itself (ncclAvg); no compression, no uneven inputs.
          (void)p;
          if (opts.average)
            b.work = comm->all_reduce_async(device_span<T>(data, b.count), tutti::avg);
          else
            b.work = comm->all_reduce_async(device_span<T>(data, b.count), tutti::sum);
        } else {
          launch_on_host<T>(b, data, p);
        }
      });
    } catch (...) {
      b.error = std::current_exception();
    }
  }

  // A host bucket's all-reduce: divided or compressed first where the options say so.
  template <class T>
  void launch_on_host(bucket& b, T* data, int p) {
    if constexpr (std::is_floating_point_v<T>) {
      if (compressed(b)) {
        if (opts.average) detail::divide_kernel<T>(data, b.count, p);
        with_wire_type([&]<class W>() {
          auto* w = reinterpret_cast<W*>(b.wire.data());
          detail::compress_into(w, data, b.count);
          b.work = comm->all_reduce_async(std::span<W>(w, b.count), tutti::sum);
        });
        return;
      }
    }
    const std::span<T> all(data, b.count);
    if (opts.average && detail::is_float16<T>) {
      detail::divide_kernel<T>(data, b.count, p);  // before the sum: no overflow
      b.work = comm->all_reduce_async(all, tutti::sum);
    } else if (opts.average && opts.uneven_inputs) {
      b.work = comm->all_reduce_async(all, tutti::sum);  // avg would divide by the world
      b.divide_after = true;
    } else if (opts.average) {
      b.work = comm->all_reduce_async(all, tutti::avg);
    } else {
      b.work = comm->all_reduce_async(all, tutti::sum);
    }
  }

  // A blocking all_reduce of host values: over a device communicator through a buffer in GPU
  // memory (the used-gradient map, the presence count, the ready order: a few bytes).
  template <class T, class Op>
  void reduce_host(std::span<T> v, Op op) {
    if constexpr (on_device) {
      auto d = memory::allocate(v.size_bytes(), stream);
      auto* dev = reinterpret_cast<T*>(d.data());
      memory::copy_now(dev, v.data(), v.size_bytes(), stream);
      comm->all_reduce(device_span<T>(dev, v.size()), op);
      memory::copy_now(v.data(), dev, v.size_bytes(), stream);
    } else {
      comm->all_reduce(v, op);
    }
  }

  // After bucket k's all_reduce: decompress, after-hook, write back the used gradients.
  void complete(std::size_t k) {
    bucket& b = buckets[k];
    if (compressed(b)) {
      detail::visit_sum_type(b.type, [&]<class T>() {
        if constexpr (std::is_floating_point_v<T>) {
          with_wire_type([&]<class W>() {
            detail::decompress_into(reinterpret_cast<T*>(b.storage.data()),
                                    reinterpret_cast<const W*>(b.wire.data()), b.count);
          });
        }
      });
    }
    if (b.divide_after)
      detail::visit_sum_type(b.type, [&]<class T>() {
        detail::divide_kernel<T>(reinterpret_cast<T*>(b.storage.data()), b.count, active);
      });
    if (opts.after_all_reduce) opts.after_all_reduce(view(k));
    if (shadowing) return;  // a joined rank's gradients are not written
    for (const std::size_t g : b.grads) {
      const slot& s = slots[g];
      if (s.external != nullptr && global_used[g] != 0)
        memory::copy(s.external, b.storage.data() + s.offset, s.count * s.elem, stream);
    }
  }

  // DDP's one-time rebuild: the ready order of the first synchronised iteration (gradients
  // never marked follow in reverse registration order), rank 0's on every rank.
  void rebuild() {
    std::vector<std::uint64_t> order = ready_order_then_rest(ready_order, slots.size());
    // Rank 0's order to every rank: an all_reduce (sum) of it and zeros, which every policy
    // implements (not all have broadcast).
    if (comm->rank() != 0) std::fill(order.begin(), order.end(), 0);
    reduce_host(std::span<std::uint64_t>(order), tutti::sum);
    std::vector<std::size_t> agreed(order.begin(), order.end());
    if (!is_order_of(agreed, slots.size()))
      invalid("rank 0's ready order is not a permutation of the gradients");
    lay_out(agreed, false, true);
    rebuilt = true;
    reset_iteration();
  }

  Comm* comm;
  void* stream = nullptr;  // on_device: the communicator's CUDA stream, which copies run on
  bucketer_options opts;
  std::vector<slot> slots;
  std::vector<bucket> buckets;
  std::vector<std::uint8_t> marked;       // this synchronised iteration
  std::vector<std::uint8_t> window_used;  // since the last synchronised finish
  std::vector<std::uint8_t> global_used;  // OR over ranks, from the last finish
  std::vector<std::size_t> ready_order;   // first synchronised iteration, for the rebuild
  std::size_t next = 0;                   // next bucket to launch
  int no_sync_depth = 0;
  std::vector<std::uint8_t> presence;  // uneven_inputs: who trains in this iteration
  int active = 0;                      // ranks present in it
  int last_joiner = -1;                // highest rank present in the last count > 0
  bool shadowing = false;              // inside join()
  bool built = false;
  bool in_iteration = false;
  bool rebuilt = false;
};

}  // namespace tutti::inline v0::detail
