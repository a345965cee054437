#pragma once
/// \file
/// tutti::bucketer<Comm>: DDP-style gradient bucketing over any communicator. Gradients are
/// grouped into flat buckets; each bucket's all_reduce starts as soon as its gradients are
/// ready, buckets in order, and finish() waits, averages and writes the results back.

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tutti/adapters/bucket_options.hpp"
#include "tutti/core/device_span.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/bucket_engine.hpp"

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
  using engine = detail::bucket_engine<Comm>;
  static constexpr bool on_device = engine::on_device;
  template <class T>
  using span_of = typename Comm::template span_type<T>;

 public:
  explicit bucketer(Comm& comm, bucketer_options opts = {}) : e_(comm, std::move(opts)) {
    const bucketer_options& o = e_.opts;
    if (o.first_bucket_bytes == 0 || o.bucket_bytes == 0)
      invalid("bucket capacities must be > 0 bytes");
    if constexpr (on_device) {
      e_.stream = comm.transport().stream();
      if (o.compress != compression::none)
        invalid("compression of buckets in GPU memory is not supported (use an all_reduce_hook)");
      if (o.uneven_inputs) invalid("uneven_inputs with buckets in GPU memory is not supported");
    }
  }
  bucketer(const bucketer&) = delete;
  bucketer& operator=(const bucketer&) = delete;
  // Destroying it waits for buckets still in flight (each bounded by the communicator's
  // deadline); finish() reports their errors.

  /// Registers a gradient buffer you own; returns its index (0, 1, ... in registration order).
  /// A device_span over a device communicator: GPU memory, final on the communicator's stream
  /// (or earlier) when you mark it ready.
  template <element T>
    requires reducible<sum_t, T> && (!on_device)
  std::size_t add(std::span<T> grad) {
    return e_.add_slot(dtype_of<T>, sizeof(T), grad.size(), grad.data());
  }
  template <element T>
    requires reducible<sum_t, T> && on_device
  std::size_t add(device_span<T> grad) {
    return e_.add_slot(dtype_of<T>, sizeof(T), grad.size(), grad.data());
  }
  /// Registers a gradient of `count` elements stored in the bucketer's own buckets.
  template <element T>
    requires reducible<sum_t, T>
  std::size_t add(std::size_t count) {
    return e_.add_slot(dtype_of<T>, sizeof(T), count, nullptr);
  }

  /// Gradient i: a view into its bucket for owned gradients (valid until a rebuild), the
  /// registered span otherwise. \throws tutti::error(errc::invalid_argument) if T is not its type.
  template <element T>
  [[nodiscard]] span_of<T> gradient(std::size_t i) {
    e_.check_index(i, "gradient");
    e_.build();  // first: it replaces the slots
    const auto& s = e_.slots[i];
    if (dtype_of<T> != s.type)
      invalid("gradient " + std::to_string(i) + " holds " + std::string(name(s.type)) + ", not " +
              std::string(name(dtype_of<T>)));
    return {static_cast<T*>(e_.where(i)), s.count};
  }

  [[nodiscard]] std::size_t gradient_count() const noexcept { return e_.slots.size(); }
  /// The buckets in launch order (fixes the layout).
  [[nodiscard]] std::vector<bucket_info> layout() {
    e_.build();
    std::vector<bucket_info> out;
    for (const auto& b : e_.buckets) out.push_back({b.type, b.count, b.bytes, b.grads});
    return out;
  }
  /// True once the one-time rebuild from the ready order happened.
  [[nodiscard]] bool rebuilt() const noexcept { return e_.rebuilt; }
  /// After a synchronised finish(): whether any rank used gradient i in that window.
  [[nodiscard]] bool used(std::size_t i) const {
    e_.check_index(i, "used");
    return e_.global_used.empty() ? false : e_.global_used[i] != 0;
  }

  /// Gradient i is final for this iteration. \throws tutti::error(errc::invalid_argument) when
  /// i is out of range or already marked in this synchronised iteration.
  void mark_ready(std::size_t i) {
    e_.check_index(i, "mark_ready");
    e_.build();
    e_.window_used[i] = 1;
    if (e_.no_sync_depth > 0) return;
    if (e_.marked[i] != 0)
      invalid("gradient " + std::to_string(i) +
              " was marked ready twice in one iteration (call finish() at the end of each)");
    e_.ready(i);
  }

  /// Ends the iteration: starts the remaining buckets, waits for all, averages, writes back.
  /// A no-op inside a no_sync() window. \throws the first error of any bucket.
  void finish() {
    if (e_.no_sync_depth > 0) return;
    e_.build();
    e_.start_iteration();
    e_.run_iteration();
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
    if (!e_.opts.uneven_inputs) invalid("join() needs bucketer_options::uneven_inputs = true");
    if (e_.in_iteration) invalid("join() in the middle of a synchronised iteration");
    if (e_.no_sync_depth > 0) invalid("join() inside a no_sync() window");
    e_.build();
    join_result r;
    e_.shadowing = true;
    struct end_shadow {
      bool& on;
      ~end_shadow() { on = false; }
    } guard{e_.shadowing};
    for (;;) {
      e_.start_iteration();
      if (e_.active == 0) break;
      e_.run_iteration();
      ++r.shadowed;
    }
    e_.reset_iteration();
    r.last_joiner = e_.last_joiner;
    return r;
  }

  /// With uneven_inputs: the ranks that train in this synchronised iteration (counted at its
  /// first mark_ready or finish), the divisor of its averages. Otherwise the world size.
  [[nodiscard]] int active_ranks() const noexcept { return e_.active_ranks(); }

  /// While the returned guard lives, gradients accumulate locally: no communication.
  class no_sync_guard {
   public:
    no_sync_guard(const no_sync_guard&) = delete;
    no_sync_guard& operator=(const no_sync_guard&) = delete;
    no_sync_guard(no_sync_guard&& o) noexcept : b_(std::exchange(o.b_, nullptr)) {}
    no_sync_guard& operator=(no_sync_guard&&) = delete;
    ~no_sync_guard() {
      if (b_ != nullptr) --b_->e_.no_sync_depth;
    }

   private:
    friend class bucketer;
    explicit no_sync_guard(bucketer* b) noexcept : b_(b) { ++b_->e_.no_sync_depth; }
    bucketer* b_;
  };
  /// \throws tutti::error(errc::invalid_argument) in the middle of a synchronised iteration.
  [[nodiscard]] no_sync_guard no_sync() {
    if (e_.in_iteration)
      invalid(
          "no_sync() entered in the middle of a synchronised iteration (after mark_ready, "
          "before finish)");
    return no_sync_guard(this);
  }

 private:
  [[noreturn]] static void invalid(const std::string& what) { engine::invalid(what); }

  engine e_;
};

}  // namespace tutti::inline v0
