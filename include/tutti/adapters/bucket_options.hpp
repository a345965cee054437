#pragma once
/// \file
/// What a tutti::bucketer is told and what it shows: its options (capacities, averaging,
/// compression, hooks, uneven inputs), a bucket as hooks see it, a layout's buckets, and how a
/// join() ended.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "tutti/core/device_span.hpp"
#include "tutti/core/error.hpp"
#include "tutti/core/types.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0 {

/// Built-in communication hooks: all-reduce float buckets (float, double, long double) in a
/// 16-bit type, halving (or quartering) the bytes moved. Other buckets are not affected.
enum class compression : std::uint8_t { none, fp16, bf16 };

/// One bucket as hooks see it: its flat buffer, in the bucket's element type.
struct bucket_view {
  std::size_t index = 0;         ///< position in launch order (0 is all-reduced first)
  std::size_t bucket_count = 0;  ///< buckets in the layout
  dtype type = dtype::float32;
  std::size_t count = 0;  ///< elements in the bucket
  void* data = nullptr;
  std::span<const std::size_t> gradients;  ///< the gradients it holds, in buffer order

  [[nodiscard]] bool is_last() const noexcept { return index + 1 == bucket_count; }
  /// The buffer as `T`s. \throws tutti::error(errc::invalid_argument) if T is not its type.
  template <element T>
  [[nodiscard]] std::span<T> as() const {
    if (dtype_of<T> != type)
      throw error(errc::invalid_argument, "", 0, -1, -1,
                  "bucket_view::as: bucket " + std::to_string(index) + " holds " +
                      std::string(name(type)) + ", not " + std::string(name(dtype_of<T>)));
    return {static_cast<T*>(data), count};
  }
  /// The buffer as device memory, for hooks of a bucketer over a device communicator
  /// (tutti::nccl), whose buckets live on the GPU. \throws as as().
  template <element T>
  [[nodiscard]] device_span<T> on_device() const {
    const auto host = as<T>();
    return {host.data(), host.size()};
  }
};

/// A user hook on a bucket; runs on the thread that calls mark_ready() or finish().
using bucket_hook = std::function<void(const bucket_view&)>;

struct bucketer_options {
  /// Capacity of each element type's first bucket (DDP: 1 MiB) and of the later ones (DDP:
  /// 25 MiB). A bucket closes once it holds at least its capacity; a gradient is never split,
  /// so a bucket may hold more.
  std::size_t first_bucket_bytes = std::size_t{1} << 20;
  std::size_t bucket_bytes = std::size_t{25} << 20;
  /// Average over the ranks (true) or sum (false). 16-bit types and compressed buckets are
  /// divided before the all_reduce, so the sum cannot overflow; the others all_reduce with
  /// tutti::avg (integer types: integer division of the sum).
  bool average = true;
  /// After the first synchronised iteration, rebuild the buckets once in the order gradients
  /// became ready — rank 0's order, on every rank (DDP's bucket rebuild). Owned gradient views
  /// move then: take them again with gradient<T>(i) after that finish().
  bool rebuild_from_ready_order = false;
  compression compress = compression::none;
  /// Runs on a bucket's local data (gradients copied in, unused ones zeroed) before it is
  /// divided, compressed and all-reduced.
  bucket_hook before_all_reduce{};
  /// Runs on the bucket's result (all-reduced, averaged, decompressed) before write-back.
  bucket_hook after_all_reduce{};
  /// Replaces a bucket's all-reduce (DDP's register_comm_hook): called with the bucket's local
  /// data (after before_all_reduce) when the bucket is due, it reduces the bucket in place
  /// through any calls of the communicator it captured and returns their work (or an empty
  /// one once done); finish() waits for it, then runs after_all_reduce and writes back. The
  /// bucketer then neither divides nor compresses: the hook owns averaging, as DDP's do.
  /// Every rank runs the same collectives in it, in bucket order. examples/powersgd.cpp is one.
  std::function<tutti::work(const bucket_view&)> all_reduce_hook{};
  /// Uneven inputs (torch's Join): every synchronised iteration starts with a small
  /// all-reduce that counts the ranks still training; a rank out of data calls join(), which
  /// shadows the others' iterations with zeros until every rank has joined. Averages divide
  /// by the ranks that contributed, not by the world size.
  bool uneven_inputs = false;
};

/// How a join() ended (bucketer::join).
struct join_result {
  std::size_t shadowed = 0;  ///< iterations of other ranks this rank shadowed with zeros
  /// The highest rank among those that trained in the last iteration any rank trained in (-1
  /// when no rank trained after this one joined... and none before): its parameters are the
  /// ones to broadcast so that every rank ends with the same model (torch's last joiner).
  int last_joiner = -1;
};

/// One bucket of a layout.
struct bucket_info {
  dtype type = dtype::float32;
  std::size_t count = 0;  ///< elements
  std::size_t bytes = 0;
  std::vector<std::size_t> gradients;  ///< in buffer order
};

}  // namespace tutti::inline v0
