// tutti-bench-mpi: the MPI peer of tutti-bench. The same sweep, rule, checks, table and JSON
// (bench/tb/driver.hpp), every collective through MPI's own call on MPI_COMM_WORLD:
//   mpirun -np 4 --bind-to none --mca pml ob1 --mca btl self,vader
//          tutti-bench-mpi all_reduce -b 8 -e 64M -f 4 --json mpi.json
// (tutti-bench --compare mpi runs it so). Exit status as tutti-bench's.

#include <mpi.h>

#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "../tb/driver.hpp"

namespace {

namespace tb = tutti_bench;

template <class T>
MPI_Datatype mpi_type() {
  if constexpr (std::is_same_v<T, std::int8_t>) return MPI_INT8_T;
  if constexpr (std::is_same_v<T, std::uint8_t>) return MPI_UINT8_T;
  if constexpr (std::is_same_v<T, std::int32_t>) return MPI_INT32_T;
  if constexpr (std::is_same_v<T, std::uint32_t>) return MPI_UINT32_T;
  if constexpr (std::is_same_v<T, std::int64_t>) return MPI_INT64_T;
  if constexpr (std::is_same_v<T, std::uint64_t>) return MPI_UINT64_T;
  if constexpr (std::is_same_v<T, float>) return MPI_FLOAT;
  if constexpr (std::is_same_v<T, double>) return MPI_DOUBLE;
  return MPI_DATATYPE_NULL;  // half, bfloat16: unsupported() keeps them from call()
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  std::string text(MPI_MAX_ERROR_STRING, '\0');
  int len = 0;
  MPI_Error_string(rc, text.data(), &len);
  text.resize(static_cast<std::size_t>(len));
  throw std::runtime_error(std::string(what) + " failed: " + text);
}

int to_int(std::size_t n) {
  if (n > static_cast<std::size_t>(INT_MAX))
    throw std::invalid_argument("count " + std::to_string(n) + " exceeds MPI's int counts");
  return static_cast<int>(n);
}

MPI_Op mpi_op(tb::redop o) {
  switch (o) {
    case tb::redop::prod:
      return MPI_PROD;
    case tb::redop::min:
      return MPI_MIN;
    case tb::redop::max:
      return MPI_MAX;
    default:
      return MPI_SUM;
  }
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

  [[nodiscard]] double reduce_stat(double x, tb::stat s) {
    double r = 0;
    const MPI_Op op = s == tb::stat::min ? MPI_MIN : s == tb::stat::max ? MPI_MAX : MPI_SUM;
    check(MPI_Allreduce(&x, &r, 1, MPI_DOUBLE, op, MPI_COMM_WORLD), "MPI_Allreduce(stat)");
    return r;
  }
  [[nodiscard]] std::uint64_t sum(std::uint64_t x) {
    std::uint64_t r = 0;
    check(MPI_Allreduce(&x, &r, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD), "MPI_Allreduce(sum)");
    return r;
  }

  [[nodiscard]] static std::string unsupported(tb::collective c, tb::placement p, tb::datatype t,
                                               tb::redop o) {
    if (t == tb::datatype::float16 || t == tb::datatype::bfloat16)
      return "MPI has no standard " + std::string(tb::name_of(t)) + " type";
    if (o == tb::redop::avg) return "MPI has no avg op";
    if (p == tb::placement::out_of_place && c == tb::collective::broadcast)
      return "MPI_Bcast is in place only";
    if (p == tb::placement::in_place &&
        (c == tb::collective::reduce_scatter || c == tb::collective::gather ||
         c == tb::collective::scatter))
      return "MPI's in-place form of " + std::string(tb::name_of(c)) +
             " lays its buffer out differently";
    return {};
  }

  // "Open MPI v4.1.4": the first clause of MPI_Get_library_version.
  [[nodiscard]] static tb::run_info info() {
    std::string v(MPI_MAX_LIBRARY_VERSION_STRING, '\0');
    int len = 0;
    MPI_Get_library_version(v.data(), &len);
    v.resize(static_cast<std::size_t>(len));
    if (const auto cut = v.find_first_of(",\n"); cut != std::string::npos) v.resize(cut);
    return {"mpi", "mpi", "mpi", "library", v};
  }

  template <class T>
  void call(const tb::call_args<T>& a) {
    const MPI_Datatype type = mpi_type<T>();
    const bool ip = a.where == tb::placement::in_place;
    const int k = to_int(a.s.count);
    switch (a.coll) {
      case tb::collective::all_reduce:
        check(MPI_Allreduce(ip ? MPI_IN_PLACE : a.in, a.out, k, type, mpi_op(a.op), MPI_COMM_WORLD),
              "MPI_Allreduce");
        return;
      case tb::collective::reduce:
        check(MPI_Reduce(ip && rank_ == a.root ? MPI_IN_PLACE : a.in, a.out, k, type, mpi_op(a.op),
                         a.root, MPI_COMM_WORLD),
              "MPI_Reduce");
        return;
      case tb::collective::reduce_scatter:
        check(MPI_Reduce_scatter_block(a.in, a.out, k, type, mpi_op(a.op), MPI_COMM_WORLD),
              "MPI_Reduce_scatter_block");
        return;
      case tb::collective::broadcast:
        check(MPI_Bcast(a.out, k, type, a.root, MPI_COMM_WORLD), "MPI_Bcast");
        return;
      case tb::collective::all_gather:
        check(MPI_Allgather(ip ? MPI_IN_PLACE : a.in, k, type, a.out, k, type, MPI_COMM_WORLD),
              "MPI_Allgather");
        return;
      case tb::collective::gather:
        check(MPI_Gather(a.in, k, type, a.out, k, type, a.root, MPI_COMM_WORLD), "MPI_Gather");
        return;
      case tb::collective::scatter:
        check(MPI_Scatter(a.in, k, type, a.out, k, type, a.root, MPI_COMM_WORLD), "MPI_Scatter");
        return;
      case tb::collective::all_to_all:
        check(MPI_Alltoall(ip ? MPI_IN_PLACE : a.in, k, type, a.out, k, type, MPI_COMM_WORLD),
              "MPI_Alltoall");
        return;
    }
  }

 private:
  int rank_ = 0;
  int size_ = 1;
};

static_assert(tb::backend<mpi_backend>);

}  // namespace

int main(int argc, char** argv) {
  if (MPI_Init(&argc, &argv) != MPI_SUCCESS) {
    std::fprintf(stderr, "tutti-bench-mpi: MPI_Init failed\n");
    return 2;
  }
  int rc = 0;
  try {
    mpi_backend b;
    const tb::program p{.name = "tutti-bench-mpi"};
    const auto parsed = tb::parse(argc, argv, p);
    switch (parsed.what) {
      case tb::parse_result::status::help:
        if (b.rank() == 0) std::fputs(parsed.message.c_str(), stdout);
        break;
      case tb::parse_result::status::error:
        if (b.rank() == 0) std::fputs(parsed.message.c_str(), stderr);
        rc = 2;
        break;
      case tb::parse_result::status::run:
        rc = tb::run(b, parsed.opts, "tutti-bench-mpi");
        break;
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tutti-bench-mpi: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  MPI_Finalize();
  return rc;
}
