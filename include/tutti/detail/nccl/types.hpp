#pragma once
/// \file
/// tutti::nccl's type and op mapping: tutti's element types and reduction ops as NCCL's
/// ncclDataType_t and ncclRedOp_t, and the error where NCCL has no such reduction.

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>
#include <type_traits>
#include <utility>

#include "tutti/core/error.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/call.hpp"

namespace tutti::inline v0::detail {

/// NCCL's type for a reduction over tutti type `t`, or -1 where NCCL has none (16-bit
/// integers, long double). bool and char reduce as bytes (min and max only: see `reducible`).
[[nodiscard]] constexpr int nccl_type_of(dtype t) noexcept {
  switch (t) {
    case dtype::int8:
      return ncclInt8;
    case dtype::uint8:
    case dtype::boolean:
      return ncclUint8;
    case dtype::character:
      return std::is_signed_v<char> ? ncclInt8 : ncclUint8;
    case dtype::int32:
      return ncclInt32;
    case dtype::uint32:
      return ncclUint32;
    case dtype::int64:
      return ncclInt64;
    case dtype::uint64:
      return ncclUint64;
    case dtype::float16:
      return ncclFloat16;
    case dtype::bfloat16:
      return ncclBfloat16;
    case dtype::float32:
      return ncclFloat32;
    case dtype::float64:
      return ncclFloat64;
    default:
      return -1;
  }
}

/// NCCL's op for tutti op `o`, or -1 for the bitwise ops (NCCL has none).
[[nodiscard]] constexpr int nccl_op_of(op_kind o) noexcept {
  switch (o) {
    case op_kind::sum:
      return ncclSum;
    case op_kind::prod:
      return ncclProd;
    case op_kind::min:
      return ncclMin;
    case op_kind::max:
      return ncclMax;
    case op_kind::avg:
      return ncclAvg;
    default:
      return -1;
  }
}

/// NCCL's (type, op) for `c`'s reduction, or errc::invalid_argument naming the call and `rank`
/// where NCCL has none (a bitwise op, 16-bit integers, long double).
[[nodiscard]] inline std::pair<ncclDataType_t, ncclRedOp_t> nccl_reduction(const call& c,
                                                                           int rank) {
  const int type = nccl_type_of(c.fp.type);
  const int op = nccl_op_of(c.fp.op);
  if (type < 0 || op < 0)
    throw error(errc::invalid_argument, c.name_str(), c.seq, rank, -1,
                std::string("NCCL has no ") +
                    (type < 0 ? "reduction over " + std::string(name(c.fp.type))
                              : std::string(name(c.fp.op)) + " reduction") +
                    ": use a wider type, or tutti::ring / tree / recursive_halving with the "
                    "kernels of <tutti/transport/nccl.cuh>");
  return {static_cast<ncclDataType_t>(type), static_cast<ncclRedOp_t>(op)};
}

}  // namespace tutti::inline v0::detail
