// Data-parallel training of a small MLP in plain C++ with tutti's training adapters:
// tutti::distributed_sampler shards a synthetic dataset, tutti::bucketer all-reduces the
// gradients in buckets while the backward pass is still running, as PyTorch's DDP does.
//
//   ./ddp_mlp --np 4                      4 ranks over shared memory (tutti::spawn)
//   ./ddp_mlp --np 2 --batch 8 --accum 4  4 micro-batches per step, under no_sync()
//   ./ddp_mlp --np 4 --save w.txt         rank 0 writes the final weights (hex floats)
//   ./ddp_mlp --compare a.txt b.txt       are two weight files equal within 1e-5 relative?
//   TUTTI_DEBUG=INFO ./ddp_mlp            also logs the bucket layout
//
// Every rank starts from rank 0's weights (a broadcast, like DDP's construction), takes
// `--batch` samples per micro-batch, and steps plain SGD on the averaged gradient. So N ranks
// with batch b, 1 rank with batch N*b, and 1 rank with batch b accumulating N micro-batches all
// follow the same trajectory up to rounding — the test of this example checks exactly that.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tutti/tutti.hpp>

#include "synthetic.hpp"

namespace {

constexpr std::size_t in_dim = 16, hidden = 64, out_dim = 4;

struct config {
  int np = 2;
  std::size_t batch = 8;   // samples per rank and micro-batch
  std::size_t accum = 1;   // micro-batches per optimizer step
  std::size_t steps = 60;  // optimizer steps
  std::size_t samples = 1024;
  float lr = 0.05f;
  std::string save;
};

float noise(std::uint64_t i) { return static_cast<float>(synthetic::noise(i)); }

// Sample i of the synthetic dataset (examples/synthetic.hpp).
void sample(std::size_t i, float* x, float* y) { synthetic::sample(i, in_dim, out_dim, x, y); }

// Parameters in forward order: W1 b1 W2 b2 W3 b3 (row-major, out x in).
struct shapes {
  static constexpr std::size_t sizes[6] = {hidden * in_dim, hidden,          hidden* hidden,
                                           hidden,          out_dim* hidden, out_dim};
};

template <class Comm>
class model {
 public:
  model(Comm& comm, tutti::bucketer_options opts) : bucketer_(comm, std::move(opts)) {
    for (std::size_t k = 0; k < 6; ++k) {
      params_.emplace_back(shapes::sizes[k], 0.0f);
      bucketer_.template add<float>(shapes::sizes[k]);  // gradients live in the buckets
    }
    if (comm.rank() == 0) {
      for (std::size_t k = 0; k < 6; k += 2) {
        const float scale = 1.0f / std::sqrt(static_cast<float>(k == 0 ? in_dim : hidden));
        for (std::size_t i = 0; i < params_[k].size(); ++i)
          params_[k][i] = scale * noise(7'000'000 * (k + 1) + i);
      }
    }
    for (auto& p : params_) comm.broadcast(std::span<float>(p), 0);
  }

  tutti::bucketer<Comm>& grads() { return bucketer_; }
  const std::vector<std::vector<float>>& params() const { return params_; }

  // Forward and backward over `batch`, adding d(loss)/d(params) * weight to the gradients and
  // marking each layer's gradients ready as soon as the backward pass has finished them.
  // Returns the summed loss (0.5 |f(x) - y|^2 per sample).
  float forward_backward(std::span<const std::size_t> batch, float weight) {
    auto g = [&](std::size_t k) { return bucketer_.template gradient<float>(k); };
    const auto &w1 = params_[0], &b1 = params_[1], &w2 = params_[2], &b2 = params_[3],
               &w3 = params_[4], &b3 = params_[5];
    float loss = 0;
    std::vector<float> x(in_dim), y(out_dim), h1(hidden), h2(hidden);
    std::vector<float> d3(out_dim), d2(hidden), d1(hidden);
    // Forward and the backward deltas per sample, then the gradients layer by layer from
    // the output back, accumulated in the bucketer's gradient views.
    struct acts {
      std::vector<float> x, h1, h2, d3, d2, d1;
    };
    std::vector<acts> a(batch.size());
    for (std::size_t s = 0; s < batch.size(); ++s) {
      sample(batch[s], x.data(), y.data());
      for (std::size_t j = 0; j < hidden; ++j) {
        float z = b1[j];
        for (std::size_t k = 0; k < in_dim; ++k) z += w1[j * in_dim + k] * x[k];
        h1[j] = std::tanh(z);
      }
      for (std::size_t j = 0; j < hidden; ++j) {
        float z = b2[j];
        for (std::size_t k = 0; k < hidden; ++k) z += w2[j * hidden + k] * h1[k];
        h2[j] = std::tanh(z);
      }
      for (std::size_t o = 0; o < out_dim; ++o) {
        float z = b3[o];
        for (std::size_t k = 0; k < hidden; ++k) z += w3[o * hidden + k] * h2[k];
        d3[o] = z - y[o];
        loss += 0.5f * d3[o] * d3[o];
      }
      for (std::size_t k = 0; k < hidden; ++k) {
        float s2 = 0;
        for (std::size_t o = 0; o < out_dim; ++o) s2 += w3[o * hidden + k] * d3[o];
        d2[k] = s2 * (1 - h2[k] * h2[k]);
      }
      for (std::size_t k = 0; k < hidden; ++k) {
        float s1 = 0;
        for (std::size_t j = 0; j < hidden; ++j) s1 += w2[j * hidden + k] * d2[j];
        d1[k] = s1 * (1 - h1[k] * h1[k]);
      }
      a[s] = {x, h1, h2, d3, d2, d1};
    }
    // Weights g(w) and bias g(w + 1) of one layer, summed over the batch, then marked ready:
    // layer 3's are final first, so its bucket may start while layers 2 and 1 are computed.
    auto layer = [&](std::size_t w, std::size_t rows, std::size_t cols,
                     std::vector<float> acts::*delta, std::vector<float> acts::*input) {
      for (const acts& s : a)
        for (std::size_t j = 0; j < rows; ++j) {
          for (std::size_t k = 0; k < cols; ++k)
            g(w)[j * cols + k] += weight * (s.*delta)[j] * (s.*input)[k];
          g(w + 1)[j] += weight * (s.*delta)[j];
        }
      bucketer_.mark_ready(w + 1);
      bucketer_.mark_ready(w);
    };
    layer(4, out_dim, hidden, &acts::d3, &acts::h2);
    layer(2, hidden, hidden, &acts::d2, &acts::h1);
    layer(0, hidden, in_dim, &acts::d1, &acts::x);
    return loss;
  }

  // SGD on the averaged gradients, which are then cleared for the next step.
  void step(float lr) {
    for (std::size_t k = 0; k < 6; ++k) {
      auto g = bucketer_.template gradient<float>(k);
      for (std::size_t i = 0; i < g.size(); ++i) {
        params_[k][i] -= lr * g[i];
        g[i] = 0;
      }
    }
  }

 private:
  tutti::bucketer<Comm> bucketer_;
  std::vector<std::vector<float>> params_;
};

template <class Comm>
int train(Comm& comm, const config& c) {
  // Small buckets, so that even this small model (22 KB of gradients) has several.
  model<Comm> m(comm, {.first_bucket_bytes = 4 << 10, .bucket_bytes = 16 << 10});
  tutti::distributed_sampler sampler(c.samples, comm.size(), comm.rank(),
                                     {.shuffle = true, .seed = 2024, .drop_last = false});
  const std::size_t per_step = c.batch * c.accum;
  const std::size_t steps_per_epoch = sampler.size() / per_step;
  if (steps_per_epoch == 0) {
    std::fprintf(stderr, "ddp_mlp: %zu samples are too few for %d ranks x batch %zu x accum %zu\n",
                 c.samples, comm.size(), c.batch, c.accum);
    return 2;
  }
  // Each sample's loss gradient counts 1/(batch * accum): the average over a rank's step;
  // the bucketer then averages over the ranks.
  const float weight = 1.0f / static_cast<float>(per_step);
  std::vector<std::size_t> order;
  float first = -1, last = 0;
  for (std::size_t step = 0; step < c.steps; ++step) {
    const std::size_t epoch = step / steps_per_epoch, in_epoch = step % steps_per_epoch;
    if (in_epoch == 0) {
      sampler.set_epoch(epoch);
      order = sampler.indices();
    }
    float loss = 0;
    for (std::size_t micro = 0; micro < c.accum; ++micro) {
      const std::span<const std::size_t> batch(
          order.data() + (in_epoch * c.accum + micro) * c.batch, c.batch);
      if (micro + 1 < c.accum) {
        auto local = m.grads().no_sync();  // accumulate only
        loss += m.forward_backward(batch, weight);
      } else {
        loss += m.forward_backward(batch, weight);
        m.grads().finish();  // waits for the buckets, averages
      }
    }
    m.step(c.lr);
    // The mean loss over every rank's samples of this step.
    float mean = loss / static_cast<float>(per_step);
    comm.all_reduce(std::span<float>(&mean, 1), tutti::avg);
    if (step == 0) first = mean;
    last = mean;
    if (comm.rank() == 0 && (step % 20 == 0 || step + 1 == c.steps))
      std::printf("step %3zu  loss %.6f\n", step, static_cast<double>(mean));
  }
  if (comm.rank() == 0) {
    std::printf("ranks %d, batch %zu x %zu micro-batches per rank, %zu steps: loss %.6f -> %.6f\n",
                comm.size(), c.batch, c.accum, c.steps, static_cast<double>(first),
                static_cast<double>(last));
    if (!c.save.empty()) {
      std::FILE* f = std::fopen(c.save.c_str(), "w");
      if (f == nullptr) {
        std::perror(c.save.c_str());
        return 1;
      }
      for (const auto& p : m.params())
        for (float v : p) std::fprintf(f, "%a\n", static_cast<double>(v));
      std::fclose(f);
    }
  }
  return last < first ? 0 : 1;
}

std::optional<std::vector<double>> load(const char* path) {
  std::FILE* f = std::fopen(path, "r");
  if (f == nullptr) return std::nullopt;
  std::vector<double> v;
  double x = 0;
  while (std::fscanf(f, "%la", &x) == 1) v.push_back(x);
  std::fclose(f);
  return v;
}

// Exit 0 when every weight agrees within 1e-5 relative (to the larger magnitude, floored at
// 1e-3 for weights near zero).
int compare(const char* a_path, const char* b_path) {
  const auto a = load(a_path), b = load(b_path);
  if (!a || !b || a->size() != b->size() || a->empty()) {
    std::fprintf(stderr, "ddp_mlp: cannot compare %s and %s\n", a_path, b_path);
    return 2;
  }
  double worst = 0;
  for (std::size_t i = 0; i < a->size(); ++i) {
    worst = std::max(worst, synthetic::relative_difference((*a)[i], (*b)[i]));
  }
  const bool ok = worst <= 1e-5;
  std::printf("%s vs %s: %zu weights, largest relative difference %.3g: %s\n", a_path, b_path,
              a->size(), worst, ok ? "equal within 1e-5" : "DIFFERENT");
  return ok ? 0 : 1;
}

int usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--np N] [--batch B] [--accum K] [--steps S] [--samples N] "
               "[--save FILE]\n       %s --compare A B\n",
               argv0, argv0);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  config c;
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "--compare" && i + 2 < argc) return compare(argv[i + 1], argv[i + 2]);
    if (i + 1 >= argc) return usage(argv[0]);
    const char* v = argv[++i];
    char* end = nullptr;
    const long parsed = std::strtol(v, &end, 10);
    const long n = *end == '\0' ? parsed : 0;  // not a whole number ("2x"): refused below
    if (a == "--save") {
      c.save = v;
    } else if (n < 1) {
      return usage(argv[0]);
    } else if (a == "--np") {
      c.np = static_cast<int>(n);
    } else if (a == "--batch") {
      c.batch = static_cast<std::size_t>(n);
    } else if (a == "--accum") {
      c.accum = static_cast<std::size_t>(n);
    } else if (a == "--steps") {
      c.steps = static_cast<std::size_t>(n);
    } else if (a == "--samples") {
      c.samples = static_cast<std::size_t>(n);
    } else {
      return usage(argv[0]);
    }
  }
  return tutti::spawn(c.np, [&c] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    return train(comm, c);
  });
}
