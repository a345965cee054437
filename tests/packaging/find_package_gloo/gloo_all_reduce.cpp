// all_reduce over tutti::gloo (TCP on loopback) between 2 processes that tutti::spawn forks.
#include <algorithm>
#include <cstdio>
#include <span>
#include <vector>

#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

int main() {
  return tutti::spawn(2, [] {
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    std::vector<float> v(1000, float(comm.rank() + 1));
    comm.all_reduce(std::span<float>(v), tutti::sum);  // every element becomes 1 + 2
    const bool ok = std::ranges::all_of(v, [](float x) { return x == 3.0f; });
    std::printf("rank %d: all_reduce over tutti::gloo, 2 processes: %s\n", comm.rank(),
                ok ? "ok" : "WRONG");
    return ok ? 0 : 1;
  });
}
