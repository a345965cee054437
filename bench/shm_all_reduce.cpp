// tutti::communicator<tutti::shm, Algo>::all_reduce (sum, out-of-place) over the same sweep,
// rule and columns as bench/mpi_all_reduce, for a side-by-side comparison
// (bench/compare_mpi.sh). Forks its own ranks:
//   ./shm_all_reduce --np 4 -e 16M [--algo ring]
// (under mpirun or torchrun, tutti::spawn runs the ranks the launcher started instead).
// Flags: see bench_common.hpp or --help. Exits 1 if any element is wrong.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <span>
#include <string>
#include <string_view>

#include <tutti/tutti.hpp>

#include "bench_common.hpp"

namespace {

constexpr std::array<std::string_view, 6> algorithms{
    "automatic", "direct", "ring", "recursive_halving", "tree", "recursive_doubling"};

template <class Comm>
class tutti_backend {
 public:
  explicit tutti_backend(Comm& comm) : comm_(comm) {}

  [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
  [[nodiscard]] int size() const noexcept { return comm_.size(); }
  void barrier() { comm_.barrier(); }

  template <class T>
  void all_reduce(const T* in, T* out, std::size_t count) {
    comm_.all_reduce(std::span<const T>(in, count), std::span<T>(out, count), tutti::sum);
  }

  [[nodiscard]] double max(double x) {
    comm_.all_reduce(std::span<double>(&x, 1), tutti::max);
    return x;
  }
  [[nodiscard]] std::uint64_t sum(std::uint64_t x) {
    comm_.all_reduce(std::span<std::uint64_t>(&x, 1), tutti::sum);
    return x;
  }

  [[nodiscard]] static std::string describe() {
    return "tutti " + std::to_string(tutti::version_major) + "." +
           std::to_string(tutti::version_minor) + "." + std::to_string(tutti::version_patch) +
           " shm, algorithm " + Comm::algorithm_type::name;
  }
  [[nodiscard]] static std::string impl() {
    return std::string("tutti-shm:") + Comm::algorithm_type::name;
  }

 private:
  Comm& comm_;
};

template <class Algo>
int run_with(const tutti_bench::options& o) {
  auto comm = tutti::communicator<tutti::shm, Algo>::from_env();
  tutti_backend<decltype(comm)> b(comm);
  static_assert(tutti_bench::backend<decltype(b)>);
  return tutti_bench::run(b, o, "shm_all_reduce");
}

int run_rank(const tutti_bench::options& o) {
  const std::string_view a = o.algo;
  if (a == "direct") return run_with<tutti::direct>(o);
  if (a == "ring") return run_with<tutti::ring>(o);
  if (a == "recursive_halving") return run_with<tutti::recursive_halving>(o);
  if (a == "tree") return run_with<tutti::tree>(o);
  if (a == "recursive_doubling") return run_with<tutti::recursive_doubling>(o);
  return run_with<tutti::automatic>(o);  // parse() admits only the names above
}

}  // namespace

int main(int argc, char** argv) {
  return tutti_bench::forking_main(
      argc, argv, {.name = "shm_all_reduce", .forks_ranks = true, .algos = algorithms},
      [](const tutti_bench::options& o) {
        return tutti::spawn(o.np, [&] { return run_rank(o); });
      });
}
