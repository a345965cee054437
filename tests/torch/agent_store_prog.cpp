// One rank of a torchrun job whose agent serves the store (TORCHELASTIC_USE_AGENT_STORE=True,
// as torchrun sets it): the ranks meet over tutti::gloo through the agent's TCPStore (two
// worlds, so two rendezvous keys), all_reduce rank-dependent integers and check every element.
//   torchrun --no-python --nnodes=2 --node_rank=K --nproc_per_node=2 ... ./agent_store_prog
// Prints "rank R of N: all_reduce sums ok (S)" and exits 0, or prints why and exits 1.
// With AGENT_STORE_PROG_ABSENT=R, rank R exits 0 at once without joining: the others must then
// fail at their timeout (TUTTI_TIMEOUT) with a message, not hang.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

namespace {

/// Rank r contributes (r + 1) * (i + 1) at element i: the sum is p (p + 1) / 2 * (i + 1).
template <class Comm>
bool check_sums(Comm& comm, std::int64_t& first) {
  const std::int64_t p = comm.size(), r = comm.rank();
  std::vector<std::int64_t> v(1000);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = (r + 1) * static_cast<std::int64_t>(i + 1);
  comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
  first = v[0];
  for (std::size_t i = 0; i < v.size(); ++i) {
    const std::int64_t want = p * (p + 1) / 2 * static_cast<std::int64_t>(i + 1);
    if (v[i] != want) {
      std::printf("rank %lld: element %zu is %lld, not %lld\n", static_cast<long long>(r), i,
                  static_cast<long long>(v[i]), static_cast<long long>(want));
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  const char* absent = std::getenv("AGENT_STORE_PROG_ABSENT");
  const char* rank = std::getenv("RANK");
  if (absent != nullptr && rank != nullptr && std::string(absent) == rank) return 0;
  try {
    auto comm = tutti::communicator<tutti::gloo>::from_env();
    auto again = tutti::communicator<tutti::gloo, tutti::ring>::from_env();
    std::int64_t s1 = 0, s2 = 0;
    const bool ok = check_sums(comm, s1) && check_sums(again, s2) && s1 == s2;
    comm.barrier();
    std::printf("rank %d of %d: all_reduce sums %s (%lld)\n", comm.rank(), comm.size(),
                ok ? "ok" : "WRONG", static_cast<long long>(s1));
    return ok ? 0 : 1;
  } catch (const tutti::error& e) {
    std::printf("agent_store_prog: %s\n", e.what());
    return 1;
  }
}
