#pragma once
/// \file
/// Device reduction kernels, type-erased like core/reduce.hpp's `reducer`. The kernels live in
/// tutti/detail/cuda_reduce.cuh, which only nvcc compiles; including tutti/transport/nccl.cuh in
/// one .cu file of a program fills this table, and tutti::nccl looks entries up at run time
/// (tutti's own policies on GPUs: ring, tree, recursive_halving). This header needs no CUDA.

#include <cstddef>

#include "tutti/core/ops.hpp"
#include "tutti/core/types.hpp"

namespace tutti::inline v0::detail {

/// d = a op b over n elements, launched on `stream` (a cudaStream_t); returns the launch's
/// cudaError_t as an int (0: cudaSuccess). d may alias a or b.
using device_combine_fn = int (*)(void* d, const void* a, const void* b, std::size_t n,
                                  void* stream) noexcept;
/// x /= divisor over n elements (avg's final division; integer division for integers, like
/// NCCL's ncclAvg), launched on `stream`; returns the cudaError_t as an int.
using device_divide_fn = int (*)(void* x, std::size_t n, int divisor, void* stream) noexcept;

inline constexpr std::size_t op_kind_count = static_cast<std::size_t>(op_kind::bxor) + 1;
inline constexpr std::size_t dtype_count = static_cast<std::size_t>(dtype::character) + 1;

struct device_reducers {
  /// combine[op][type]: null where the pair is not reducible (see tutti::reducible) or where
  /// the element type has no device form (float128).
  device_combine_fn combine[op_kind_count][dtype_count]{};
  device_divide_fn divide[dtype_count]{};
  bool filled = false;  ///< set by tutti/transport/nccl.cuh

  [[nodiscard]] device_combine_fn find(op_kind o, dtype t) const noexcept {
    return combine[static_cast<std::size_t>(o)][static_cast<std::size_t>(t)];
  }
  [[nodiscard]] device_divide_fn find_divide(dtype t) const noexcept {
    return divide[static_cast<std::size_t>(t)];
  }
};

/// The program's one table (a function-local static: one instance however many TUs).
[[nodiscard]] inline device_reducers& device_reducer_table() noexcept {
  static device_reducers table;
  return table;
}

}  // namespace tutti::inline v0::detail
