// all_reduce of sparse COO tensors (what DDP sends for an nn.Embedding(sparse=True)'s
// gradients): every rank's indices and values gathered, then summed by coalescing.

#include <algorithm>
#include <array>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "backend.hpp"
#include "dispatch.hpp"

namespace tutti_torch {

namespace {

/// "4 x 3" for sizes {4, 3}.
[[nodiscard]] std::string shape_text(const int64_t* sizes, int64_t n) {
  std::string s;
  for (int64_t i = 0; i < n; ++i) s += (i == 0 ? "" : " x ") + std::to_string(sizes[i]);
  return n == 0 ? "a scalar" : s;
}

}  // namespace

c10::intrusive_ptr<c10d::Work> backend::allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                         const c10d::AllreduceOptions& opts) {
  TORCH_CHECK(tensors.size() == 1, "tutti: all_reduce takes one tensor per call, got ",
              tensors.size());
  const at::Tensor t = tensors[0];
  TORCH_CHECK(t.device().is_cpu(), "tutti: all_reduce of a sparse tensor takes CPU tensors; got ",
              "one on ", t.device());
  TORCH_CHECK(t.layout() == at::kSparse, "tutti: all_reduce of sparse tensors takes the COO ",
              "layout (torch.sparse_coo); got ", t.layout());
  TORCH_CHECK(opts.reduceOp == c10d::ReduceOp::SUM, "tutti: all_reduce of sparse tensors sums ",
              "(ReduceOp.SUM); ReduceOp.", op_name(opts.reduceOp), " is not supported on them");
  with_type(t.scalar_type(), [](auto) {});  // a dtype tutti carries
  return post(c10d::OpType::ALLREDUCE, "all_reduce (sparse)", opts.asyncOp, tensors,
              [this, t] { sum_sparse(t); });
}

void backend::sum_sparse(const at::Tensor& t) {
  const at::Tensor in = t.coalesce();
  const int p = getSize();
  const auto up = static_cast<std::size_t>(p);
  // 1. Each rank's layout: sparse and dense dimensions, nonzeros. Every rank checks every
  // other's, so a mismatch raises on all of them with the same words.
  const auto gather_longs = [this](std::span<const int64_t> from, std::span<int64_t> to) {
    std::visit([&](auto& c) { c.all_gather(from, to); }, *comm_);
  };
  const std::array<int64_t, 3> mine{in.sparse_dim(), in.dense_dim(), in._nnz()};
  std::vector<int64_t> heads(3 * up);
  gather_longs(mine, heads);
  const int64_t sd = mine[0];
  const int64_t nd = sd + mine[1];
  for (std::size_t r = 1; r < up; ++r)
    TORCH_CHECK(heads[3 * r] == heads[0] && heads[3 * r + 1] == heads[1], "tutti: all_reduce of ",
                "sparse tensors: rank ", r, "'s has ", heads[3 * r], " sparse and ",
                heads[3 * r + 1], " dense dimensions, rank 0's ", heads[0], " and ", heads[1]);
  // 2. Their sizes.
  std::vector<int64_t> sizes(static_cast<std::size_t>(nd) * up);
  gather_longs({in.sizes().data(), static_cast<std::size_t>(nd)}, sizes);
  for (std::size_t r = 1; r < up; ++r)
    TORCH_CHECK(std::equal(sizes.begin(), sizes.begin() + nd, sizes.begin() + nd * r),
                "tutti: all_reduce of sparse tensors: rank ", r, "'s is ",
                shape_text(sizes.data() + nd * r, nd), ", rank 0's ", shape_text(sizes.data(), nd));
  // 3. Every rank's indices (one row of sd per nonzero) and values, back to back.
  std::vector<std::size_t> index_counts(up), value_counts(up);
  int64_t row = 1;  // elements per nonzero: the dense dimensions' sizes
  for (int64_t d = sd; d < nd; ++d) row *= in.size(d);
  int64_t total = 0;
  for (std::size_t r = 0; r < up; ++r) {
    index_counts[r] = static_cast<std::size_t>(heads[3 * r + 2] * sd);
    value_counts[r] = static_cast<std::size_t>(heads[3 * r + 2] * row);
    total += heads[3 * r + 2];
  }
  const at::Tensor my_index = in._indices().t().contiguous();  // nnz x sd
  const at::Tensor my_values = in._values().contiguous();
  const at::Tensor index = at::empty({total, sd}, my_index.options());
  const auto my_shape = my_values.sizes();
  std::vector<int64_t> value_shape(my_shape.begin(), my_shape.end());
  value_shape[0] = total;
  const at::Tensor values = at::empty(value_shape, my_values.options());
  visit_typed(*comm_, t.scalar_type(), [&]<class C, class T>(C& c, type_tag<T>) {
    c.all_gatherv(std::span<const int64_t>(span_of<int64_t>(my_index)), span_of<int64_t>(index),
                  index_counts);
    c.all_gatherv(std::span<const T>(span_of<T>(my_values)), span_of<T>(values), value_counts);
  });
  // 4. The sum: coalescing adds the values of repeated indices.
  const at::Tensor sum =
      at::sparse_coo_tensor(index.t(), values, in.sizes(), in.options()).coalesce();
  t.copy_(sum);
}

}  // namespace tutti_torch
