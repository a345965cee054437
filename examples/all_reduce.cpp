// all_reduce across processes over shared memory (tutti::shm). One binary, any launcher:
//
//   ./all_reduce --np 4                                     forks 4 ranks itself (tutti::spawn)
//   mpirun -np 4 ./all_reduce                               Open MPI
//   torchrun --no-python --nproc_per_node=4 ./all_reduce    PyTorch's launcher
//
// Under a launcher tutti::spawn runs the body once, as the rank the launcher made. Rank r
// contributes r + 1 in each of 2^20 doubles, so every element becomes 1 + 2 + ... + n.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string_view>
#include <vector>

#include <tutti/tutti.hpp>

int main(int argc, char** argv) {
  int np = 4;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]) == "--np" && i + 1 < argc) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      np = *end == '\0' && n <= 1024 ? static_cast<int>(n) : 0;  // else refused below
    } else {
      std::fprintf(stderr, "usage: %s [--np N]\n", argv[0]);
      return 2;
    }
  }
  if (np < 1) {
    std::fprintf(stderr, "--np needs a positive number of ranks\n");
    return 2;
  }
  return tutti::spawn(np, [] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    std::vector<double> v(std::size_t{1} << 20, comm.rank() + 1.0);
    comm.all_reduce(std::span<double>(v), tutti::sum);
    const double n = comm.size(), want = n * (n + 1) / 2;
    const bool ok = std::ranges::all_of(v, [&](double x) { return x == want; });
    if (comm.rank() == 0 || !ok)
      std::printf("rank %d: all_reduce of %zu doubles on %d ranks: %s\n", comm.rank(), v.size(),
                  comm.size(), ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  });
}
