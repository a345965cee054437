#pragma once
/// \file
/// tutti::broadcast_parameters: every rank starts from root's parameters and buffers, as DDP
/// makes them at construction (a model's weights, optimizer state, step counters).

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/detail/policy_traits.hpp"
#include "tutti/transport/concepts.hpp"

namespace tutti::inline v0 {

/// A buffer of parameters or buffers, type-erased, for broadcast_parameters: `param(span)`.
struct param_ref {
  void* data = nullptr;
  std::size_t bytes = 0;
};
template <class T>
  requires std::is_trivially_copyable_v<T>
[[nodiscard]] param_ref param(std::span<T> values) noexcept {
  return {static_cast<void*>(values.data()), values.size_bytes()};
}

/// Copies root's values of every buffer in `params` (host memory) to every rank, packed into
/// broadcasts of at most `bucket_bytes` (DDP's construction-time sync of parameters and buffers,
/// which coalesces into 250 MiB). Collective: every rank passes buffers of the same sizes in the
/// same order (a difference raises errc::mismatch). Works with every policy (it uses all_reduce
/// where a policy lacks broadcast).
template <class Comm>
  requires std::is_same_v<typename Comm::memory_space, host_memory>
void broadcast_parameters(Comm& comm, std::span<const param_ref> params, int root = 0,
                          std::size_t bucket_bytes = std::size_t{250} << 20) {
  if (bucket_bytes == 0)
    throw error(errc::invalid_argument, "broadcast_parameters", 0, comm.rank(), -1,
                "bucket_bytes must be > 0");
  if (root < 0 || root >= comm.size())
    throw error(errc::invalid_argument, "broadcast_parameters", 0, comm.rank(), root,
                "root must be a rank in [0, " + std::to_string(comm.size()) + ")");
  std::vector<std::uint8_t> pack;
  for (std::size_t first = 0; first < params.size();) {
    std::size_t last = first;
    std::size_t bytes = 0;
    while (last < params.size() && (last == first || bytes + params[last].bytes <= bucket_bytes))
      bytes += params[last++].bytes;
    pack.assign(bytes, 0);
    if (comm.rank() == root) {
      std::size_t at = 0;
      for (std::size_t i = first; i < last; ++i) {
        if (params[i].bytes != 0) std::memcpy(pack.data() + at, params[i].data, params[i].bytes);
        at += params[i].bytes;
      }
    }
    const std::span<std::uint8_t> all(pack);
    if constexpr (detail::has_broadcast<typename Comm::algorithm_type,
                                        typename Comm::transport_type>)
      comm.broadcast(all, root);
    else
      comm.all_reduce(all, tutti::bor);  // zeros everywhere but root
    if (comm.rank() != root) {
      std::size_t at = 0;
      for (std::size_t i = first; i < last; ++i) {
        if (params[i].bytes != 0) std::memcpy(params[i].data, pack.data() + at, params[i].bytes);
        at += params[i].bytes;
      }
    }
    first = last;
  }
}
template <class Comm>
  requires std::is_same_v<typename Comm::memory_space, host_memory>
void broadcast_parameters(Comm& comm, std::initializer_list<param_ref> params, int root = 0,
                          std::size_t bucket_bytes = std::size_t{250} << 20) {
  broadcast_parameters(comm, std::span<const param_ref>(params.begin(), params.size()), root,
                       bucket_bytes);
}

}  // namespace tutti::inline v0
