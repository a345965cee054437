// Tensor parallel inside a group, data parallel across groups: a 2-layer MLP on a 2x2
// tutti::mesh of 4 ranks (dp x tp), checked against one process training the whole model.
//
//   ./tensor_parallel                  4 ranks over shared memory (tutti::spawn), 2 x 2
//   ./tensor_parallel --dp 1 --tp 4    other shapes (dp * tp ranks; tp divides the hidden size)
//
// The model is y = W2 tanh(W1 x + b1) + b2. In Megatron-LM's notation (Y = X A) the first
// layer's matrix is split by columns and the second's by rows: tp rank t holds the hidden units
// [t H/tp, (t+1) H/tp) — its rows of W1 and b1 and its columns of W2 — computes its part of
// the output, and one all-reduce over `tp` sums the parts. The backward pass needs no more
// communication (the input needs no gradient). Each `dp` group trains on its own samples; a
// tutti::bucketer over `dp` averages the gradients, as DDP would. b2 is replicated across tp.
//
// After the steps, rank 0 gathers every rank's slices (gather_object) and compares them with
// the weights of one process that trained the whole model on all the groups' samples: equal
// within 1e-9 relative (double precision), or the program fails. The replicas along dp must agree
// exactly.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include <tutti/tutti.hpp>

#include "synthetic.hpp"

namespace {

constexpr std::size_t in_dim = 16, hidden = 32, out_dim = 4;
// Double precision, so that the check against one process measures the parallel schedule (a
// different order of the same sums), not real rounding compounded over the steps.
using real = double;

using synthetic::noise;

// Sample i of the synthetic dataset (examples/synthetic.hpp).
void sample(std::size_t i, real* x, real* y) { synthetic::sample(i, in_dim, out_dim, x, y); }

// The hidden units [first, first + n) of the model: W1 rows (n x in_dim), b1 (n), W2 columns
// (out_dim x n), and b2 (out_dim). The whole model is the slice with first 0, n hidden.
struct slice {
  std::size_t first = 0, n = 0;
  std::vector<real> w1, b1, w2, b2;
  std::vector<real> g_w1, g_b1, g_w2, g_b2;  // gradients, same shapes

  slice(std::size_t f, std::size_t count) : first(f), n(count) {
    w1.resize(n * in_dim);
    b1.assign(n, 0.0);
    w2.resize(out_dim * n);
    b2.assign(out_dim, 0.0);
    // Every slice cuts the same initial whole model: element (j, k) of W1 is noise of its
    // global index, so one process and the tp ranks start from the same weights.
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t k = 0; k < in_dim; ++k)
        w1[j * in_dim + k] = 0.25 * noise(5'000'000 + (first + j) * in_dim + k);
    for (std::size_t o = 0; o < out_dim; ++o)
      for (std::size_t j = 0; j < n; ++j)
        w2[o * n + j] = 0.18 * noise(6'000'000 + o * hidden + first + j);
    g_w1.assign(w1.size(), 0.0);
    g_b1.assign(b1.size(), 0.0);
    g_w2.assign(w2.size(), 0.0);
    g_b2.assign(b2.size(), 0.0);
  }

  // This slice's part of the output for each sample (no b2): z[s][o].
  void forward(const std::vector<real>& xs, std::size_t batch, std::vector<real>& h,
               std::vector<real>& z) const {
    h.assign(batch * n, 0.0);
    z.assign(batch * out_dim, 0.0);
    for (std::size_t s = 0; s < batch; ++s) {
      const real* x = &xs[s * in_dim];
      for (std::size_t j = 0; j < n; ++j) {
        real a = b1[j];
        for (std::size_t k = 0; k < in_dim; ++k) a += w1[j * in_dim + k] * x[k];
        h[s * n + j] = std::tanh(a);
      }
      for (std::size_t o = 0; o < out_dim; ++o) {
        real a = 0;
        for (std::size_t j = 0; j < n; ++j) a += w2[o * n + j] * h[s * n + j];
        z[s * out_dim + o] = a;
      }
    }
  }

  // Gradients of sum_s weight * 0.5 |z_s + b2 - y_s|^2 given dz = z + b2 - y (the whole
  // output's, the same on every tp rank).
  void backward(const std::vector<real>& xs, std::size_t batch, const std::vector<real>& h,
                const std::vector<real>& dz, real weight) {
    for (std::size_t s = 0; s < batch; ++s) {
      const real* x = &xs[s * in_dim];
      for (std::size_t o = 0; o < out_dim; ++o) {
        g_b2[o] += weight * dz[s * out_dim + o];
        for (std::size_t j = 0; j < n; ++j)
          g_w2[o * n + j] += weight * dz[s * out_dim + o] * h[s * n + j];
      }
      for (std::size_t j = 0; j < n; ++j) {
        real d = 0;
        for (std::size_t o = 0; o < out_dim; ++o) d += w2[o * n + j] * dz[s * out_dim + o];
        d *= 1 - h[s * n + j] * h[s * n + j];
        g_b1[j] += weight * d;
        for (std::size_t k = 0; k < in_dim; ++k) g_w1[j * in_dim + k] += weight * d * x[k];
      }
    }
  }

  void step(real lr) {
    auto update = [lr](std::vector<real>& p, std::vector<real>& g) {
      for (std::size_t i = 0; i < p.size(); ++i) {
        p[i] -= lr * g[i];
        g[i] = 0;
      }
    };
    update(w1, g_w1);
    update(b1, g_b1);
    update(w2, g_w2);
    update(b2, g_b2);
  }
};

struct config {
  int dp = 2, tp = 2;
  std::size_t batch = 8;  // samples per dp group and step
  std::size_t steps = 40;
  real lr = 0.1;
};

// The samples of dp group d at step k: batch consecutive indices, the groups side by side.
std::vector<real> inputs(const config& c, std::size_t k, std::size_t first_group,
                         std::size_t groups, std::vector<real>& ys) {
  const std::size_t count = c.batch * groups;
  std::vector<real> xs(count * in_dim);
  ys.assign(count * out_dim, 0.0);
  for (std::size_t s = 0; s < count; ++s)
    sample((k * static_cast<std::size_t>(c.dp) + first_group) * c.batch + s, &xs[s * in_dim],
           &ys[s * out_dim]);
  return xs;
}

// One process, the whole model, every group's samples: the reference.
slice reference(const config& c) {
  slice m(0, hidden);
  const auto all = static_cast<std::size_t>(c.dp) * c.batch;
  std::vector<real> ys, h, z;
  for (std::size_t k = 0; k < c.steps; ++k) {
    const auto xs = inputs(c, k, 0, static_cast<std::size_t>(c.dp), ys);
    m.forward(xs, all, h, z);
    for (std::size_t i = 0; i < z.size(); ++i) z[i] += m.b2[i % out_dim] - ys[i];
    m.backward(xs, all, h, z, 1.0 / static_cast<real>(all));
    m.step(c.lr);
  }
  return m;
}

template <class Comm>
int train(Comm& world, const config& c) {
  tutti::mesh mesh(world, {c.dp, c.tp}, {"dp", "tp"});
  Comm& tp = mesh["tp"];
  Comm& dp = mesh["dp"];
  const std::size_t per = hidden / static_cast<std::size_t>(c.tp);
  const auto t = static_cast<std::size_t>(mesh.coord("tp"));
  const auto d = static_cast<std::size_t>(mesh.coord("dp"));
  slice m(t * per, per);
  // DDP over dp: the bucketer averages each gradient over the dp replicas.
  tutti::bucketer grads(dp, {.first_bucket_bytes = 512, .bucket_bytes = 1024});
  const std::size_t i_w1 = grads.add(std::span<real>(m.g_w1));
  const std::size_t i_b1 = grads.add(std::span<real>(m.g_b1));
  const std::size_t i_w2 = grads.add(std::span<real>(m.g_w2));
  const std::size_t i_b2 = grads.add(std::span<real>(m.g_b2));
  std::vector<real> ys, h, z;
  for (std::size_t k = 0; k < c.steps; ++k) {
    const auto xs = inputs(c, k, d, 1, ys);
    m.forward(xs, c.batch, h, z);
    tp.all_reduce(std::span<real>(z), tutti::sum);  // the parts of the output, summed
    for (std::size_t i = 0; i < z.size(); ++i) z[i] += m.b2[i % out_dim] - ys[i];
    m.backward(xs, c.batch, h, z, 1.0 / static_cast<real>(c.batch));
    grads.mark_ready(i_b2);
    grads.mark_ready(i_w2);
    grads.mark_ready(i_b1);
    grads.mark_ready(i_w1);
    grads.finish();
    m.step(c.lr);
  }
  // Rank 0 collects every rank's slice and checks it against one process.
  std::vector<real> mine;
  for (const auto* p : {&m.w1, &m.b1, &m.w2, &m.b2}) mine.insert(mine.end(), p->begin(), p->end());
  const auto all = world.gather_object(mine, 0);
  if (world.rank() != 0) return 0;
  const slice ref = reference(c);
  double worst = 0;
  bool replicas_agree = true;
  for (int r = 0; r < world.size(); ++r) {
    const auto co = mesh.coords_of(r);
    const auto tr = static_cast<std::size_t>(co[1]);
    const auto& v = all[static_cast<std::size_t>(r)];
    if (v != all[static_cast<std::size_t>(mesh.rank_at(std::vector<int>{0, co[1]}))])
      replicas_agree = false;
    std::size_t at = 0;
    auto against = [&](real got, real want) {
      worst = std::max(worst, synthetic::relative_difference(got, want));
    };
    for (std::size_t j = 0; j < per; ++j)
      for (std::size_t k = 0; k < in_dim; ++k)
        against(v[at++], ref.w1[(tr * per + j) * in_dim + k]);
    for (std::size_t j = 0; j < per; ++j) against(v[at++], ref.b1[tr * per + j]);
    for (std::size_t o = 0; o < out_dim; ++o)
      for (std::size_t j = 0; j < per; ++j) against(v[at++], ref.w2[o * hidden + tr * per + j]);
    for (std::size_t o = 0; o < out_dim; ++o) against(v[at++], ref.b2[o]);
  }
  const bool ok = worst <= 1e-9 && replicas_agree;
  std::printf(
      "tensor_parallel: dp %d x tp %d, %zu steps: largest relative difference from one process "
      "%.3g; dp replicas %s: %s\n",
      c.dp, c.tp, c.steps, worst, replicas_agree ? "identical" : "DIFFER", ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  config c;
  bool bad = argc % 2 == 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    char* end = nullptr;
    const long parsed = std::strtol(argv[i + 1], &end, 10);
    const long n = *end == '\0' ? parsed : 0;  // not a whole number ("2x"): refused below
    if (n < 1)
      bad = true;
    else if (a == "--dp")
      c.dp = static_cast<int>(n);
    else if (a == "--tp")
      c.tp = static_cast<int>(n);
    else if (a == "--steps")
      c.steps = static_cast<std::size_t>(n);
    else
      bad = true;
  }
  if (bad || hidden % static_cast<std::size_t>(c.tp) != 0) {
    std::fprintf(stderr, "usage: %s [--dp N] [--tp N (divides %zu)] [--steps N]\n", argv[0],
                 hidden);
    return 2;
  }
  return tutti::spawn(c.dp * c.tp, [&c] {
    auto world = tutti::communicator<tutti::shm>::from_env();
    return train(world, c);
  });
}
