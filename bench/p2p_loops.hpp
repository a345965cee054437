#pragma once
// The point-to-point measurements shared by tutti-bench-p2p (tutti) and tutti-bench-mpi-p2p
// (MPI_Isend/MPI_Irecv), so that both sides run the same loops (the OSU micro-benchmarks'):
//
//   latency    ranks 0 and 1 ping-pong one message; half the round trip, averaged.
//   bandwidth  rank 0 posts a window of 64 sends, rank 1 64 receives; after each window rank 1
//              answers with 4 bytes. Bytes moved per second over the whole run.
//
// `ops` posts and waits: `send(buf, bytes, peer, tag)` and `recv(...)` return a handle that
// `wait(handle)` completes; `barrier()` lines the ranks up. Every received message is checked
// (its first and last bytes carry the iteration), so a benchmark that moves nothing fails.
// Output: one CSV line per size, "mode,bytes,latency_us,bandwidth_MBps".

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace p2p_bench {

struct sweep {
  std::size_t min_bytes = 8;
  std::size_t max_bytes = std::size_t{64} << 20;
  int window = 64;
};

/// Iterations for a message of `bytes`: enough to take some milliseconds at every size.
inline int iterations(std::size_t bytes, bool bandwidth) {
  if (bytes <= 4096) return bandwidth ? 200 : 20000;
  if (bytes <= (std::size_t{1} << 20)) return bandwidth ? 20 : 1000;
  return bandwidth ? 3 : 50;
}

inline std::uint8_t stamp(int i) { return static_cast<std::uint8_t>(i * 31 + 7); }

/// Runs the sweep on rank `rank` (0 or 1); rank 0 prints. Returns false if a message arrived
/// wrong.
template <class Ops>
bool run(Ops& ops, int rank, const std::string& mode, const sweep& s) {
  using clock = std::chrono::steady_clock;
  const int peer = 1 - rank;
  bool ok = true;
  std::vector<std::uint8_t> out(s.max_bytes), in(s.max_bytes);
  std::vector<std::vector<std::uint8_t>> window_in(static_cast<std::size_t>(s.window));
  std::uint32_t ack = 0;
  for (std::size_t bytes = s.min_bytes; bytes <= s.max_bytes; bytes *= 2) {
    // Latency: ping-pong, with 10% warm-up.
    const int n = iterations(bytes, false);
    const int warm = n / 10;
    ops.barrier();
    clock::time_point start{};
    for (int i = 0; i < warm + n; ++i) {
      if (i == warm) start = clock::now();
      out[0] = out[bytes - 1] = stamp(i);
      if (rank == 0) {
        auto sh = ops.send(out.data(), bytes, peer, 1);
        auto rh = ops.recv(in.data(), bytes, peer, 1);
        ops.wait(sh);
        ops.wait(rh);
      } else {
        auto rh = ops.recv(in.data(), bytes, peer, 1);
        ops.wait(rh);
        auto sh = ops.send(out.data(), bytes, peer, 1);
        ops.wait(sh);
      }
      ok = ok && in[0] == stamp(i) && in[bytes - 1] == stamp(i);
    }
    const double lat_us =
        std::chrono::duration<double, std::micro>(clock::now() - start).count() / (2.0 * n);

    // Bandwidth: windows of sends, each answered by 4 bytes.
    const int m = iterations(bytes, true);
    for (auto& w : window_in) w.resize(bytes);
    ops.barrier();
    start = clock::now();
    for (int i = 0; i < m; ++i) {
      if (rank == 0) {
        out[0] = out[bytes - 1] = stamp(i);
        std::vector<typename Ops::handle> hs;
        for (int w = 0; w < s.window; ++w) hs.push_back(ops.send(out.data(), bytes, peer, 2));
        for (auto& h : hs) ops.wait(h);
        auto ah = ops.recv(&ack, sizeof ack, peer, 3);
        ops.wait(ah);
      } else {
        std::vector<typename Ops::handle> hs;
        for (auto& w : window_in) hs.push_back(ops.recv(w.data(), bytes, peer, 2));
        for (auto& h : hs) ops.wait(h);
        for (auto& w : window_in) ok = ok && w[0] == stamp(i) && w[bytes - 1] == stamp(i);
        auto ah = ops.send(&ack, sizeof ack, peer, 3);
        ops.wait(ah);
      }
    }
    const double secs = std::chrono::duration<double>(clock::now() - start).count();
    const double mbps = static_cast<double>(bytes) * s.window * m / secs / 1e6;
    if (rank == 0) std::printf("%s,%zu,%.3f,%.1f\n", mode.c_str(), bytes, lat_us, mbps);
    std::fflush(stdout);
  }
  return ok;
}

}  // namespace p2p_bench
