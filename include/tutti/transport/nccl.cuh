#pragma once
/// \file
/// tutti::nccl for .cu files: tutti/transport/nccl.hpp plus the device reduction kernels.
///
/// tutti::native (and tutti::automatic) on tutti::nccl run NCCL's own collectives and need no
/// kernels of tutti's. tutti's own policies (ring, tree, recursive_halving) reduce on the GPU
/// with kernels from tutti/detail/cuda_reduce.cuh: include this header in at least one .cu file
/// of the program, compiled by nvcc, and its static initialisation registers a kernel for every
/// (op, element type) pair tutti::reducible admits (long double has none) in
/// tutti::detail::device_reducer_table(). Other translation units, .cpp files included, may
/// keep including tutti/transport/nccl.hpp.

#include "tutti/detail/cuda_reduce.cuh"
#include "tutti/transport/nccl.hpp"

namespace tutti::inline v0::detail {

/// Fills the device reducer table during static initialisation (the table is a function-local
/// static, so the order against other initialisers does not matter; filling twice is harmless).
inline const bool device_reducers_registered = [] {
  fill_device_reducers(device_reducer_table());
  return true;
}();

}  // namespace tutti::inline v0::detail
