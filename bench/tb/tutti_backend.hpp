#pragma once
// tutti-bench's backend for tutti itself: a communicator<Transport, Algorithm> and the
// (transport, algorithm) choices of the command line. One translation unit per transport
// (bench/tutti_bench_<transport>.cpp) instantiates it, so they compile side by side.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <tutti/tutti.hpp>

#include "driver.hpp"

namespace tutti_bench {

/// The algorithm names --algo accepts, `automatic` first (the default).
inline constexpr std::array<std::string_view, 9> tutti_algorithms{
    "automatic", "ring",  "tree",   "recursive_halving", "recursive_doubling",
    "direct",    "bruck", "native", "hierarchical"};

// Defined in bench/tutti_bench_<transport>.cpp.
[[nodiscard]] int run_inproc(const options& o);
[[nodiscard]] int run_shm(const options& o);
[[nodiscard]] int run_gloo(const options& o);
[[nodiscard]] int run_cluster(const options& o);

/// Whether tutti-bench can drive a policy on a transport: it needs a barrier, and all_reduce or
/// all_gather for its statistics.
template <class Algorithm, class Transport>
concept measurable = tutti::detail::has_barrier<Algorithm, Transport> &&
                     (tutti::detail::has_all_reduce<Algorithm, Transport> ||
                      tutti::detail::has_all_gather<Algorithm, Transport>);

/// Calls `f.template operator()<Algorithm>()` for the policy --algo names.
template <class F>
int with_algorithm(std::string_view name, F&& f) {
  if (name == "ring") return f.template operator()<tutti::ring>();
  if (name == "tree") return f.template operator()<tutti::tree>();
  if (name == "recursive_halving") return f.template operator()<tutti::recursive_halving>();
  if (name == "recursive_doubling") return f.template operator()<tutti::recursive_doubling>();
  if (name == "direct") return f.template operator()<tutti::direct>();
  if (name == "bruck") return f.template operator()<tutti::bruck>();
  if (name == "native") return f.template operator()<tutti::native>();
  if (name == "hierarchical") return f.template operator()<tutti::hierarchical>();
  return f.template operator()<tutti::automatic>();  // parse() admits only the names above
}

template <class Comm>
class tutti_backend {
  using transport = typename Comm::transport_type;
  using algorithm = typename Comm::algorithm_type;

 public:
  tutti_backend(Comm& comm, std::string transport_name)
      : comm_(comm), transport_(std::move(transport_name)) {}

  [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
  [[nodiscard]] int size() const noexcept { return comm_.size(); }
  void barrier() { comm_.barrier(); }

  [[nodiscard]] double reduce_stat(double x, stat s) {
    if constexpr (tutti::detail::has_all_reduce<algorithm, transport>) {
      switch (s) {
        case stat::min:
          comm_.all_reduce(std::span<double>(&x, 1), tutti::min);
          return x;
        case stat::max:
          comm_.all_reduce(std::span<double>(&x, 1), tutti::max);
          return x;
        case stat::sum:
          break;
      }
      comm_.all_reduce(std::span<double>(&x, 1), tutti::sum);
      return x;
    } else {  // bruck: every rank's value, reduced here
      std::vector<double> all(static_cast<std::size_t>(size()));
      comm_.all_gather(std::span<const double>(&x, 1), std::span<double>(all));
      double r = s == stat::sum ? 0.0 : all.front();
      for (const double v : all)
        r = s == stat::sum ? r + v : s == stat::min ? std::min(r, v) : std::max(r, v);
      return r;
    }
  }
  [[nodiscard]] std::uint64_t sum(std::uint64_t x) {
    if constexpr (tutti::detail::has_all_reduce<algorithm, transport>) {
      comm_.all_reduce(std::span<std::uint64_t>(&x, 1), tutti::sum);
      return x;
    } else {
      std::vector<std::uint64_t> all(static_cast<std::size_t>(size()));
      comm_.all_gather(std::span<const std::uint64_t>(&x, 1), std::span<std::uint64_t>(all));
      std::uint64_t r = 0;
      for (const auto v : all) r += v;
      return r;
    }
  }

  [[nodiscard]] std::string unsupported(collective c, placement p, datatype, redop) const {
    if (!implements(c))
      return std::string("the ") + algorithm::name + " policy has no " + std::string(name_of(c)) +
             " on " + transport_;
    if (p == placement::out_of_place && c == collective::broadcast)
      return "tutti's broadcast is in place only";
    if (p == placement::in_place && (c == collective::gather || c == collective::scatter))
      return std::string("tutti has no in-place ") + std::string(name_of(c));
    return {};
  }

  [[nodiscard]] run_info info() const {
    const std::string version = std::to_string(tutti::version_major) + "." +
                                std::to_string(tutti::version_minor) + "." +
                                std::to_string(tutti::version_patch);
    return {"tutti", "tutti " + transport_ + " " + algorithm::name, transport_, algorithm::name,
            "tutti " + version};
  }

  template <class T>
  void call(const call_args<T>& a) {
    const bool reduces = a.coll == collective::all_reduce || a.coll == collective::reduce ||
                         a.coll == collective::reduce_scatter;
    if (reduces)
      with_op(a.op, [&](auto op) { call_reducing(a, op); });
    else
      call_moving(a);
  }

 private:
  // all_reduce, reduce and reduce_scatter with the reduction `op`.
  template <class T, class Op>
  void call_reducing(const call_args<T>& a, Op op) {
    const bool ip = a.where == placement::in_place;
    std::span<const T> in(a.in, a.s.in_elems);
    std::span<T> out(a.out, a.s.out_elems);
    std::span<T> buf(a.out, a.s.buf_elems);
    switch (a.coll) {
      case collective::all_reduce:
        if constexpr (tutti::detail::has_all_reduce<algorithm, transport>) {
          if (ip)
            comm_.all_reduce(buf, op);
          else
            comm_.all_reduce(in, out, op);
        }
        return;
      case collective::reduce:
        if constexpr (tutti::detail::has_reduce<algorithm, transport>) {
          if (ip)
            comm_.reduce(buf, op, a.root);
          else
            comm_.reduce(in, out, op, a.root);
        }
        return;
      case collective::reduce_scatter:
        if constexpr (tutti::detail::has_reduce_scatter<algorithm, transport>) {
          if (ip)
            comm_.reduce_scatter(buf, op);
          else
            comm_.reduce_scatter(in, out, op);
        }
        return;
      default:
        return;  // call() sends only these here
    }
  }

  // The collectives that move data without reducing it.
  template <class T>
  void call_moving(const call_args<T>& a) {
    const bool ip = a.where == placement::in_place;
    std::span<const T> in(a.in, a.s.in_elems);
    std::span<T> out(a.out, a.s.out_elems);
    std::span<T> buf(a.out, a.s.buf_elems);
    switch (a.coll) {
      case collective::broadcast:
        if constexpr (tutti::detail::has_broadcast<algorithm, transport>)
          comm_.broadcast(buf, a.root);
        return;
      case collective::all_gather:
        if constexpr (tutti::detail::has_all_gather<algorithm, transport>) {
          if (ip)
            comm_.all_gather(buf);
          else
            comm_.all_gather(in, out);
        }
        return;
      case collective::gather:
        if constexpr (tutti::detail::has_gather<algorithm, transport>)
          comm_.gather(in, out, a.root);
        return;
      case collective::scatter:
        if constexpr (tutti::detail::has_scatter<algorithm, transport>)
          comm_.scatter(in, out, a.root);
        return;
      case collective::all_to_all:
        if constexpr (tutti::detail::has_all_to_all<algorithm, transport>) {
          if (ip)
            comm_.all_to_all(buf);
          else
            comm_.all_to_all(in, out);
        }
        return;
      default:
        return;  // call() sends the reductions to call_reducing
    }
  }

  template <class F>
  static void with_op(redop op, F&& f) {
    switch (op) {
      case redop::prod:
        return f(tutti::prod);
      case redop::min:
        return f(tutti::min);
      case redop::max:
        return f(tutti::max);
      case redop::avg:
        return f(tutti::avg);
      case redop::sum:
      case redop::none:
        break;
    }
    f(tutti::sum);
  }

  [[nodiscard]] static constexpr bool implements(collective c) noexcept {
    using namespace tutti::detail;
    switch (c) {
      case collective::all_reduce:
        return has_all_reduce<algorithm, transport>;
      case collective::reduce:
        return has_reduce<algorithm, transport>;
      case collective::reduce_scatter:
        return has_reduce_scatter<algorithm, transport>;
      case collective::broadcast:
        return has_broadcast<algorithm, transport>;
      case collective::all_gather:
        return has_all_gather<algorithm, transport>;
      case collective::gather:
        return has_gather<algorithm, transport>;
      case collective::scatter:
        return has_scatter<algorithm, transport>;
      case collective::all_to_all:
        return has_all_to_all<algorithm, transport>;
    }
    return false;
  }

  Comm& comm_;
  std::string transport_;
};

/// Runs the sweep over a transport whose ranks are processes: spawns --np of them (or runs
/// as the launcher's rank), each building its communicator with from_env().
template <class Transport>
int run_processes(const options& o, std::string_view transport_name) {
  return with_algorithm(o.algo, [&]<class Algorithm>() -> int {
    if constexpr (!measurable<Algorithm, Transport>) {
      std::fprintf(stderr, "tutti-bench: --algo %s has no collectives on %.*s\n", Algorithm::name,
                   static_cast<int>(transport_name.size()), transport_name.data());
      return 2;
    } else {
      return tutti::spawn(o.np != 0 ? o.np : 2, [&] {
        auto comm = tutti::communicator<Transport, Algorithm>::from_env();
        tutti_backend<decltype(comm)> b(comm, std::string(transport_name));
        return run(b, o, "tutti-bench");
      });
    }
  });
}

}  // namespace tutti_bench
