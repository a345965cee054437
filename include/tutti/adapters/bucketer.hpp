#pragma once
/// \file
/// tutti::bucketer<Comm>: DDP-style gradient bucketing over any communicator. Gradients are
/// grouped into flat buckets; each bucket's all_reduce starts as soon as its gradients are
/// ready, buckets in order, and finish() waits, averages and writes the results back.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <new>
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
#include "tutti/core/options.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/bucket_layout.hpp"
#include "tutti/detail/bucket_memory.hpp"
#include "tutti/transport/concepts.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0 {

/// Gradient bucketing over a communicator `Comm` (any tutti::communicator), with DDP's Reducer
/// semantics (reference: torch DistributedDataParallel):
///
/// - Register gradients in forward order: `add(span)` for buffers you own (copied into the
///   bucket at mark_ready, written back by finish), or `add<T>(count)` to have the bucketer own
///   the storage and hand out views into its buckets with `gradient<T>(i)` (no copy at all).
/// - Buckets: reverse registration order, one element type per bucket, a gradient never split,
///   each type's first bucket `first_bucket_bytes` (1 MiB), later ones `bucket_bytes` (25 MiB).
///   The layout is fixed at the first mark_ready/finish/gradient/layout call; it is logged at
///   TUTTI_DEBUG=INFO.
/// - `mark_ready(i)` says gradient i is final for this iteration. A bucket's async all_reduce
///   starts once all its gradients are ready and every earlier bucket has started, so all
///   ranks issue the same collectives in the same order.
/// - `finish()` starts the buckets still waiting — gradients not marked ready contribute zeros
///   (or, after a no_sync() window, what they accumulated there) — waits for all, averages, runs
///   the after-hook and writes back. A gradient no rank used in the whole window (since the
///   last synchronised finish) is left untouched in its buffer (owned views read 0). The first
///   error of any bucket is rethrown from finish(), after every bucket finished.
/// - `no_sync()` returns a guard; while it lives, mark_ready only records use and finish() does
///   nothing, so gradients accumulate locally in their buffers; the next synchronised
///   iteration reduces the accumulated values.
///
/// Every rank must register the same gradients (types and counts) in the same order and use the
/// same options; a difference makes a bucket's all_reduce raise errc::mismatch. Not thread-safe:
/// call it from one thread. The communicator must outlive the bucketer.
template <class Comm>
class bucketer {
  /// Buckets in GPU memory: the communicator's collectives take device memory (tutti::nccl).
  static constexpr bool on_device = !std::is_same_v<typename Comm::memory_space, host_memory>;
  using memory = detail::bucket_memory<on_device>;
  template <class T>
  using span_of = typename Comm::template span_type<T>;

 public:
  explicit bucketer(Comm& comm, bucketer_options opts = {}) : comm_(&comm), opts_(std::move(opts)) {
    if (opts_.first_bucket_bytes == 0 || opts_.bucket_bytes == 0)
      invalid("bucket capacities must be > 0 bytes");
    if constexpr (on_device) {
      stream_ = comm.transport().stream();
      if (opts_.compress != compression::none)
        invalid("compression of buckets in GPU memory is not supported (use an all_reduce_hook)");
      if (opts_.uneven_inputs) invalid("uneven_inputs with buckets in GPU memory is not supported");
    }
  }
  bucketer(const bucketer&) = delete;
  bucketer& operator=(const bucketer&) = delete;
  /// Waits for buckets still in flight (each bounded by the communicator's deadline).
  ~bucketer() {
    for (bucket& b : buckets_) {
      try {
        b.work.wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): finish() reports errors; a destructor cannot
      }
    }
  }

  /// Registers a gradient buffer you own; returns its index (0, 1, ... in registration order).
  /// A device_span over a device communicator: GPU memory, final on the communicator's stream
  /// (or earlier) when you mark it ready.
  template <element T>
    requires reducible<sum_t, T> && (!on_device)
  std::size_t add(std::span<T> grad) {
    return add_slot(dtype_of<T>, sizeof(T), grad.size(), grad.data());
  }
  template <element T>
    requires reducible<sum_t, T> && on_device
  std::size_t add(device_span<T> grad) {
    return add_slot(dtype_of<T>, sizeof(T), grad.size(), grad.data());
  }
  /// Registers a gradient of `count` elements stored in the bucketer's own buckets.
  template <element T>
    requires reducible<sum_t, T>
  std::size_t add(std::size_t count) {
    return add_slot(dtype_of<T>, sizeof(T), count, nullptr);
  }

  /// Gradient i: a view into its bucket for owned gradients (valid until a rebuild), the
  /// registered span otherwise. \throws tutti::error(errc::invalid_argument) if T is not its type.
  template <element T>
  [[nodiscard]] span_of<T> gradient(std::size_t i) {
    check_index(i, "gradient");
    build();  // first: it replaces slots_
    const slot& s = slots_[i];
    if (dtype_of<T> != s.type)
      invalid("gradient " + std::to_string(i) + " holds " + std::string(name(s.type)) + ", not " +
              std::string(name(dtype_of<T>)));
    return {static_cast<T*>(where(i)), s.count};
  }

  [[nodiscard]] std::size_t gradient_count() const noexcept { return slots_.size(); }
  /// The buckets in launch order (fixes the layout).
  [[nodiscard]] std::vector<bucket_info> layout() {
    build();
    std::vector<bucket_info> out;
    for (const bucket& b : buckets_) out.push_back({b.type, b.count, b.bytes, b.grads});
    return out;
  }
  /// True once the one-time rebuild from the ready order happened.
  [[nodiscard]] bool rebuilt() const noexcept { return rebuilt_; }
  /// After a synchronised finish(): whether any rank used gradient i in that window.
  [[nodiscard]] bool used(std::size_t i) const {
    check_index(i, "used");
    return global_used_.empty() ? false : global_used_[i] != 0;
  }

  /// Gradient i is final for this iteration. \throws tutti::error(errc::invalid_argument) when
  /// i is out of range or already marked in this synchronised iteration.
  void mark_ready(std::size_t i) {
    check_index(i, "mark_ready");
    build();
    window_used_[i] = 1;
    if (no_sync_depth_ > 0) return;
    if (marked_[i] != 0)
      invalid("gradient " + std::to_string(i) +
              " was marked ready twice in one iteration (call finish() at the end of each)");
    start_iteration();
    marked_[i] = 1;
    if (!rebuilt_) ready_order_.push_back(i);
    slot& s = slots_[i];
    if (s.external != nullptr)
      memory::copy(buckets_[s.bucket].storage.data() + s.offset, s.external, s.count * s.elem,
                   stream_);
    bucket& b = buckets_[s.bucket];
    --b.pending;
    while (next_ < buckets_.size() && buckets_[next_].pending == 0) launch(next_++);
  }

  /// Ends the iteration: starts the remaining buckets, waits for all, averages, writes back.
  /// A no-op inside a no_sync() window. \throws the first error of any bucket.
  void finish() {
    if (no_sync_depth_ > 0) return;
    build();
    start_iteration();
    run_iteration();
  }

  /// This rank is out of data (bucketer_options::uneven_inputs): shadows the other ranks'
  /// synchronised iterations — their presence count with 0, every bucket's all-reduce (or
  /// all_reduce_hook, and the hooks around it) with zeros, the used-gradient exchange — and
  /// returns once every rank has joined. Every rank calls it after its last iteration; its
  /// gradients are not written meanwhile. Broadcast the parameters of `last_joiner` afterwards
  /// (broadcast_parameters) for every rank to end with the same model, as torch does.
  /// \throws tutti::error(errc::invalid_argument) without uneven_inputs, inside an iteration
  /// or a no_sync() window; the first error of a shadowed bucket otherwise.
  join_result join() {
    if (!opts_.uneven_inputs) invalid("join() needs bucketer_options::uneven_inputs = true");
    if (in_iteration_) invalid("join() in the middle of a synchronised iteration");
    if (no_sync_depth_ > 0) invalid("join() inside a no_sync() window");
    build();
    join_result r;
    shadowing_ = true;
    struct end_shadow {
      bool& on;
      ~end_shadow() { on = false; }
    } guard{shadowing_};
    for (;;) {
      start_iteration();
      if (active_ == 0) break;
      run_iteration();
      ++r.shadowed;
    }
    reset_iteration();
    r.last_joiner = last_joiner_;
    return r;
  }

  /// With uneven_inputs: the ranks that train in this synchronised iteration (counted at its
  /// first mark_ready or finish), the divisor of its averages. Otherwise the world size.
  [[nodiscard]] int active_ranks() const noexcept {
    return opts_.uneven_inputs ? active_ : comm_->size();
  }

  /// While the returned guard lives, gradients accumulate locally: no communication.
  class no_sync_guard {
   public:
    no_sync_guard(const no_sync_guard&) = delete;
    no_sync_guard& operator=(const no_sync_guard&) = delete;
    no_sync_guard(no_sync_guard&& o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
    no_sync_guard& operator=(no_sync_guard&&) = delete;
    ~no_sync_guard() {
      if (b_ != nullptr) --b_->no_sync_depth_;
    }

   private:
    friend class bucketer;
    explicit no_sync_guard(bucketer* b) noexcept : b_(b) { ++b_->no_sync_depth_; }
    bucketer* b_;
  };
  /// \throws tutti::error(errc::invalid_argument) in the middle of a synchronised iteration.
  [[nodiscard]] no_sync_guard no_sync() {
    if (in_iteration_)
      invalid(
          "no_sync() entered in the middle of a synchronised iteration (after mark_ready, "
          "before finish)");
    return no_sync_guard(this);
  }

 private:
  // The body of a synchronised iteration, once its presence is counted: starts the buckets not
  // yet started, waits, averages and writes back, then the one-time rebuild.
  void run_iteration() {
    if (slots_.empty()) {
      reset_iteration();
      return;
    }
    while (next_ < buckets_.size()) launch(next_++);
    // Which gradients any rank used in the window: an OR across ranks, after the buckets.
    global_used_ = window_used_;
    std::exception_ptr first;
    tutti::work used_work;
    if constexpr (!on_device) {
      try {
        // max of 0/1 bytes is their or, and NCCL has max (not bor) for the device path.
        used_work = comm_->all_reduce_async(std::span<std::uint8_t>(global_used_), tutti::max);
      } catch (...) {
        first = std::current_exception();
      }
    }
    std::exception_ptr bucket_error;
    for (bucket& b : buckets_) {
      try {
        b.work.wait();
      } catch (...) {
        if (!bucket_error) bucket_error = std::current_exception();
      }
      if (b.error && !bucket_error) bucket_error = b.error;
    }
    try {
      if constexpr (on_device)
        reduce_host(std::span<std::uint8_t>(global_used_), tutti::max);
      else
        used_work.wait();
    } catch (...) {
      if (!first) first = std::current_exception();
    }
    if (bucket_error) first = bucket_error;  // the buckets' come first: they were issued first
    if (!first) {
      for (std::size_t k = 0; k < buckets_.size(); ++k) complete(k);
    }
    reset_iteration();
    if (first) std::rethrow_exception(first);
    if (opts_.rebuild_from_ready_order && !rebuilt_) rebuild();
  }

  struct slot {
    dtype type;
    std::size_t elem;
    std::size_t count;
    void* external;  // null: owned by the bucket
    std::size_t bucket = 0;
    std::size_t offset = 0;  // bytes into the bucket
  };
  struct bucket {
    dtype type = dtype::float32;
    std::size_t elem = 0;
    std::size_t count = 0;
    std::size_t bytes = 0;
    std::vector<std::size_t> grads;
    typename memory::bytes storage;
    typename memory::bytes wire;  // the 16-bit copy a compressed bucket all-reduces
    std::size_t pending = 0;
    tutti::work work;
    std::exception_ptr error;
    bool divide_after = false;  // summed: divide by the active ranks once reduced
  };

  [[noreturn]] static void invalid(const std::string& what) {
    throw error(errc::invalid_argument, "", 0, -1, -1, "bucketer: " + what);
  }
  void check_index(std::size_t i, const char* what) const {
    if (i >= slots_.size())
      invalid(std::string(what) + "(" + std::to_string(i) + "): only " +
              std::to_string(slots_.size()) + " gradients are registered");
  }

  std::size_t add_slot(dtype t, std::size_t elem, std::size_t count, void* external) {
    if (built_)
      invalid(
          "add() after the bucket layout was fixed (by mark_ready, finish, gradient or "
          "layout): register every gradient first");
    slots_.push_back(slot{t, elem, count, external});
    return slots_.size() - 1;
  }

  [[nodiscard]] void* where(std::size_t i) const {
    const slot& s = slots_[i];
    if (s.external != nullptr) return s.external;
    return buckets_[s.bucket].storage.data() + s.offset;
  }

  [[nodiscard]] bool compressed(const bucket& b) const noexcept {
    return opts_.compress != compression::none && !opts_.all_reduce_hook &&
           (b.type == dtype::float32 || b.type == dtype::float64 || b.type == dtype::float128);
  }

  void build() {
    if (built_) return;
    std::vector<std::size_t> order(slots_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = order.size() - 1 - i;
    lay_out(order, true, false);
    built_ = true;
    marked_.assign(slots_.size(), 0);
    window_used_.assign(slots_.size(), 0);
    reset_iteration();
  }

  // Computes buckets over `order` and moves every owned gradient's values into them.
  void lay_out(const std::vector<std::size_t>& order, bool sort, bool rebuilding) {
    std::vector<dtype> types;
    std::vector<std::size_t> bytes;
    for (const slot& s : slots_) {
      types.push_back(s.type);
      bytes.push_back(s.count * s.elem);
    }
    const std::size_t limits[] = {opts_.first_bucket_bytes, opts_.bucket_bytes};
    const auto groups = detail::assign_buckets(order, types, bytes, limits, sort);
    std::vector<bucket> fresh(groups.size());
    std::vector<slot> placed = slots_;
    for (std::size_t k = 0; k < groups.size(); ++k) {
      bucket& b = fresh[k];
      b.type = slots_[groups[k].front()].type;
      b.elem = slots_[groups[k].front()].elem;
      b.grads = groups[k];
      for (const std::size_t g : groups[k]) {
        placed[g].bucket = k;
        placed[g].offset = b.bytes;
        b.bytes += bytes[g];
      }
      b.count = b.bytes / b.elem;
      b.storage = memory::allocate(b.bytes, stream_);
      if (compressed(b)) b.wire = memory::allocate(b.count * 2, stream_);
    }
    if (built_) {
      for (std::size_t g = 0; g < slots_.size(); ++g)
        if (slots_[g].external == nullptr && bytes[g] != 0)
          memory::copy(fresh[placed[g].bucket].storage.data() + placed[g].offset,
                       buckets_[slots_[g].bucket].storage.data() + slots_[g].offset, bytes[g],
                       stream_);
    }
    buckets_ = std::move(fresh);
    slots_ = std::move(placed);
    log_layout(rebuilding);
  }

  // Opens a synchronised iteration (once): with uneven_inputs, counts the ranks that train in
  // it — a max all-reduce of one byte per rank, this rank's 1 unless it shadows.
  void start_iteration() {
    if (in_iteration_) return;
    in_iteration_ = true;
    ready_order_.clear();
    if (!opts_.uneven_inputs) return;
    presence_.assign(static_cast<std::size_t>(comm_->size()), 0);
    if (!shadowing_) presence_[static_cast<std::size_t>(comm_->rank())] = 1;
    try {
      reduce_host(std::span<std::uint8_t>(presence_), tutti::max);
    } catch (...) {
      in_iteration_ = false;
      throw;
    }
    active_ = 0;
    for (std::size_t q = 0; q < presence_.size(); ++q) {
      if (presence_[q] == 0) continue;
      ++active_;
      last_joiner_ = static_cast<int>(q);  // the highest rank present, in the last count > 0
    }
  }

  void reset_iteration() {
    in_iteration_ = false;
    next_ = 0;
    std::fill(marked_.begin(), marked_.end(), 0);
    std::fill(window_used_.begin(), window_used_.end(), 0);
    for (bucket& b : buckets_) {
      b.pending = b.grads.size();
      b.work = tutti::work{};
      b.error = nullptr;
      b.divide_after = false;
    }
  }

  [[nodiscard]] bucket_view view(std::size_t k) {
    bucket& b = buckets_[k];
    return bucket_view{k, buckets_.size(), b.type, b.count, b.storage.data(), b.grads};
  }

  // Starts bucket k's all_reduce: fills unmarked gradients, runs the before-hook, divides or
  // compresses, and issues the async collective. Errors are kept for finish().
  void launch(std::size_t k) {
    bucket& b = buckets_[k];
    try {
      for (const std::size_t g : b.grads) {
        if (marked_[g] != 0) continue;
        const slot& s = slots_[g];
        if (s.count == 0) continue;
        std::byte* dst = b.storage.data() + s.offset;
        if (shadowing_ || window_used_[g] == 0) {
          memory::zero(dst, s.count * s.elem, stream_);
        } else if (s.external != nullptr) {
          memory::copy(dst, s.external, s.count * s.elem, stream_);
        }
      }
      if (opts_.before_all_reduce) opts_.before_all_reduce(view(k));
      if (opts_.all_reduce_hook) {
        b.work = opts_.all_reduce_hook(view(k));
        return;
      }
      const int p = active_ranks();
      detail::visit_sum_type(b.type, [&]<class T>() {
        T* data = reinterpret_cast<T*>(b.storage.data());
        if constexpr (on_device) {
          // On the GPU: NCCL averages itself (ncclAvg); no compression, no uneven inputs.
          (void)p;
          if (opts_.average)
            b.work = comm_->all_reduce_async(device_span<T>(data, b.count), tutti::avg);
          else
            b.work = comm_->all_reduce_async(device_span<T>(data, b.count), tutti::sum);
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
        if (opts_.average) detail::divide_kernel<T>(data, b.count, p);
        if (opts_.compress == compression::fp16) {
          auto* w = reinterpret_cast<half*>(b.wire.data());
          detail::compress_into(w, data, b.count);
          b.work = comm_->all_reduce_async(std::span<half>(w, b.count), tutti::sum);
        } else {
          auto* w = reinterpret_cast<bfloat16*>(b.wire.data());
          detail::compress_into(w, data, b.count);
          b.work = comm_->all_reduce_async(std::span<bfloat16>(w, b.count), tutti::sum);
        }
        return;
      }
    }
    const std::span<T> all(data, b.count);
    if (opts_.average && detail::is_float16<T>) {
      detail::divide_kernel<T>(data, b.count, p);  // before the sum: no overflow
      b.work = comm_->all_reduce_async(all, tutti::sum);
    } else if (opts_.average && opts_.uneven_inputs) {
      b.work = comm_->all_reduce_async(all, tutti::sum);  // avg would divide by the world
      b.divide_after = true;
    } else if (opts_.average) {
      b.work = comm_->all_reduce_async(all, tutti::avg);
    } else {
      b.work = comm_->all_reduce_async(all, tutti::sum);
    }
  }

  // A blocking all_reduce of host values: over a device communicator through a buffer in GPU
  // memory (the used-gradient map, the presence count, the ready order: a few bytes).
  template <class T, class Op>
  void reduce_host(std::span<T> v, Op op) {
    if constexpr (on_device) {
      auto d = memory::allocate(v.size_bytes(), stream_);
      auto* dev = reinterpret_cast<T*>(d.data());
      memory::copy_now(dev, v.data(), v.size_bytes(), stream_);
      comm_->all_reduce(device_span<T>(dev, v.size()), op);
      memory::copy_now(v.data(), dev, v.size_bytes(), stream_);
    } else {
      comm_->all_reduce(v, op);
    }
  }

  // After bucket k's all_reduce: decompress, after-hook, write back the used gradients.
  void complete(std::size_t k) {
    bucket& b = buckets_[k];
    if (compressed(b)) {
      detail::visit_sum_type(b.type, [&]<class T>() {
        if constexpr (std::is_floating_point_v<T>) {
          T* data = reinterpret_cast<T*>(b.storage.data());
          if (opts_.compress == compression::fp16)
            detail::decompress_into(data, reinterpret_cast<const half*>(b.wire.data()), b.count);
          else
            detail::decompress_into(data, reinterpret_cast<const bfloat16*>(b.wire.data()),
                                    b.count);
        }
      });
    }
    if (b.divide_after)
      detail::visit_sum_type(b.type, [&]<class T>() {
        detail::divide_kernel<T>(reinterpret_cast<T*>(b.storage.data()), b.count, active_);
      });
    if (opts_.after_all_reduce) opts_.after_all_reduce(view(k));
    if (shadowing_) return;  // a joined rank's gradients are not written
    for (const std::size_t g : b.grads) {
      const slot& s = slots_[g];
      if (s.external != nullptr && global_used_[g] != 0)
        memory::copy(s.external, b.storage.data() + s.offset, s.count * s.elem, stream_);
    }
  }

  // DDP's one-time rebuild: the ready order of the first synchronised iteration (gradients
  // never marked follow in reverse registration order), rank 0's on every rank.
  void rebuild() {
    std::vector<std::uint64_t> order;
    std::vector<char> seen(slots_.size(), 0);
    for (const std::size_t g : ready_order_) {
      order.push_back(g);
      seen[g] = 1;
    }
    for (std::size_t i = slots_.size(); i-- > 0;)
      if (seen[i] == 0) order.push_back(i);
    // Rank 0's order to every rank: an all_reduce (sum) of it and zeros, which every policy
    // implements (not all have broadcast).
    if (comm_->rank() != 0) std::fill(order.begin(), order.end(), 0);
    reduce_host(std::span<std::uint64_t>(order), tutti::sum);
    std::vector<std::size_t> agreed(order.begin(), order.end());
    std::vector<char> check(slots_.size(), 0);
    for (const std::size_t g : agreed) {
      if (g >= slots_.size() || check[g] != 0)
        invalid("rank 0's ready order is not a permutation of the gradients");
      check[g] = 1;
    }
    lay_out(agreed, false, true);
    rebuilt_ = true;
    reset_iteration();
  }

  // One line; built with appends only (GCC 12's -Wrestrict misfires on "lit" + string&&).
  void log_layout(bool rebuilding) const {
    if (!detail::debug_info()) return;
    std::size_t total = 0;
    for (const bucket& b : buckets_) total += b.bytes;
    std::string line = "tutti[bucketer] rank ";
    line.append(std::to_string(comm_->rank())).append(": ");
    line.append(std::to_string(slots_.size())).append(" gradients, ");
    line.append(std::to_string(total)).append(" bytes in ");
    line.append(std::to_string(buckets_.size())).append(" buckets");
    if (rebuilding) line.append(" (rebuilt from the ready order)");
    line.append(":");
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      const bucket& b = buckets_[k];
      line.append(" [").append(std::to_string(k)).append("] ").append(name(b.type));
      line.append(" ").append(std::to_string(b.bytes)).append(" B {");
      // Gradient indices; a descending run as a..b.
      for (std::size_t j = 0; j < b.grads.size();) {
        std::size_t e = j;
        while (e + 1 < b.grads.size() && b.grads[e + 1] + 1 == b.grads[e]) ++e;
        if (j != 0) line.append(",");
        line.append(std::to_string(b.grads[j]));
        if (e != j) line.append("..").append(std::to_string(b.grads[e]));
        j = e + 1;
      }
      line.append("}");
    }
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  Comm* comm_;
  void* stream_ = nullptr;  // on_device: the communicator's CUDA stream, which copies run on
  bucketer_options opts_;
  std::vector<slot> slots_;
  std::vector<bucket> buckets_;
  std::vector<std::uint8_t> marked_;       // this synchronised iteration
  std::vector<std::uint8_t> window_used_;  // since the last synchronised finish
  std::vector<std::uint8_t> global_used_;  // OR over ranks, from the last finish
  std::vector<std::size_t> ready_order_;   // first synchronised iteration, for the rebuild
  std::size_t next_ = 0;                   // next bucket to launch
  int no_sync_depth_ = 0;
  std::vector<std::uint8_t> presence_;  // uneven_inputs: who trains in this iteration
  int active_ = 0;                      // ranks present in it
  int last_joiner_ = -1;                // highest rank present in the last count > 0
  bool shadowing_ = false;              // inside join()
  bool built_ = false;
  bool in_iteration_ = false;
  bool rebuilt_ = false;
};

}  // namespace tutti::inline v0
