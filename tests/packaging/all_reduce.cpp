// The smallest tutti program, built by every way of consuming tutti that the packaging tests
// cover: 4 ranks as threads (tutti::inproc), each contributing rank + 1 in 1000 floats, so
// every element becomes 1 + 2 + 3 + 4 = 10. Exits non-zero on any wrong element.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

int main() {
  std::atomic<int> wrong{0};
  tutti::inproc::run<tutti::ring>(4, [&](auto& comm) {
    std::vector<float> v(1000, float(comm.rank() + 1));
    comm.all_reduce(std::span<float>(v), tutti::sum);
    if (!std::ranges::all_of(v, [](float x) { return x == 10.0f; })) ++wrong;
  });
  std::printf("all_reduce over tutti::inproc, 4 ranks: %s\n", wrong == 0 ? "ok" : "WRONG");
  return wrong == 0 ? 0 : 1;
}
