// all_reduce on four ranks (threads of this process, tutti::inproc) with every algorithm
// policy. Rank r contributes r + 1 in each of 1000 elements, so every element becomes 10.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

template <class Policy>
bool sum_with() {
  std::atomic<int> wrong_ranks{0};
  tutti::inproc::run<Policy>(4, [&](auto& comm) {
    std::vector<float> v(1000, float(comm.rank() + 1));
    comm.all_reduce(std::span<float>(v), tutti::sum);  // every element becomes 10
    if (!std::ranges::all_of(v, [](float x) { return x == 10.0f; })) ++wrong_ranks;
  });
  std::printf("%-20s %s\n", Policy::name, wrong_ranks == 0 ? "ok" : "WRONG");
  return wrong_ranks == 0;
}

int main() {
  const bool ok[] = {sum_with<tutti::ring>(),
                     sum_with<tutti::tree>(),
                     sum_with<tutti::recursive_halving>(),
                     sum_with<tutti::recursive_doubling>(),
                     sum_with<tutti::direct>(),
                     sum_with<tutti::automatic>()};
  return std::ranges::all_of(ok, [](bool b) { return b; }) ? 0 : 1;
}
