// Async collectives: start an all_reduce, compute on other data while it runs, then wait.
// Then all_reduce's two halves: reduce_scatter leaves each rank one block of the sum and
// all_gather hands every block to every rank.
#include <cmath>
#include <cstdio>
#include <span>
#include <stdexcept>
#include <vector>

#include <tutti/tutti.hpp>

static void expect(bool ok, const char* what) {
  if (!ok) throw std::runtime_error(what);
}

int main() try {
  tutti::inproc::run(4, [](auto& comm) {
    const int rank = comm.rank();
    const int p = comm.size();
    const int rank_sum = p * (p + 1) / 2;  // 1 + 2 + ... + p

    // 1. Overlap. `grads` belongs to the collective until wait() returns: don't touch it.
    std::vector<float> grads(1 << 20, float(rank + 1));
    tutti::work pending = comm.all_reduce_async(std::span<float>(grads), tutti::sum);
    double local = 0;  // meanwhile, work on other data
    for (int i = 1; i <= 1'000'000; ++i) local += 1.0 / std::sqrt(double(i));
    pending.wait();  // rethrows the collective's tutti::error, if any
    for (float g : grads) expect(g == float(rank_sum), "all_reduce_async gave a wrong sum");
    if (rank == 0)
      std::printf("all_reduce_async: %zu sums of %d, computed %.3f meanwhile\n", grads.size(),
                  rank_sum, local);

    // 2. reduce_scatter + all_gather == all_reduce.
    const std::size_t block = 1000;
    std::vector<int> in(block * std::size_t(p));
    for (std::size_t i = 0; i < in.size(); ++i) in[i] = (rank + 1) * int(i % 100);
    std::vector<int> mine(block);  // this rank's block of the sum
    comm.reduce_scatter(std::span<const int>(in), std::span<int>(mine), tutti::sum);
    std::vector<int> all(block * std::size_t(p));
    comm.all_gather(std::span<const int>(mine), std::span<int>(all));
    for (std::size_t i = 0; i < all.size(); ++i)
      expect(all[i] == rank_sum * int(i % 100), "reduce_scatter + all_gather is wrong");
    if (rank == 0) std::printf("reduce_scatter + all_gather: %zu elements ok\n", all.size());
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
