#pragma once
/// \file
/// From torch's run-time descriptions to tutti's compile-time ones: a tensor's dtype to an
/// element type, a c10d::ReduceOp to a tutti op, a tensor to a span.

#include <cstdint>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include <ATen/ATen.h>
#include <c10/util/Exception.h>
#include <torch/csrc/distributed/c10d/Types.hpp>

#include <tutti/core/bfloat16.hpp>
#include <tutti/core/half.hpp>
#include <tutti/core/ops.hpp>

namespace tutti_torch {

template <class T>
struct type_tag {
  using type = T;
};

/// Calls f(type_tag<T>{}) with the tutti element type of `t`: every dtype torch's gloo backend
/// takes on the CPU. float16 and bfloat16 have the same bits in torch and tutti.
template <class F>
decltype(auto) with_type(at::ScalarType t, F&& f) {
  switch (t) {
    case at::kFloat:
      return f(type_tag<float>{});
    case at::kDouble:
      return f(type_tag<double>{});
    case at::kHalf:
      return f(type_tag<tutti::half>{});
    case at::kBFloat16:
      return f(type_tag<tutti::bfloat16>{});
    case at::kChar:
      return f(type_tag<std::int8_t>{});
    case at::kShort:
      return f(type_tag<std::int16_t>{});
    case at::kInt:
      return f(type_tag<std::int32_t>{});
    case at::kLong:
      return f(type_tag<std::int64_t>{});
    case at::kByte:
      return f(type_tag<std::uint8_t>{});
    case at::kBool:
      return f(type_tag<bool>{});
    default:
      TORCH_CHECK(false, "tutti: tensors of dtype ", t,
                  " are not supported (float32/64, float16, bfloat16, int8-int64, uint8 and "
                  "bool are)");
  }
}

[[nodiscard]] inline const char* op_name(const c10d::ReduceOp& op) {
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return "SUM";
    case c10d::ReduceOp::AVG:
      return "AVG";
    case c10d::ReduceOp::PRODUCT:
      return "PRODUCT";
    case c10d::ReduceOp::MIN:
      return "MIN";
    case c10d::ReduceOp::MAX:
      return "MAX";
    case c10d::ReduceOp::BAND:
      return "BAND";
    case c10d::ReduceOp::BOR:
      return "BOR";
    case c10d::ReduceOp::BXOR:
      return "BXOR";
    case c10d::ReduceOp::PREMUL_SUM:
      return "PREMUL_SUM";
    default:
      return "UNUSED";
  }
}

/// Calls f(op) with the tutti op for `op` on elements of type T. On bool, SUM is logical or and
/// PRODUCT logical and (what gloo computes: bool arithmetic saturates at true).
template <class T, class F>
void with_op(const c10d::ReduceOp& op, at::ScalarType dtype, F&& f) {
  auto go = [&]<class Op>(Op o) {
    if constexpr (tutti::detail::op_accepts<Op::kind, T>())
      f(o);
    else
      TORCH_CHECK(false, "tutti: ReduceOp.", op_name(op), " is not defined on ", dtype, " tensors");
  };
  if constexpr (std::is_same_v<T, bool>) {
    if (op.op_ == c10d::ReduceOp::SUM) return go(tutti::bor);
    if (op.op_ == c10d::ReduceOp::PRODUCT) return go(tutti::band);
  }
  switch (op.op_) {
    case c10d::ReduceOp::SUM:
      return go(tutti::sum);
    case c10d::ReduceOp::AVG:
      return go(tutti::avg);
    case c10d::ReduceOp::PRODUCT:
      return go(tutti::prod);
    case c10d::ReduceOp::MIN:
      return go(tutti::min);
    case c10d::ReduceOp::MAX:
      return go(tutti::max);
    case c10d::ReduceOp::BAND:
      return go(tutti::band);
    case c10d::ReduceOp::BOR:
      return go(tutti::bor);
    case c10d::ReduceOp::BXOR:
      return go(tutti::bxor);
    default:
      TORCH_CHECK(false, "tutti: ReduceOp.", op_name(op), " is not supported");
  }
}

/// The elements of a dense CPU tensor as a span of T.
template <class T>
[[nodiscard]] std::span<T> span_of(const at::Tensor& t) {
  return {reinterpret_cast<T*>(t.data_ptr()), static_cast<std::size_t>(t.numel())};
}

/// The tensor itself when it is dense and contiguous on the CPU, else a contiguous copy (the
/// caller copies results back with copy_back).
[[nodiscard]] inline at::Tensor dense(const at::Tensor& t) { return t.contiguous(); }

inline void copy_back(const at::Tensor& to, const at::Tensor& from) {
  if (!to.is_same(from)) to.copy_(from.view(to.sizes()));
}

inline void check_cpu(const at::Tensor& t, const char* call) {
  TORCH_CHECK(t.device().is_cpu(), "tutti: ", call, " takes CPU tensors; got one on ", t.device(),
              " (register tutti for cpu and nccl for cuda in one group: ",
              "init_process_group(\"cpu:tutti,cuda:nccl\"))");
  TORCH_CHECK(t.layout() == at::kStrided, "tutti: ", call, " takes dense tensors");
}

inline void check_one(const std::vector<at::Tensor>& ts, const char* call) {
  TORCH_CHECK(ts.size() == 1, "tutti: ", call, " takes one tensor per call, got ", ts.size());
  check_cpu(ts[0], call);
}

}  // namespace tutti_torch
