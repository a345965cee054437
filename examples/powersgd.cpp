// PowerSGD gradient compression (Vogels, Karimireddy & Jaggi, NeurIPS 2019) written as a
// tutti::bucketer all_reduce_hook, the way torch's powerSGD_hook replaces DDP's all-reduce.
//
//   ./powersgd                 4 ranks over shared memory (tutti::spawn), rank 2
//   ./powersgd --np 2 --rank 4
//
// For each weight matrix M (n x m) of a bucket, with error feedback and a warm-started Q:
//   M += error;  P = mean_ranks(M Q);  P = orthonormal columns of P (Gram-Schmidt);
//   Q = mean_ranks(M^T P);  M_hat = P Q^T;  error = M - M_hat;  the gradient becomes M_hat.
// All P's of a bucket travel in one all-reduce and all Q's in another: 2 (n + m) r numbers
// per matrix instead of n m. Vectors (biases) are averaged uncompressed.
//
// Checked against the definition: each step, rank 0 also gathers every rank's M and computes
// P, Q and M_hat from the formulas above, one rank after another; the hook's M_hat must equal
// it within 1e-9 relative (double precision), every rank must hold the same parameters at the
// end, and the loss must fall. Otherwise the program fails.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <tutti/tutti.hpp>

#include "synthetic.hpp"

namespace {

using real = double;
constexpr std::size_t in_dim = 16, hidden = 32, out_dim = 8;

using synthetic::noise;

// Sample i of the synthetic dataset (examples/synthetic.hpp).
void sample(std::size_t i, real* x, real* y) { synthetic::sample(i, in_dim, out_dim, x, y); }

// Row-major n x m matrices.
using matrix = std::vector<real>;
matrix times(const matrix& a, const matrix& b, std::size_t n, std::size_t k, std::size_t m) {
  matrix c(n * m, 0.0);  // (n x k) (k x m)
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < k; ++j)
      for (std::size_t l = 0; l < m; ++l) c[i * m + l] += a[i * k + j] * b[j * m + l];
  return c;
}
matrix transpose(const matrix& a, std::size_t n, std::size_t m) {
  matrix t(m * n);
  for (std::size_t i = 0; i < n; ++i)
    for (std::size_t j = 0; j < m; ++j) t[j * n + i] = a[i * m + j];
  return t;
}
// Orthonormal columns of p (n x r), in place: classical Gram-Schmidt, as torch's hook does.
void orthonormalize(matrix& p, std::size_t n, std::size_t r) {
  for (std::size_t c = 0; c < r; ++c) {
    for (std::size_t prev = 0; prev < c; ++prev) {
      real dot = 0;
      for (std::size_t i = 0; i < n; ++i) dot += p[i * r + c] * p[i * r + prev];
      for (std::size_t i = 0; i < n; ++i) p[i * r + c] -= dot * p[i * r + prev];
    }
    real norm = 0;
    for (std::size_t i = 0; i < n; ++i) norm += p[i * r + c] * p[i * r + c];
    norm = std::sqrt(norm) + 1e-12;
    for (std::size_t i = 0; i < n; ++i) p[i * r + c] /= norm;
  }
}

// The model: W1 (hidden x in), b1, W2 (out x hidden), b2; gradient i has shape[i].
struct shape {
  std::size_t rows, cols;  // a vector: 1 x n
};
const shape shapes[4] = {{hidden, in_dim}, {1, hidden}, {out_dim, hidden}, {1, out_dim}};

template <class Comm>
class powersgd_hook {
 public:
  powersgd_hook(Comm& comm, std::size_t rank_r) : comm_(comm), r_(rank_r) {}

  tutti::work operator()(const tutti::bucket_view& b) {
    auto data = b.as<real>();
    const std::vector<mat> mats = average_vectors(b, data);
    std::vector<matrix> ms;
    const std::vector<matrix> phat = orthonormal_ps(mats, data, ms);
    apply_qs(mats, ms, phat, data);
    return {};  // done: every collective was blocking
  }

  /// Rank 0 computes the definition from every rank's M; after() compares.
  struct checker {
    Comm& comm;
    powersgd_hook& hook;
    std::vector<std::vector<std::vector<real>>> all;  // [matrix][rank] = that rank's M
    double worst = 0;
    std::size_t checked = 0;

    void before(const std::vector<matrix>& ms, std::size_t count) {
      all.assign(count, {});
      for (std::size_t k = 0; k < count; ++k) all[k] = comm.gather_object(ms[k], 0);
    }
    void after(std::size_t k, std::size_t grad, const matrix& mhat) {
      if (comm.rank() != 0) return;
      const shape s = shapes[grad];
      const std::size_t n = s.rows, m = s.cols, r = std::min({hook.r_, n, m});
      const auto p = static_cast<real>(all[k].size());
      const matrix& q0 = hook.q_before_[grad];
      matrix pm(n * r, 0.0);  // mean of M_r Q, rank by rank
      for (const auto& mr : all[k]) {
        const matrix t = times(mr, q0, n, m, r);
        for (std::size_t i = 0; i < t.size(); ++i) pm[i] += t[i];
      }
      for (real& e : pm) e /= p;
      orthonormalize(pm, n, r);
      matrix qm(m * r, 0.0);  // mean of M_r^T P
      for (const auto& mr : all[k]) {
        const matrix t = times(transpose(mr, n, m), pm, m, n, r);
        for (std::size_t i = 0; i < t.size(); ++i) qm[i] += t[i];
      }
      for (real& e : qm) e /= p;
      const matrix want = times(pm, transpose(qm, m, r), n, r, m);
      for (std::size_t i = 0; i < want.size(); ++i) {
        worst = std::max(worst, synthetic::relative_difference(want[i], mhat[i], 1e-6));
      }
      ++checked;
    }
  };
  void check_with(checker* c) { check_ = c; }

 private:
  // A weight matrix of the bucket: its gradient, where it starts in the bucket, n x m, rank r.
  struct mat {
    std::size_t grad, at, n, m, r;
  };

  // Averages the bucket's vectors uncompressed, packed into one all-reduce; returns its
  // matrices.
  std::vector<mat> average_vectors(const tutti::bucket_view& b, std::span<real> data) {
    std::vector<mat> mats;
    std::vector<real> vecs;
    std::vector<std::pair<std::size_t, std::size_t>> vec_at;  // where each vector is, its size
    std::size_t at = 0;
    for (const std::size_t g : b.gradients) {
      const shape s = shapes[g];
      if (s.rows == 1) {
        vec_at.emplace_back(at, s.cols);
        vecs.insert(vecs.end(), data.begin() + static_cast<std::ptrdiff_t>(at),
                    data.begin() + static_cast<std::ptrdiff_t>(at + s.cols));
      } else {
        mats.push_back({g, at, s.rows, s.cols, std::min({r_, s.rows, s.cols})});
      }
      at += s.rows * s.cols;
    }
    comm_.all_reduce(std::span<real>(vecs), tutti::sum);
    std::size_t v = 0;
    for (const auto& [where, n] : vec_at)
      for (std::size_t i = 0; i < n; ++i) data[where + i] = vecs[v++] / ranks();
    return mats;
  }

  // M += error (into `ms`); P = mean_ranks(M Q), every matrix's packed into one all-reduce;
  // returns each P with orthonormal columns.
  std::vector<matrix> orthonormal_ps(const std::vector<mat>& mats, std::span<const real> data,
                                     std::vector<matrix>& ms) {
    std::vector<real> ps;
    for (const mat& x : mats) {
      matrix m(data.begin() + static_cast<std::ptrdiff_t>(x.at),
               data.begin() + static_cast<std::ptrdiff_t>(x.at + x.n * x.m));
      auto& err = error_[x.grad];
      if (err.empty()) err.assign(m.size(), 0.0);
      for (std::size_t i = 0; i < m.size(); ++i) m[i] += err[i];
      const matrix mp = times(m, q_of(x.grad, x.m, x.r), x.n, x.m, x.r);
      ps.insert(ps.end(), mp.begin(), mp.end());
      ms.push_back(std::move(m));
    }
    if (check_) check_->before(ms, mats.size());
    comm_.all_reduce(std::span<real>(ps), tutti::sum);
    std::vector<matrix> phat;
    std::size_t off = 0;
    for (const mat& x : mats) {
      matrix pk(ps.begin() + static_cast<std::ptrdiff_t>(off),
                ps.begin() + static_cast<std::ptrdiff_t>(off + x.n * x.r));
      off += x.n * x.r;
      for (real& e : pk) e /= ranks();
      orthonormalize(pk, x.n, x.r);
      phat.push_back(std::move(pk));
    }
    return phat;
  }

  // Q = mean_ranks(M^T P), packed into the second all-reduce; the gradient becomes
  // M_hat = P Q^T, and error = M - M_hat.
  void apply_qs(const std::vector<mat>& mats, const std::vector<matrix>& ms,
                const std::vector<matrix>& phat, std::span<real> data) {
    std::vector<real> qs;
    for (std::size_t k = 0; k < mats.size(); ++k) {
      const mat& x = mats[k];
      const matrix qk = times(transpose(ms[k], x.n, x.m), phat[k], x.m, x.n, x.r);
      qs.insert(qs.end(), qk.begin(), qk.end());
    }
    comm_.all_reduce(std::span<real>(qs), tutti::sum);
    std::size_t off = 0;
    for (std::size_t k = 0; k < mats.size(); ++k) {
      const mat& x = mats[k];
      matrix& q = q_[x.grad];  // warm start: the next step begins from this Q
      q.assign(qs.begin() + static_cast<std::ptrdiff_t>(off),
               qs.begin() + static_cast<std::ptrdiff_t>(off + x.m * x.r));
      off += x.m * x.r;
      for (real& e : q) e /= ranks();
      const matrix mhat = times(phat[k], transpose(q, x.m, x.r), x.n, x.r, x.m);
      auto& err = error_[x.grad];
      for (std::size_t i = 0; i < mhat.size(); ++i) {
        err[i] = ms[k][i] - mhat[i];
        data[x.at + i] = mhat[i];
      }
      if (check_) check_->after(k, x.grad, mhat);
    }
  }

  [[nodiscard]] real ranks() const { return static_cast<real>(comm_.size()); }

  // Q of gradient g (m x r): the last step's, or a random one the same on every rank.
  const matrix& q_of(std::size_t g, std::size_t m, std::size_t r) {
    matrix& q = q_[g];
    if (q.empty()) {
      q.resize(m * r);
      for (std::size_t i = 0; i < q.size(); ++i) q[i] = noise(9'000'000 + g * 100'000 + i);
    }
    q_before_[g] = q;
    return q;
  }

  Comm& comm_;
  std::size_t r_;
  std::map<std::size_t, matrix> q_, q_before_, error_;
  checker* check_ = nullptr;
};

struct config {
  int np = 4;
  std::size_t rank = 2;
  std::size_t steps = 40;
  std::size_t batch = 8;  // per rank and step
  real lr = 0.2;
};

// The model's parameters and gradients (shapes[k]), and one rank's forward and backward.
struct model {
  std::vector<std::vector<real>> params, grads;

  model() : params(4), grads(4) {
    for (std::size_t k = 0; k < 4; ++k) {
      params[k].assign(shapes[k].rows * shapes[k].cols, 0.0);
      grads[k].assign(params[k].size(), 0.0);
    }
    for (std::size_t i = 0; i < params[0].size(); ++i) params[0][i] = 0.25 * noise(100 + i);
    for (std::size_t i = 0; i < params[2].size(); ++i) params[2][i] = 0.18 * noise(200'000 + i);
  }

  // Adds the gradients of the mean loss over `batch` samples from `first` on; returns that loss.
  real accumulate(std::size_t first, std::size_t batch) {
    const auto& w1 = params[0];
    const auto& b1 = params[1];
    const auto& w2 = params[2];
    const auto& b2 = params[3];
    std::vector<real> x(in_dim), y(out_dim), h(hidden), d2(out_dim), d1(hidden);
    const real weight = 1.0 / static_cast<real>(batch);
    real loss = 0;
    for (std::size_t s = 0; s < batch; ++s) {
      sample(first + s, x.data(), y.data());
      for (std::size_t j = 0; j < hidden; ++j) {
        real a = b1[j];
        for (std::size_t k = 0; k < in_dim; ++k) a += w1[j * in_dim + k] * x[k];
        h[j] = std::tanh(a);
      }
      for (std::size_t o = 0; o < out_dim; ++o) {
        real a = b2[o];
        for (std::size_t j = 0; j < hidden; ++j) a += w2[o * hidden + j] * h[j];
        d2[o] = a - y[o];
        loss += 0.5 * d2[o] * d2[o] * weight;
      }
      for (std::size_t j = 0; j < hidden; ++j) {
        real d = 0;
        for (std::size_t o = 0; o < out_dim; ++o) d += w2[o * hidden + j] * d2[o];
        d1[j] = d * (1 - h[j] * h[j]);
      }
      for (std::size_t o = 0; o < out_dim; ++o) {
        grads[3][o] += weight * d2[o];
        for (std::size_t j = 0; j < hidden; ++j) grads[2][o * hidden + j] += weight * d2[o] * h[j];
      }
      for (std::size_t j = 0; j < hidden; ++j) {
        grads[1][j] += weight * d1[j];
        for (std::size_t k = 0; k < in_dim; ++k) grads[0][j * in_dim + k] += weight * d1[j] * x[k];
      }
    }
    return loss;
  }

  // Plain SGD; the gradients start again from zero.
  void step(real lr) {
    for (std::size_t k = 0; k < 4; ++k)
      for (std::size_t i = 0; i < params[k].size(); ++i)
        params[k][i] -= lr * std::exchange(grads[k][i], 0.0);
  }
};

template <class Comm>
int train(Comm& comm, const config& c) {
  model net;
  powersgd_hook<Comm> hook(comm, c.rank);
  typename powersgd_hook<Comm>::checker check{comm, hook, {}, 0.0, 0};
  hook.check_with(&check);
  tutti::bucketer b(comm,
                    {.first_bucket_bytes = 2048,
                     .bucket_bytes = 4096,
                     .all_reduce_hook = [&](const tutti::bucket_view& v) { return hook(v); }});
  for (auto& g : net.grads) b.add(std::span<real>(g));

  const auto ranks = static_cast<std::size_t>(comm.size());
  const auto rank = static_cast<std::size_t>(comm.rank());
  real first = -1, last = 0;
  for (std::size_t step = 0; step < c.steps; ++step) {
    real loss = net.accumulate((step * ranks + rank) * c.batch, c.batch);
    for (std::size_t k = 4; k-- > 0;) b.mark_ready(k);
    b.finish();  // the hook: compressed, averaged
    net.step(c.lr);
    comm.all_reduce(std::span<real>(&loss, 1), tutti::avg);
    if (step == 0) first = loss;
    last = loss;
  }
  std::vector<real> flat;
  for (const auto& p : net.params) flat.insert(flat.end(), p.begin(), p.end());
  const auto everyone = comm.all_gather_object(flat);
  const bool same = std::all_of(everyone.begin(), everyone.end(),
                                [&](const auto& v) { return v == everyone.front(); });
  if (comm.rank() != 0) return same ? 0 : 1;
  const bool ok = same && check.checked == 2 * c.steps && check.worst <= 1e-9 && last < first;
  std::printf(
      "powersgd: %d ranks, rank %zu, %zu steps: %zu compressed matrices checked against the "
      "definition, largest relative difference %.3g; ranks %s; loss %.5f -> %.5f: %s\n",
      comm.size(), c.rank, c.steps, check.checked, check.worst, same ? "agree" : "DIFFER",
      static_cast<double>(first), static_cast<double>(last), ok ? "ok" : "WRONG");
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
    if (n < 1) bad = true;
    if (a == "--np")
      c.np = static_cast<int>(n);
    else if (a == "--rank")
      c.rank = static_cast<std::size_t>(n);
    else if (a == "--steps")
      c.steps = static_cast<std::size_t>(n);
    else
      bad = true;
  }
  if (bad) {
    std::fprintf(stderr, "usage: %s [--np N] [--rank R] [--steps N]\n", argv[0]);
    return 2;
  }
  return tutti::spawn(c.np, [&c] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    return train(comm, c);
  });
}
