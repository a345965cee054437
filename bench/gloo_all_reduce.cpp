// all_reduce over Gloo's TCP transport, tutti's policies next to Gloo's own algorithms: the
// same sweep, rule and columns as bench/shm_all_reduce (bench_common.hpp). Forks its ranks,
// which meet on loopback:
//   ./gloo_all_reduce --np 4 -e 16M --algo ring
// --algo: a tutti policy over tutti::gloo (automatic, ring, recursive_halving, tree,
// recursive_doubling, native), or one of Gloo's own algorithms on the connections tutti::gloo
// made: gloo_ring, gloo_bcube (gloo::allreduce, unbound buffers), gloo_ring_chunked,
// gloo_halving_doubling (the classic algorithm classes, bound buffers). Each run makes its own
// connections: the classic classes set SO_SNDBUF on the sockets they use, which must not leak
// into another algorithm's numbers. Exits 1 if any element is wrong.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>

#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

#include "bench_common.hpp"

namespace {

constexpr std::array<std::string_view, 10> algorithms{
    "automatic",          "ring",
    "recursive_halving",  "tree",
    "recursive_doubling", "native",
    "gloo_ring",          "gloo_bcube",
    "gloo_ring_chunked",  "gloo_halving_doubling"};

/// A tutti communicator for the bench: its all_reduce is either tutti's or one of Gloo's own
/// on the same connections; max/sum/barrier (outside the timed blocks) are tutti's.
template <class Comm>
class backend {
 public:
  backend(Comm& comm, std::string algo) : comm_(comm), algo_(std::move(algo)) {}

  [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
  [[nodiscard]] int size() const noexcept { return comm_.size(); }
  void barrier() { comm_.barrier(); }

  template <class T>
  void all_reduce(const T* in, T* out, std::size_t count) {
    if (algo_.rfind("gloo_", 0) != 0) {
      comm_.all_reduce(std::span<const T>(in, count), std::span<T>(out, count), tutti::sum);
      return;
    }
    std::memcpy(out, in, count * sizeof(T));
    if (count == 0 || size() == 1) return;
    const auto& ctx = comm_.transport().context();
    if (algo_ == "gloo_ring" || algo_ == "gloo_bcube") {
      ::gloo::AllreduceOptions o(ctx);
      o.setOutput(out, count);
      o.setReduceFunction(
          static_cast<void (*)(void*, const void*, const void*, std::size_t)>(&::gloo::sum<T>));
      o.setAlgorithm(algo_ == "gloo_ring" ? ::gloo::AllreduceOptions::Algorithm::RING
                                          : ::gloo::AllreduceOptions::Algorithm::BCUBE);
      o.setTag(tag_++);
      ::gloo::allreduce(o);
      return;
    }
    // The classic classes bind their buffers at construction (as Gloo's own benchmark uses
    // them): one instance per (buffer, count), built outside the timed calls' steady state.
    auto key = std::pair{static_cast<void*>(out), count};
    auto it = classic_.find(key);
    if (it == classic_.end()) {
      std::unique_ptr<::gloo::Algorithm> a;
      const std::vector<T*> ptrs{out};
      if (algo_ == "gloo_ring_chunked")
        a = std::make_unique<::gloo::AllreduceRingChunked<T>>(ctx, ptrs, static_cast<int>(count));
      else
        a = std::make_unique<::gloo::AllreduceHalvingDoubling<T>>(ctx, ptrs,
                                                                  static_cast<int>(count));
      it = classic_.emplace(key, std::move(a)).first;
    }
    it->second->run();
  }

  [[nodiscard]] double max(double x) {
    comm_.all_reduce(std::span<double>(&x, 1), tutti::max);
    return x;
  }
  [[nodiscard]] std::uint64_t sum(std::uint64_t x) {
    comm_.all_reduce(std::span<std::uint64_t>(&x, 1), tutti::sum);
    return x;
  }

  [[nodiscard]] std::string describe() const {
    return "tutti " + std::to_string(tutti::version_major) + "." +
           std::to_string(tutti::version_minor) + "." + std::to_string(tutti::version_patch) +
           " gloo transport, all_reduce by " + algo_;
  }
  [[nodiscard]] std::string impl() const { return "gloo:" + algo_; }

 private:
  Comm& comm_;
  std::string algo_;
  std::uint32_t tag_ = 1;
  std::map<std::pair<void*, std::size_t>, std::unique_ptr<::gloo::Algorithm>> classic_;
};

template <class Algo>
int run_with(const tutti_bench::options& o) {
  auto comm = tutti::communicator<tutti::gloo, Algo>::from_env();
  backend<decltype(comm)> b(comm, o.algo);
  return tutti_bench::run(b, o, "gloo_all_reduce");
}

int run_rank(const tutti_bench::options& o) {
  const std::string_view a = o.algo;
  if (a == "ring") return run_with<tutti::ring>(o);
  if (a == "recursive_halving") return run_with<tutti::recursive_halving>(o);
  if (a == "tree") return run_with<tutti::tree>(o);
  if (a == "recursive_doubling") return run_with<tutti::recursive_doubling>(o);
  if (a == "native") return run_with<tutti::native>(o);
  return run_with<tutti::automatic>(o);  // automatic, and Gloo's own (barrier etc. by tutti)
}

}  // namespace

int main(int argc, char** argv) {
  return tutti_bench::forking_main(
      argc, argv, {.name = "gloo_all_reduce", .forks_ranks = true, .algos = algorithms},
      [](const tutti_bench::options& o) {
        return tutti::spawn(o.np, [&] { return run_rank(o); });
      });
}
