// tutti-bench-p2p: point-to-point latency and bandwidth between 2 ranks over tutti::shm, the
// OSU micro-benchmarks' loops (bench/p2p_loops.hpp), through isend/irecv and through blocking
// send/recv. bench/compare_p2p.sh runs it next to tutti-bench-mpi-p2p (MPI_Isend/MPI_Irecv).
//
//   tutti-bench-p2p [--mode isend|blocking|both] [-b MIN] [-e MAX]   sizes in bytes
//
// Prints "mode,bytes,latency_us,bandwidth_MBps" per size; exit 1 if a message arrived wrong.

#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <string_view>

#include <tutti/tutti.hpp>

#include "p2p_loops.hpp"

namespace {

template <class Comm>
struct nonblocking_ops {
  using handle = tutti::work;
  Comm& c;
  handle send(const void* p, std::size_t n, int peer, std::uint64_t tag) {
    return c.isend(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(p), n), peer,
                   tag);
  }
  handle recv(void* p, std::size_t n, int peer, std::uint64_t tag) {
    return c.irecv(std::span<std::uint8_t>(static_cast<std::uint8_t*>(p), n), peer, tag);
  }
  void wait(handle& h) { h.wait(); }
  void barrier() { c.barrier(); }
};

// Blocking calls: a send completes before the next call, so the window and the ping-pong run
// as send-then-receive (the same loops; the handle is empty).
template <class Comm>
struct blocking_ops {
  struct handle {};
  Comm& c;
  handle send(const void* p, std::size_t n, int peer, std::uint64_t tag) {
    c.send(std::span<const std::uint8_t>(static_cast<const std::uint8_t*>(p), n), peer, tag);
    return {};
  }
  handle recv(void* p, std::size_t n, int peer, std::uint64_t tag) {
    c.recv(std::span<std::uint8_t>(static_cast<std::uint8_t*>(p), n), peer, tag);
    return {};
  }
  void wait(handle&) {}
  void barrier() { c.barrier(); }
};

}  // namespace

int main(int argc, char** argv) {
  std::string mode = "both";
  p2p_bench::sweep s;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view a = argv[i];
    if (a == "--mode") {
      mode = argv[i + 1];
    } else if (a == "-b" || a == "-e") {
      const auto v = static_cast<std::size_t>(std::strtoull(argv[i + 1], nullptr, 10));
      (a == "-b" ? s.min_bytes : s.max_bytes) = v;
    } else {
      argc = -1;
    }
  }
  if (argc < 0 || argc % 2 == 0 || s.min_bytes == 0 || s.min_bytes > s.max_bytes ||
      (mode != "isend" && mode != "blocking" && mode != "both")) {
    std::fprintf(stderr, "usage: %s [--mode isend|blocking|both] [-b MIN] [-e MAX]\n", argv[0]);
    return 2;
  }
  return tutti::spawn(2, [&] {
    auto comm = tutti::communicator<tutti::shm>::from_env();
    bool ok = true;
    // Blocking sends of a window would wait for receives the peer posts only later: the
    // blocking mode measures latency and a window of 1.
    if (mode != "blocking") {
      nonblocking_ops<decltype(comm)> ops{comm};
      ok = p2p_bench::run(ops, comm.rank(), "tutti isend/irecv", s) && ok;
    }
    if (mode != "isend") {
      blocking_ops<decltype(comm)> ops{comm};
      p2p_bench::sweep one = s;
      one.window = 1;
      ok = p2p_bench::run(ops, comm.rank(), "tutti send/recv", one) && ok;
    }
    if (!ok) std::fprintf(stderr, "tutti-bench-p2p: a message arrived WRONG\n");
    return ok ? 0 : 1;
  });
}
