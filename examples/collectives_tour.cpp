// Every collective once, on four ranks. Rank 0 prints each result; every rank checks its own.
#include <cstdio>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include <tutti/tutti.hpp>

static void expect(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error("wrong result: " + what);
}

static void show(int rank, const char* what, const std::vector<int>& v) {
  if (rank != 0) return;
  std::printf("%-15s", what);
  for (int x : v) std::printf(" %d", x);
  std::printf("\n");
}

int main() try {
  tutti::inproc::run(4, [](auto& comm) {
    const int r = comm.rank();
    const int p = comm.size();  // 4
    const auto n = static_cast<std::size_t>(p);
    using cspan = std::span<const int>;
    using span = std::span<int>;

    // broadcast: root 0's buffer reaches everyone.
    std::vector<int> b = r == 0 ? std::vector<int>{7, 8, 9} : std::vector<int>(3, 0);
    comm.broadcast(span(b), 0);
    expect(b == std::vector<int>{7, 8, 9}, "broadcast");
    show(r, "broadcast", b);

    // reduce: the sum of every rank's value lands on root 0 only.
    std::vector<int> one{r + 1}, total(1, 0);
    comm.reduce(cspan(one), span(total), tutti::sum, 0);
    if (r == 0) expect(total[0] == 10, "reduce");
    show(r, "reduce", total);

    // all_gather: everyone gets every rank's block, in rank order.
    std::vector<int> everyone(n);
    comm.all_gather(cspan(one), span(everyone));
    expect(everyone == std::vector<int>{1, 2, 3, 4}, "all_gather");
    show(r, "all_gather", everyone);

    // gather: like all_gather, but only root 0 receives (others may pass an empty span).
    std::vector<int> gathered(r == 0 ? n : 0);
    comm.gather(cspan(one), span(gathered), 0);
    if (r == 0) expect(gathered == std::vector<int>{1, 2, 3, 4}, "gather");
    show(r, "gather", gathered);

    // scatter: block r of root 0's buffer goes to rank r.
    std::vector<int> deal = r == 0 ? std::vector<int>{100, 101, 102, 103} : std::vector<int>{};
    std::vector<int> card(1);
    comm.scatter(cspan(deal), span(card), 0);
    expect(card[0] == 100 + r, "scatter");
    show(r, "scatter (r0)", card);

    // reduce_scatter: block j of the sum goes to rank j. in[j] = r + j, so block j = 6 + 4j.
    std::vector<int> in(n), block(1);
    for (int j = 0; j < p; ++j) in[std::size_t(j)] = r + j;
    comm.reduce_scatter(cspan(in), span(block), tutti::sum);
    expect(block[0] == 6 + 4 * r, "reduce_scatter");
    show(r, "reduce_scatter", block);

    // all_to_all: block j of rank r's input becomes block r of rank j's output.
    std::vector<int> send(n), recv(n);
    for (int j = 0; j < p; ++j) send[std::size_t(j)] = 10 * r + j;
    comm.all_to_all(cspan(send), span(recv));
    for (int j = 0; j < p; ++j) expect(recv[std::size_t(j)] == 10 * j + r, "all_to_all");
    show(r, "all_to_all", recv);

    // all_gatherv: rank r contributes r + 1 copies of r; every rank passes the same counts.
    const std::vector<std::size_t> counts{1, 2, 3, 4};
    std::vector<int> mine(static_cast<std::size_t>(r + 1), r), all(10);
    comm.all_gatherv(cspan(mine), span(all), std::span<const std::size_t>(counts));
    expect(all == std::vector<int>{0, 1, 1, 2, 2, 2, 3, 3, 3, 3}, "all_gatherv");
    show(r, "all_gatherv", all);

    // barrier: nobody leaves before everyone arrived.
    comm.barrier();
    if (r == 0) std::printf("barrier         ok\n");

    // send / recv: rank 0 asks rank 1 to double a number.
    std::vector<int> msg{21};
    if (r == 0) {
      comm.send(cspan(msg), 1);
      comm.recv(span(msg), 1);
      expect(msg[0] == 42, "send/recv");
      show(r, "send/recv", msg);
    } else if (r == 1) {
      comm.recv(span(msg), 0);
      msg[0] *= 2;
      comm.send(cspan(msg), 0);
    }
  });
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
