// The README's programs built against an installed tutti: the shm one across 4 processes as
// written, then the inproc all_reduce for every policy at several world sizes and counts.
// Exits non-zero on any wrong element.
#include <cstdio>
#include <span>
#include <vector>

#include <tutti/tutti.hpp>

template <class Policy>
int check(int ranks, std::size_t count) {
  int wrong = 0;
  tutti::inproc::run<Policy>(ranks, [&](auto& comm) {
    std::vector<float> v(count, float(comm.rank() + 1));
    comm.all_reduce(std::span<float>(v), tutti::sum);
    const auto want = static_cast<float>(comm.size() * (comm.size() + 1) / 2);
    for (float x : v)
      if (x != want) {
        std::printf("%s: %d ranks, %zu elements: got %g, want %g\n", Policy::name, ranks, count,
                    double(x), double(want));
        ++wrong;  // reported below; each rank writes only when it found a wrong value
        return;
      }
  });
  return wrong;
}

template <class Policy>
int sweep() {
  int wrong = 0;
  for (int ranks : {1, 2, 3, 4, 7, 8})
    for (std::size_t count :
         {std::size_t{0}, std::size_t{1}, std::size_t{1000}, std::size_t{1} << 20})
      wrong += check<Policy>(ranks, count);
  return wrong;
}

int main() {
  const int spawned = tutti::spawn(4, [] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    std::vector<double> v(1 << 20, comm.rank() + 1.0);
    comm.all_reduce(std::span<double>(v), tutti::sum);  // every element becomes 10
    return v[12345] == 10.0 ? 0 : 1;
  });
  if (spawned != 0) {
    std::printf("the README's shm program failed with %d\n", spawned);
    return 1;
  }
  tutti::inproc::run<tutti::ring>(4, [](auto& comm) {
    std::vector<float> v(1000, float(comm.rank() + 1));
    comm.all_reduce(std::span<float>(v), tutti::sum);  // every element becomes 10
  });
  const int wrong = sweep<tutti::ring>() + sweep<tutti::tree>() +
                    sweep<tutti::recursive_halving>() + sweep<tutti::recursive_doubling>() +
                    sweep<tutti::direct>() + sweep<tutti::automatic>();
  std::printf("%s\n", wrong == 0 ? "all policies correct" : "WRONG results");
  return wrong == 0 ? 0 : 1;
}
