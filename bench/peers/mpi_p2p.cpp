// tutti-bench-mpi-p2p: the MPI peer of tutti-bench-p2p: the same loops (bench/p2p_loops.hpp)
// through MPI_Isend/MPI_Irecv/MPI_Wait between ranks 0 and 1 of MPI_COMM_WORLD:
//   mpirun -np 2 --bind-to none --mca pml ob1 --mca btl self,vader tutti-bench-mpi-p2p
// Prints "mode,bytes,latency_us,bandwidth_MBps" per size; exit 1 if a message arrived wrong.

#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "../p2p_loops.hpp"

namespace {

struct mpi_ops {
  using handle = MPI_Request;
  static int count(std::size_t n) {
    if (n > static_cast<std::size_t>(INT32_MAX)) std::abort();
    return static_cast<int>(n);
  }
  handle send(const void* p, std::size_t n, int peer, std::uint64_t tag) {
    MPI_Request r;
    MPI_Isend(p, count(n), MPI_BYTE, peer, static_cast<int>(tag), MPI_COMM_WORLD, &r);
    return r;
  }
  handle recv(void* p, std::size_t n, int peer, std::uint64_t tag) {
    MPI_Request r;
    MPI_Irecv(p, count(n), MPI_BYTE, peer, static_cast<int>(tag), MPI_COMM_WORLD, &r);
    return r;
  }
  void wait(handle& h) { MPI_Wait(&h, MPI_STATUS_IGNORE); }
  void barrier() { MPI_Barrier(MPI_COMM_WORLD); }
};

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  p2p_bench::sweep s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    const auto v = static_cast<std::size_t>(std::strtoull(argv[i + 1], nullptr, 10));
    if (a == "-b") s.min_bytes = v;
    if (a == "-e") s.max_bytes = v;
  }
  if (size != 2 || s.min_bytes == 0 || s.min_bytes > s.max_bytes) {
    if (rank == 0) std::fprintf(stderr, "usage: mpirun -np 2 %s [-b MIN] [-e MAX]\n", argv[0]);
    MPI_Finalize();
    return 2;
  }
  mpi_ops ops;
  const bool ok = p2p_bench::run(ops, rank, "MPI Isend/Irecv", s);
  int all = ok ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && all == 0) std::fprintf(stderr, "tutti-bench-mpi-p2p: a message arrived WRONG\n");
  MPI_Finalize();
  return all == 1 ? 0 : 1;
}
