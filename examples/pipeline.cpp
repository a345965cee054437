// Pipeline parallel: a 4-layer MLP cut into 2-4 stages, one per rank, trained with the 1F1B
// schedule of micro-batches over non-blocking point-to-point (isend, irecv, batch), checked
// against one process training the whole model.
//
//   ./pipeline                      4 stages (4 ranks over shared memory, tutti::spawn)
//   ./pipeline --stages 2 --micro 6 2 stages, 6 micro-batches per step
//
// Stage s holds layers [4s/S, 4(s+1)/S). Each step's batch is cut into micro-batches; stage s
// first runs S-1-s forwards (warm-up), then alternates one forward and one backward, then
// runs the remaining backwards (PipeDream-Flush's 1F1B, as Megatron-LM schedules it).
// Activations travel to the next stage and their gradients back to the previous one; in the
// steady phase a stage sends its output and receives a gradient as one batch. Sends never wait
// for the receiver, so no ordering of the stages' calls can deadlock. Every stage accumulates
// its layers' gradients over the micro-batches and steps plain SGD.
//
// After the steps, rank 0 gathers every stage's layers (gather_object) and compares them with
// one process that ran the whole model over the same micro-batches: equal within 1e-9 relative
// (double precision: the check measures the schedule, not rounding), or the program fails.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include <tutti/tutti.hpp>

#include "synthetic.hpp"

namespace {

using real = double;
constexpr std::size_t in_dim = 16, out_dim = 4;
constexpr std::size_t widths[5] = {in_dim, 32, 32, 24, out_dim};  // layer l: widths[l] -> [l+1]
constexpr std::size_t layers = 4;

using synthetic::noise;

// Sample i of the synthetic dataset (examples/synthetic.hpp).
void sample(std::size_t i, real* x, real* y) { synthetic::sample(i, in_dim, out_dim, x, y); }

// One dense layer, out = f(W in + b), f = tanh except on the last layer.
struct layer {
  std::size_t l, in, out;
  std::vector<real> w, b, gw, gb;

  explicit layer(std::size_t index) : l(index), in(widths[index]), out(widths[index + 1]) {
    w.resize(out * in);
    const real scale = 1.0 / std::sqrt(static_cast<real>(in));
    for (std::size_t i = 0; i < w.size(); ++i) w[i] = scale * noise(7'000'000 * (l + 1) + i);
    b.assign(out, 0.0);
    gw.assign(w.size(), 0.0);
    gb.assign(b.size(), 0.0);
  }
  [[nodiscard]] bool last() const { return l + 1 == layers; }

  // A micro-batch of n rows: y = f(x W^T + b).
  [[nodiscard]] std::vector<real> forward(const std::vector<real>& x, std::size_t n) const {
    std::vector<real> y(n * out);
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t j = 0; j < out; ++j) {
        real a = b[j];
        for (std::size_t k = 0; k < in; ++k) a += w[j * in + k] * x[s * in + k];
        y[s * out + j] = last() ? a : std::tanh(a);
      }
    return y;
  }
  // Given the input x, the output y and dL/dy, accumulates the gradients; returns dL/dx.
  std::vector<real> backward(const std::vector<real>& x, const std::vector<real>& y,
                             const std::vector<real>& dy, std::size_t n) {
    std::vector<real> dx(n * in, 0.0);
    for (std::size_t s = 0; s < n; ++s)
      for (std::size_t j = 0; j < out; ++j) {
        const real v = y[s * out + j];
        const real d = dy[s * out + j] * (last() ? 1.0 : 1.0 - v * v);
        gb[j] += d;
        for (std::size_t k = 0; k < in; ++k) {
          gw[j * in + k] += d * x[s * in + k];
          dx[s * in + k] += d * w[j * in + k];
        }
      }
    return dx;
  }
  void step(real lr) {
    for (std::size_t i = 0; i < w.size(); ++i) w[i] -= lr * std::exchange(gw[i], 0.0);
    for (std::size_t i = 0; i < b.size(); ++i) b[i] -= lr * std::exchange(gb[i], 0.0);
  }
};

struct config {
  int stages = 4;
  std::size_t micro = 4;  // micro-batches per step
  std::size_t rows = 4;   // samples per micro-batch
  std::size_t steps = 30;
  real lr = 0.1;
};

// Micro-batch m of step k: its inputs, and its targets in `ys`.
std::vector<real> micro_batch(const config& c, std::size_t k, std::size_t m,
                              std::vector<real>& ys) {
  std::vector<real> xs(c.rows * in_dim);
  ys.assign(c.rows * out_dim, 0.0);
  for (std::size_t s = 0; s < c.rows; ++s)
    sample((k * c.micro + m) * c.rows + s, &xs[s * in_dim], &ys[s * out_dim]);
  return xs;
}

// dL/dy for the loss sum over the step's samples of 0.5 |y - target|^2 / samples.
std::vector<real> loss_gradient(const config& c, const std::vector<real>& y,
                                const std::vector<real>& target) {
  std::vector<real> d(y.size());
  const real weight = 1.0 / static_cast<real>(c.micro * c.rows);
  for (std::size_t i = 0; i < y.size(); ++i) d[i] = weight * (y[i] - target[i]);
  return d;
}

// One process, the whole model, the same micro-batches in the same order.
std::vector<layer> reference(const config& c) {
  std::vector<layer> net;
  for (std::size_t l = 0; l < layers; ++l) net.emplace_back(l);
  std::vector<real> ys;
  for (std::size_t k = 0; k < c.steps; ++k) {
    for (std::size_t m = 0; m < c.micro; ++m) {
      std::vector<std::vector<real>> acts{micro_batch(c, k, m, ys)};
      for (const layer& L : net) acts.push_back(L.forward(acts.back(), c.rows));
      auto d = loss_gradient(c, acts.back(), ys);
      for (std::size_t l = layers; l-- > 0;) d = net[l].backward(acts[l], acts[l + 1], d, c.rows);
    }
    for (layer& L : net) L.step(c.lr);
  }
  return net;
}

// The weights and biases of `net`'s layers, one after another.
std::vector<real> flatten(const std::vector<layer>& net) {
  std::vector<real> flat;
  for (const layer& L : net) {
    flat.insert(flat.end(), L.w.begin(), L.w.end());
    flat.insert(flat.end(), L.b.begin(), L.b.end());
  }
  return flat;
}

// One rank's stage: its layers, its neighbours, and the 1F1B schedule of one step.
template <class Comm>
class stage {
 public:
  stage(Comm& comm, const config& c)
      : comm_(comm),
        c_(c),
        S_(static_cast<std::size_t>(comm.size())),
        s_(static_cast<std::size_t>(comm.rank())),
        first_(s_ * layers / S_),
        end_((s_ + 1) * layers / S_) {
    for (std::size_t l = first_; l < end_; ++l) mine_.emplace_back(l);
  }
  [[nodiscard]] const std::vector<layer>& layers_held() const { return mine_; }

  // Step k: warm-up forwards, then one forward and one backward at a time, then the remaining
  // backwards; then SGD on this stage's layers.
  void step(std::size_t k) {
    k_ = k;
    acts_.assign(c_.micro, {});
    targets_.assign(c_.micro, {});
    grad_in_.assign(c_.micro, {});
    grad_out_.assign(c_.micro, {});
    const std::size_t warmup = std::min(S_ - 1 - s_, c_.micro);
    for (std::size_t m = 0; m < warmup; ++m) {
      forward(m);
      if (!tail())
        sends_.push_back(comm_.isend(std::span<const real>(acts_[m].back()), next(), fwd_tag(m)));
    }
    for (std::size_t i = 0; i + warmup < c_.micro; ++i) {
      const std::size_t m = warmup + i;
      forward(m);
      if (!tail()) {
        // Send this output and receive micro-batch i's gradient together.
        grad_in_[i].resize(c_.rows * widths[end_]);
        comm_.batch()
            .send(std::span<const real>(acts_[m].back()), next(), fwd_tag(m))
            .recv(std::span<real>(grad_in_[i]), next(), bwd_tag(i))
            .run();
      }
      backward(i);
    }
    for (std::size_t i = c_.micro - warmup; i < c_.micro; ++i) {
      if (!tail()) {
        grad_in_[i].resize(c_.rows * widths[end_]);
        comm_.irecv(std::span<real>(grad_in_[i]), next(), bwd_tag(i)).wait();
      }
      backward(i);
    }
    for (auto& w : sends_) w.wait();  // their buffers lived until now
    sends_.clear();
    for (layer& L : mine_) L.step(c_.lr);
  }

 private:
  [[nodiscard]] bool head() const { return s_ == 0; }
  [[nodiscard]] bool tail() const { return s_ + 1 == S_; }
  [[nodiscard]] int prev() const { return static_cast<int>(s_) - 1; }
  [[nodiscard]] int next() const { return static_cast<int>(s_) + 1; }
  static std::uint64_t fwd_tag(std::size_t m) { return m; }
  static std::uint64_t bwd_tag(std::size_t m) { return 1000 + m; }

  // Micro-batch m's input (from the data or the previous stage) through this stage's layers.
  void forward(std::size_t m) {
    std::vector<real> x;
    if (head()) {
      x = micro_batch(c_, k_, m, targets_[m]);
    } else {
      x.resize(c_.rows * widths[first_]);
      comm_.irecv(std::span<real>(x), prev(), fwd_tag(m)).wait();
      if (tail()) (void)micro_batch(c_, k_, m, targets_[m]);
    }
    acts_[m].push_back(std::move(x));
    for (const layer& L : mine_) acts_[m].push_back(L.forward(acts_[m].back(), c_.rows));
  }
  // Micro-batch m's gradient (from the loss or the next stage) back through this stage's
  // layers, and on to the previous stage.
  void backward(std::size_t m) {
    std::vector<real> d = tail() ? loss_gradient(c_, acts_[m].back(), targets_[m]) : grad_in_[m];
    for (std::size_t i = mine_.size(); i-- > 0;)
      d = mine_[i].backward(acts_[m][i], acts_[m][i + 1], d, c_.rows);
    grad_out_[m] = std::move(d);
    if (!head())
      sends_.push_back(comm_.isend(std::span<const real>(grad_out_[m]), prev(), bwd_tag(m)));
  }

  Comm& comm_;
  const config& c_;
  std::size_t S_, s_, first_, end_;  // stages, this one, its layers [first_, end_)
  std::vector<layer> mine_;
  std::size_t k_ = 0;  // the step under way
  // acts_[m]: the inputs of each of this stage's layers and the last output, for micro-batch m.
  std::vector<std::vector<std::vector<real>>> acts_;
  std::vector<std::vector<real>> targets_, grad_in_, grad_out_;
  std::vector<tutti::work> sends_;  // waited at the end of the step
};

template <class Comm>
int train(Comm& comm, const config& c) {
  stage<Comm> st(comm, c);
  for (std::size_t k = 0; k < c.steps; ++k) st.step(k);

  // Rank 0 collects every stage's layers and checks them against one process.
  const auto all = comm.gather_object(flatten(st.layers_held()), 0);
  if (comm.rank() != 0) return 0;
  const std::vector<real> want = flatten(reference(c));
  std::vector<real> got;
  for (const auto& part : all) got.insert(got.end(), part.begin(), part.end());
  double worst = got.size() == want.size() ? 0.0 : 1.0;
  for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i)
    worst = std::max(worst, synthetic::relative_difference(got[i], want[i]));
  const bool ok = worst <= 1e-9;
  std::printf(
      "pipeline: %d stages, %zu micro-batches of %zu, %zu steps (1F1B): largest relative "
      "difference from one process %.3g: %s\n",
      comm.size(), c.micro, c.rows, c.steps, worst, ok ? "ok" : "WRONG");
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
    if (a == "--stages")
      c.stages = static_cast<int>(n);
    else if (a == "--micro")
      c.micro = static_cast<std::size_t>(n);
    else if (a == "--steps")
      c.steps = static_cast<std::size_t>(n);
    else
      bad = true;
  }
  if (bad || c.stages > static_cast<int>(layers)) {
    std::fprintf(stderr, "usage: %s [--stages 1-%zu] [--micro N] [--steps N]\n", argv[0], layers);
    return 2;
  }
  return tutti::spawn(c.stages, [&c] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    return train(comm, c);
  });
}
