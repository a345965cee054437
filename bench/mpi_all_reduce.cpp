// MPI_Allreduce (MPI_SUM, out-of-place) over the same sweep, rule and columns as
// bench/shm_all_reduce, for a side-by-side comparison (bench/compare_mpi.sh). Plain MPI C API;
// launch it with mpirun, e.g. for Open MPI's shared-memory BTL:
//   mpirun -np 2 --bind-to none --mca pml ob1 --mca btl self,vader ./mpi_all_reduce -e 16M
// Flags: see bench_common.hpp or --help. Exits 1 if any element is wrong.

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <stdexcept>
#include <string>

#include "bench_common.hpp"

namespace {

template <class T>
MPI_Datatype mpi_type();
template <>
MPI_Datatype mpi_type<float>() {
  return MPI_FLOAT;
}
template <>
MPI_Datatype mpi_type<double>() {
  return MPI_DOUBLE;
}
template <>
MPI_Datatype mpi_type<std::int32_t>() {
  return MPI_INT32_T;
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  std::string text(MPI_MAX_ERROR_STRING, '\0');
  int len = 0;
  MPI_Error_string(rc, text.data(), &len);
  text.resize(static_cast<std::size_t>(len));
  throw std::runtime_error(std::string(what) + " failed: " + text);
}

class mpi_backend {
 public:
  mpi_backend() {
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank_), "MPI_Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size_), "MPI_Comm_size");
  }

  [[nodiscard]] int rank() const noexcept { return rank_; }
  [[nodiscard]] int size() const noexcept { return size_; }
  void barrier() { check(MPI_Barrier(MPI_COMM_WORLD), "MPI_Barrier"); }

  template <class T>
  void all_reduce(const T* in, T* out, std::size_t count) {
    if (count > static_cast<std::size_t>(INT_MAX))
      throw std::invalid_argument("MPI_Allreduce: count " + std::to_string(count) +
                                  " exceeds INT_MAX");
    check(MPI_Allreduce(in, out, static_cast<int>(count), mpi_type<T>(), MPI_SUM, MPI_COMM_WORLD),
          "MPI_Allreduce");
  }

  [[nodiscard]] double max(double x) {
    double r = 0;
    check(MPI_Allreduce(&x, &r, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD), "MPI_Allreduce(max)");
    return r;
  }
  [[nodiscard]] std::uint64_t sum(std::uint64_t x) {
    std::uint64_t r = 0;
    check(MPI_Allreduce(&x, &r, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce(sum)");
    return r;
  }

  // "MPI_Allreduce (Open MPI v4.1.4)": the first clause of MPI_Get_library_version.
  [[nodiscard]] static std::string describe() {
    std::string v(MPI_MAX_LIBRARY_VERSION_STRING, '\0');
    int len = 0;
    MPI_Get_library_version(v.data(), &len);
    v.resize(static_cast<std::size_t>(len));
    if (const auto cut = v.find_first_of(",\n"); cut != std::string::npos) v.resize(cut);
    return "MPI_Allreduce (" + v + ")";
  }
  [[nodiscard]] static std::string impl() { return "mpi"; }

 private:
  int rank_ = 0;
  int size_ = 1;
};

static_assert(tutti_bench::backend<mpi_backend>);

}  // namespace

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "mpi_all_reduce: MPI_Init failed\n");
    return 2;
  }
  int rc = 0;
  try {
    mpi_backend b;
    const auto parsed = tutti_bench::parse(
        argc, argv, {.name = "mpi_all_reduce", .forks_ranks = false, .algos = {}});
    switch (parsed.what) {
      case tutti_bench::parse_result::status::help:
        if (b.rank() == 0) std::fputs(parsed.message.c_str(), stdout);
        break;
      case tutti_bench::parse_result::status::error:
        if (b.rank() == 0) std::fputs(parsed.message.c_str(), stderr);
        rc = 2;
        break;
      case tutti_bench::parse_result::status::run:
        rc = tutti_bench::run(b, parsed.opts, "mpi_all_reduce");
        break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mpi_all_reduce: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}
