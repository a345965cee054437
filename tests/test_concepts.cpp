// Transport concepts with positive and negative models, and an archetype: a transport with
// point-to-point only (no fused receive, no shared segment), over which every policy must run
// what it claims from point_to_point alone, through the staging path other transports use.

#include <thread>

#include "harness.hpp"

namespace {

/// Point-to-point only: forwards to an inproc endpoint and hides everything else.
class p2p_archetype {
 public:
  using memory_space = tutti::host_memory;
  using request = tutti::inproc::request;

  explicit p2p_archetype(tutti::inproc t) : t_(std::move(t)) {}
  [[nodiscard]] int rank() const noexcept { return t_.rank(); }
  [[nodiscard]] int size() const noexcept { return t_.size(); }
  [[nodiscard]] request isend(int peer, std::span<const std::byte> d, const tutti::detail::call& c,
                              tutti::detail::space s, std::uint64_t tag) {
    return t_.isend(peer, d, c, s, tag);
  }
  [[nodiscard]] request irecv(int peer, std::span<std::byte> d, const tutti::detail::call& c,
                              tutti::detail::space s, std::uint64_t tag) {
    return t_.irecv(peer, d, c, s, tag);
  }
  void wait(request& r, const tutti::detail::call& c, tutti::detail::clock::time_point deadline) {
    t_.wait(r, c, deadline);
  }
  void publish(const tutti::detail::call& c) noexcept { t_.publish(c); }

 private:
  tutti::inproc t_;
};

struct not_a_transport {
  [[nodiscard]] int rank() const noexcept { return 0; }
};

/// Runs fn(comm) on p threads with communicator<p2p_archetype, P>.
template <class P, class Fn>
void run_archetype(int p, Fn fn) {
  auto world = std::make_shared<tutti::detail::inproc_world>(p);
  std::vector<std::thread> threads;
  threads.reserve(static_cast<std::size_t>(p));
  std::atomic<int> failed{0};
  for (int r = 0; r < p; ++r)
    threads.emplace_back([&, r] {
      try {
        tutti::communicator<p2p_archetype, P> comm(p2p_archetype(tutti::inproc(world, r)));
        fn(comm);
      } catch (...) {
        failed++;
        world->abort(tutti::errc::aborted, "rank failed");
      }
    });
  for (auto& t : threads) t.join();
  CHECK(failed.load() == 0);
}

template <class P>
void check_policy() {
  for (int p = 1; p <= 8; ++p)
    for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{37}, std::size_t{70001}}) {
      std::atomic<int> wrong{0};
      run_archetype<P>(p, [&](auto& comm) {
        const auto up = static_cast<std::size_t>(comm.size());
        if constexpr (tutti::detail::has_all_reduce<P, p2p_archetype>) {
          std::vector<std::int64_t> v(n);
          for (std::size_t i = 0; i < n; ++i)
            v[i] = comm.rank() * 1000 + static_cast<std::int64_t>(i);
          comm.all_reduce(std::span<std::int64_t>(v), tutti::sum);
          for (std::size_t i = 0; i < n; ++i)
            if (v[i] != std::int64_t{p} * (p - 1) / 2 * 1000 + p * static_cast<std::int64_t>(i))
              wrong++;
        }
        if constexpr (tutti::detail::has_reduce_scatter<P, p2p_archetype>) {
          std::vector<float> in(n * up, float(comm.rank() + 1)), out(n);
          comm.reduce_scatter(std::span<const float>(in), std::span<float>(out), tutti::max);
          for (float x : out)
            if (x != float(p)) wrong++;
        }
        if constexpr (tutti::detail::has_reduce<P, p2p_archetype>) {
          std::vector<int> in(n, comm.rank() + 1), out(comm.rank() == 0 ? n : 0);
          comm.reduce(std::span<const int>(in), std::span<int>(out), tutti::prod, 0);
          int fact = 1;
          for (int k = 2; k <= p; ++k) fact *= k;
          for (int x : out)
            if (x != fact) wrong++;
        }
      });
      INFO(P::name, " p=", p, " n=", n);
      CHECK(wrong.load() == 0);
    }
}

}  // namespace

// The versioned inline namespace (version.hpp): tutti::x is tutti::v0::x.
static_assert(std::is_same_v<tutti::inproc, tutti::v0::inproc>);
static_assert(std::is_same_v<tutti::ring, tutti::v0::ring>);
static_assert(tutti::point_to_point<tutti::inproc>);
static_assert(tutti::fused_receive<tutti::inproc>);
static_assert(tutti::shared_segment<tutti::inproc>);

static_assert(tutti::point_to_point<p2p_archetype>);
static_assert(!tutti::fused_receive<p2p_archetype>);
static_assert(!tutti::shared_segment<p2p_archetype>);
static_assert(!tutti::point_to_point<not_a_transport>);

// What a policy offers depends on what the transport models.
static_assert(tutti::detail::has_all_reduce<tutti::direct, tutti::inproc>);
static_assert(!tutti::detail::has_all_reduce<tutti::direct, p2p_archetype>);
static_assert(tutti::detail::has_all_to_all<tutti::direct, p2p_archetype>);
static_assert(!tutti::detail::has_all_reduce<tutti::bruck, tutti::inproc>);
static_assert(tutti::detail::has_all_reduce<tutti::automatic, p2p_archetype>);

TEST_CASE("policies run over a point-to-point-only transport (staged receive, no segment)") {
  check_policy<tutti::ring>();
  check_policy<tutti::tree>();
  check_policy<tutti::recursive_halving>();
  check_policy<tutti::recursive_doubling>();
  check_policy<tutti::automatic>();
}
