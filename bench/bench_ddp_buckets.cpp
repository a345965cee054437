// Gradient reduction of a ResNet-50-shaped parameter set (161 float tensors, 25,557,032
// parameters, 102 MB) over tutti::shm, four ways, in the same run:
//   bucketed       tutti::bucketer, gradients owned by the buckets (views, no copy), every
//                  tensor marked ready in backward order, then finish() (DDP's default caps:
//                  first bucket 1 MiB, then 25 MiB)
//   bucketed-copy  the same with the gradients in the caller's buffers (copied in and out)
//   bucketed-join  bucketed with uneven_inputs (torch's Join): every iteration also counts the
//                  ranks that train, and averages divide by that count; every rank has data
//                  here, so this is what being ready for uneven inputs costs
//   flat           one all_reduce (avg) of one buffer of all 25.6M floats
//   per-tensor     161 blocking all_reduce (avg) calls, one per tensor
// Time per iteration = the mean over `--iters` timed iterations after `--warmup`, the max over
// ranks; the modes take turns for `--rounds` rounds and each reports its median round. The
// first bucketed iteration is checked against the exact average.
//
//   ./bench_ddp_buckets --np 4 [--iters 10] [--warmup 2] [--rounds 5] [--algo NAME]
//                       [--bucket-mib 25]
//
// bench-smoke-args: --np 2 --iters 1 --warmup 1 --rounds 1
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <tutti/tutti.hpp>

#include "tb/cli.hpp"

namespace {

// torchvision's resnet50() parameters in registration (forward) order: conv weights
// (out, in, kh, kw), batch-norm weight and bias (c each), and the classifier (1000 x 2048,
// 1000).
std::vector<std::size_t> resnet50_tensors() {
  std::vector<std::size_t> t;
  auto conv = [&](std::size_t out, std::size_t in, std::size_t k) {
    t.push_back(out * in * k * k);
  };
  auto bn = [&](std::size_t c) {
    t.push_back(c);
    t.push_back(c);
  };
  conv(64, 3, 7);  // stem
  bn(64);
  std::size_t in = 64;
  const std::size_t widths[] = {64, 128, 256, 512};
  const std::size_t blocks[] = {3, 4, 6, 3};
  for (std::size_t stage = 0; stage < 4; ++stage) {
    const std::size_t w = widths[stage], out = w * 4;
    for (std::size_t b = 0; b < blocks[stage]; ++b) {
      conv(w, in, 1);  // bottleneck: 1x1, 3x3, 1x1
      bn(w);
      conv(w, w, 3);
      bn(w);
      conv(out, w, 1);
      bn(out);
      if (b == 0) {  // projection shortcut
        conv(out, in, 1);
        bn(out);
      }
      in = out;
    }
  }
  t.push_back(1000 * 2048);  // fc
  t.push_back(1000);
  return t;
}

struct args {
  int np = 2;
  int iters = 10;
  int warmup = 2;
  int rounds = 5;
  std::string algo = "automatic";
  double bucket_mib = 25;  // DDP's bucket_cap_mb
};

using clock_type = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

template <class Comm>
double max_over_ranks(Comm& comm, double x) {
  comm.all_reduce(std::span<double>(&x, 1), tutti::max);
  return x;
}

// Seconds per call of f: warmup calls, then iters timed as one block; the max over ranks.
template <class Comm, class F>
double time_it(Comm& comm, const args& a, F&& f) {
  for (int i = 0; i < a.warmup; ++i) f();
  comm.barrier();
  const auto t0 = clock_type::now();
  for (int i = 0; i < a.iters; ++i) f();
  const double s = std::chrono::duration<double>(clock_type::now() - t0).count() / a.iters;
  return max_over_ranks(comm, s);
}

// Rank `rank`'s gradient values of tensor t: p*(1 + rank + t%7), whose average over the
// ranks, p*(1 + t%7) + p(p-1)/2, is exact in float.
float grad_value(int p, std::size_t t, int rank) {
  return static_cast<float>(p * (1 + rank + static_cast<int>(t % 7)));
}

// One backward pass: every tensor marked ready in backward order, then finish().
template <class Bucketer>
void backward(Bucketer& b, std::size_t tensors) {
  for (std::size_t t = tensors; t-- > 0;) b.mark_ready(t);
  b.finish();
}

// Gives `b` the gradients of `sizes` (float tensors, owned by the buckets), filled with rank
// `r` of `p`'s values.
template <class Bucketer>
void add_owned(Bucketer& b, const std::vector<std::size_t>& sizes, int p, int r) {
  for (const std::size_t n : sizes) b.template add<float>(n);
  for (std::size_t t = 0; t < sizes.size(); ++t)
    for (float& x : b.template gradient<float>(t)) x = grad_value(p, t, r);
}

// Elements of `b`'s gradients that are not the exact average, summed over the ranks.
template <class Comm, class Bucketer>
std::uint64_t wrong_averages(Comm& comm, Bucketer& b, std::size_t tensors) {
  const int p = comm.size();
  std::uint64_t wrong = 0;
  for (std::size_t t = 0; t < tensors; ++t) {
    const float want = static_cast<float>(p * (1 + static_cast<int>(t % 7))) +
                       static_cast<float>(p * (p - 1)) / 2.0f;
    for (const float x : b.template gradient<float>(t)) wrong += x != want ? 1 : 0;
  }
  comm.all_reduce(std::span<std::uint64_t>(&wrong, 1), tutti::sum);
  return wrong;
}

// Seconds per iteration of each mode, one entry per round.
struct mode_times {
  std::vector<double> flat, bucketed, join, copied, each;
};

// Rank 0's table: each mode's median round, bandwidth and ratio to flat.
template <class Comm>
void report(const args& a, int p, std::size_t tensors, std::size_t total, const mode_times& t,
            std::size_t n_buckets, std::uint64_t wrong) {
  const double t_flat = median(t.flat), t_each = median(t.each), t_bucketed = median(t.bucketed);
  std::printf(
      "# ResNet-50 gradients: %zu float tensors, %zu parameters (%.1f MB); %d ranks "
      "over tutti::shm, algorithm %s; median of %d rounds of %d iterations after %d warm-up\n",
      tensors, total, static_cast<double>(total) * 4 / 1e6, p, Comm::algorithm_type::name, a.rounds,
      a.iters, a.warmup);
  std::printf("# %-14s %10s %10s %10s\n", "mode", "ms/iter", "GB/s", "vs flat");
  const auto row = [&](const char* name, double s) {
    std::printf("  %-14s %10.2f %10.2f %9.2fx\n", name, s * 1e3,
                static_cast<double>(total) * 4 / s / 1e9, s / t_flat);
  };
  row("flat", t_flat);
  row("bucketed", t_bucketed);
  row("bucketed-join", median(t.join));
  row("bucketed-copy", median(t.copied));
  row("per-tensor", t_each);
  std::printf(
      "# bucketed: %zu buckets (first 1 MiB, then %g MiB); per-tensor / bucketed = %.2fx; "
      "bucketed-join / bucketed = %.3fx; #wrong %llu\n",
      n_buckets, a.bucket_mib, t_each / t_bucketed, median(t.join) / t_bucketed,
      static_cast<unsigned long long>(wrong));
}

template <class Comm>
int run(Comm& comm, const args& a) {
  const auto sizes = resnet50_tensors();
  std::size_t total = 0;
  for (const std::size_t n : sizes) total += n;
  if (sizes.size() != 161 || total != 25'557'032) {
    std::fprintf(stderr, "bench_ddp_buckets: parameter set is wrong (%zu tensors, %zu)\n",
                 sizes.size(), total);
    return 1;
  }
  const int r = comm.rank(), p = comm.size();
  const std::size_t tensors = sizes.size();
  const tutti::bucketer_options caps{.bucket_bytes =
                                         static_cast<std::size_t>(a.bucket_mib * 1024 * 1024)};
  // Bucketed, owned storage; its first iteration is checked.
  tutti::bucketer owned(comm, caps);
  add_owned(owned, sizes, p, r);
  backward(owned, tensors);
  const std::uint64_t wrong = wrong_averages(comm, owned, tensors);
  // Bucketed with uneven inputs allowed (every rank trains in every iteration).
  tutti::bucketer joinable(
      comm, tutti::bucketer_options{.bucket_bytes = caps.bucket_bytes, .uneven_inputs = true});
  add_owned(joinable, sizes, p, r);
  // Bucketed, caller-owned buffers.
  std::vector<std::vector<float>> mine(tensors);
  tutti::bucketer copied(comm, caps);
  for (std::size_t t = 0; t < tensors; ++t) {
    mine[t].assign(sizes[t], grad_value(p, t, r));
    copied.add(std::span<float>(mine[t]));
  }
  std::vector<float> flat(total, 1.0f);

  // The modes take turns, `rounds` times, so that a slow phase of the machine hits them
  // alike; each mode's time is the median of its rounds.
  mode_times t;
  for (int round = 0; round < a.rounds; ++round) {
    t.flat.push_back(
        time_it(comm, a, [&] { comm.all_reduce(std::span<float>(flat), tutti::avg); }));
    t.bucketed.push_back(time_it(comm, a, [&] { backward(owned, tensors); }));
    t.join.push_back(time_it(comm, a, [&] { backward(joinable, tensors); }));
    t.copied.push_back(time_it(comm, a, [&] { backward(copied, tensors); }));
    t.each.push_back(time_it(comm, a, [&] {
      for (auto& g : mine) comm.all_reduce(std::span<float>(g), tutti::avg);
    }));
  }
  if (r == 0) report<Comm>(a, p, tensors, total, t, owned.layout().size(), wrong);
  return wrong == 0 ? 0 : 1;
}

template <class Algo>
int run_algo(const args& a) {
  auto comm = tutti::communicator<tutti::shm, Algo>::from_env();
  return run(comm, a);
}

int dispatch(const args& a) {
  if (a.algo == "ring") return run_algo<tutti::ring>(a);
  if (a.algo == "direct") return run_algo<tutti::direct>(a);
  if (a.algo == "recursive_halving") return run_algo<tutti::recursive_halving>(a);
  return run_algo<tutti::automatic>(a);
}

// A count that is all of `v` (tutti-bench's parse_count), at most `most`.
int count_arg(std::string_view flag, const std::string& v, int most) {
  const std::size_t n = tutti_bench::detail::parse_count(flag, v);
  if (n > static_cast<std::size_t>(most))
    throw std::invalid_argument(std::string(flag) + ": too large: '" + v + "'");
  return static_cast<int>(n);
}

// A number of MiB that is all of `v` (tutti-bench's parse_real) and above 0.
double mib_arg(std::string_view flag, const std::string& v) {
  const double x = tutti_bench::detail::parse_real(flag, v);
  if (!(x > 0)) throw std::invalid_argument(std::string(flag) + ": must be above 0");
  return x;
}

// Reads the flags into `a`; throws std::invalid_argument naming what it cannot read.
void parse(int argc, char** argv, args& a) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view k = argv[i];
    if (i + 1 >= argc) throw std::invalid_argument(std::string(k) + ": needs a value");
    const std::string v = argv[++i];
    if (k == "--np") {
      a.np = count_arg(k, v, 1024);
    } else if (k == "--iters") {
      a.iters = count_arg(k, v, 1000000);
    } else if (k == "--bucket-mib") {
      a.bucket_mib = mib_arg(k, v);
    } else if (k == "--rounds") {
      a.rounds = count_arg(k, v, 1000);
    } else if (k == "--warmup") {
      a.warmup = count_arg(k, v, 1000000);
    } else if (k == "--algo" &&
               (v == "automatic" || v == "ring" || v == "direct" || v == "recursive_halving")) {
      a.algo = v;
    } else {
      throw std::invalid_argument("bad argument " + std::string(k) + " " + v);
    }
  }
  if (a.np < 1 || a.iters < 1 || a.rounds < 1)
    throw std::invalid_argument("--np, --iters and --rounds must be at least 1");
}

}  // namespace

int main(int argc, char** argv) {
  args a;
  try {
    parse(argc, argv, a);
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr,
                 "%s: %s\nusage: %s [--np N] [--iters N] [--warmup N] [--rounds N] "
                 "[--algo automatic|ring|direct|recursive_halving] [--bucket-mib M]\n",
                 argv[0], e.what(), argv[0]);
    return 2;
  }
  return tutti::spawn(a.np, [&a] { return dispatch(a); });
}
