// tutti-bench-gloo: the Gloo peer of tutti-bench. The same sweep, rule, checks, table and JSON
// (bench/tb/driver.hpp); the timed calls are Gloo's own collectives on the TCP connections a
// tutti::gloo communicator made (its barrier and statistics stay outside the timed calls):
//   tutti-bench-gloo all_reduce --np 4 --algo ring_chunked -b 8 -e 64M -f 4 --json g.json
// --algo picks Gloo's all_reduce: ring, bcube (gloo::allreduce, unbound buffers), ring_chunked,
// halving_doubling (the classic algorithm classes, buffers bound at construction, in place);
// the other collectives have one implementation in Gloo (broadcast, reduce, allgather, gather,
// scatter, alltoall; Gloo has no reduce_scatter in its collectives API). Each run makes its own
// connections: the classic classes set SO_SNDBUF on the sockets they use.

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include <gloo/allgather.h>
#include <gloo/allreduce.h>
#include <gloo/allreduce_halving_doubling.h>
#include <gloo/allreduce_ring_chunked.h>
#include <gloo/alltoall.h>
#include <gloo/broadcast.h>
#include <gloo/gather.h>
#include <gloo/math.h>
#include <gloo/reduce.h>
#include <gloo/scatter.h>

#include <tutti/transport/gloo.hpp>
#include <tutti/tutti.hpp>

#include "../tb/driver.hpp"

namespace {

namespace tb = tutti_bench;

constexpr std::array<std::string_view, 4> algorithms{"ring", "bcube", "ring_chunked",
                                                     "halving_doubling"};

template <class T>
using gloo_fn = void (*)(void*, const void*, const void*, std::size_t);

template <class T>
gloo_fn<T> reduce_fn(tb::redop op) {
  switch (op) {
    case tb::redop::prod:
      return &::gloo::product<T>;
    case tb::redop::min:
      return &::gloo::min<T>;
    case tb::redop::max:
      return &::gloo::max<T>;
    default:
      return &::gloo::sum<T>;
  }
}

template <class Comm>
class gloo_backend {
 public:
  gloo_backend(Comm& comm, std::string algo, tb::collective c)
      : comm_(comm), algo_(std::move(algo)), coll_(c) {}

  [[nodiscard]] int rank() const noexcept { return comm_.rank(); }
  [[nodiscard]] int size() const noexcept { return comm_.size(); }
  void barrier() { comm_.barrier(); }

  [[nodiscard]] double reduce_stat(double x, tb::stat s) {
    if (s == tb::stat::min)
      comm_.all_reduce(std::span<double>(&x, 1), tutti::min);
    else if (s == tb::stat::max)
      comm_.all_reduce(std::span<double>(&x, 1), tutti::max);
    else
      comm_.all_reduce(std::span<double>(&x, 1), tutti::sum);
    return x;
  }
  [[nodiscard]] std::uint64_t sum(std::uint64_t x) {
    comm_.all_reduce(std::span<std::uint64_t>(&x, 1), tutti::sum);
    return x;
  }

  [[nodiscard]] std::string unsupported(tb::collective c, tb::placement p, tb::datatype t,
                                        tb::redop o) const {
    using tb::collective;
    using tb::placement;
    if (t == tb::datatype::float16 || t == tb::datatype::bfloat16)
      return "this peer runs Gloo on int and float types only";
    if (o == tb::redop::avg) return "Gloo has no avg op";
    if (c == collective::reduce_scatter) return "Gloo's collectives API has no reduce_scatter";
    if (c != collective::all_reduce && algo_ != "ring")
      return "--algo " + algo_ + " is one of Gloo's all_reduce algorithms";
    const bool classic = algo_ == "ring_chunked" || algo_ == "halving_doubling";
    if (p == placement::out_of_place &&
        (c == collective::broadcast || (c == collective::all_reduce && classic)))
      return "Gloo's " + std::string(tb::name_of(c)) + " here is in place only";
    if (p == placement::in_place && (c == collective::gather || c == collective::scatter ||
                                     c == collective::all_to_all || c == collective::reduce))
      return "Gloo has no in-place " + std::string(tb::name_of(c));
    return {};
  }

  [[nodiscard]] tb::run_info info() const {
    const std::string version =
        "Gloo (Debian libgloo-dev), connections by tutti " + std::to_string(tutti::version_major) +
        "." + std::to_string(tutti::version_minor) + "." + std::to_string(tutti::version_patch);
    // Only all_reduce has several algorithms in Gloo: the others are just "gloo".
    const bool several = coll_ == tb::collective::all_reduce;
    return {"gloo", several ? "gloo " + algo_ : "gloo", "gloo", several ? algo_ : "default",
            version};
  }

  template <class T>
  void call(const tb::call_args<T>& a) {
    if constexpr (std::is_arithmetic_v<T>) gloo_call(a);  // unsupported() keeps 16-bit floats out
  }

 private:
  // gloo::allreduce (ring, bcube) or a classic class (ring_chunked, halving_doubling).
  template <class T>
  void all_reduce(const tb::call_args<T>& a) {
    const bool ip = a.where == tb::placement::in_place;
    if (size() == 1) {
      if (!ip) std::memcpy(a.out, a.in, a.s.count * sizeof(T));
      return;
    }
    if (algo_ != "ring" && algo_ != "bcube") {
      classic<T>(a).run();
      return;
    }
    ::gloo::AllreduceOptions o(comm_.transport().context());
    if (!ip) o.setInput(const_cast<T*>(a.in), a.s.count);
    o.setOutput(a.out, a.s.count);
    o.setReduceFunction(reduce_fn<T>(a.op));
    o.setAlgorithm(algo_ == "ring" ? ::gloo::AllreduceOptions::Algorithm::RING
                                   : ::gloo::AllreduceOptions::Algorithm::BCUBE);
    o.setTag(tag_++);
    ::gloo::allreduce(o);
  }

  // Gloo's scatter takes one pointer per rank's block, on the root.
  template <class T>
  void scatter(const tb::call_args<T>& a) {
    ::gloo::ScatterOptions o(comm_.transport().context());
    if (rank() == a.root) {
      std::vector<T*> blocks;
      for (int q = 0; q < size(); ++q)
        blocks.push_back(const_cast<T*>(a.in) + static_cast<std::size_t>(q) * a.s.count);
      o.setInputs(blocks, a.s.count);
    }
    o.setOutput(a.out, a.s.count);
    o.setRoot(a.root);
    o.setTag(tag_++);
    ::gloo::scatter(o);
  }

  template <class T>
  void gloo_call(const tb::call_args<T>& a) {
    using tb::collective;
    const auto& ctx = comm_.transport().context();
    const std::size_t n = static_cast<std::size_t>(size());
    const bool ip = a.where == tb::placement::in_place;
    T* in = const_cast<T*>(a.in);
    if (a.s.count == 0) return;
    switch (a.coll) {
      case collective::all_reduce:
        all_reduce(a);
        return;
      case collective::reduce: {
        ::gloo::ReduceOptions o(ctx);
        o.setInput(in, a.s.count);
        o.setOutput(a.out, a.s.count);
        o.setRoot(a.root);
        o.setReduceFunction(reduce_fn<T>(a.op));
        o.setTag(tag_++);
        ::gloo::reduce(o);
        return;
      }
      case collective::broadcast: {
        ::gloo::BroadcastOptions o(ctx);
        o.setOutput(a.out, a.s.count);
        o.setRoot(a.root);
        o.setTag(tag_++);
        ::gloo::broadcast(o);
        return;
      }
      case collective::all_gather: {
        ::gloo::AllgatherOptions o(ctx);
        if (!ip) o.setInput(in, a.s.count);  // in place: Gloo reads this rank's block of out
        o.setOutput(a.out, a.s.count * n);
        o.setTag(tag_++);
        ::gloo::allgather(o);
        return;
      }
      case collective::gather: {
        ::gloo::GatherOptions o(ctx);
        o.setInput(in, a.s.count);
        if (rank() == a.root) o.setOutput(a.out, a.s.count * n);
        o.setRoot(a.root);
        o.setTag(tag_++);
        ::gloo::gather(o);
        return;
      }
      case collective::scatter:
        scatter(a);
        return;
      case collective::all_to_all: {
        ::gloo::AlltoallOptions o(ctx);
        o.setInput(in, a.s.count * n);
        o.setOutput(a.out, a.s.count * n);
        o.setTag(tag_++);
        ::gloo::alltoall(o);
        return;
      }
      case collective::reduce_scatter:
        return;  // unsupported() keeps it away
    }
  }

  // The classic classes bind their buffer at construction (as Gloo's own benchmark uses them):
  // one instance per (buffer, count, op, type), built at the first (warm-up) call.
  template <class T>
  ::gloo::Algorithm& classic(const tb::call_args<T>& a) {
    const auto key = std::tuple{static_cast<void*>(a.out), a.s.count, static_cast<int>(a.op),
                                static_cast<int>(tb::detail::element_of<T>)};
    auto it = classic_.find(key);
    if (it == classic_.end()) {
      const auto& ctx = comm_.transport().context();
      const std::vector<T*> ptrs{a.out};
      const auto fn = reduce_fn_classic<T>(a.op);
      std::unique_ptr<::gloo::Algorithm> alg;
      if (algo_ == "ring_chunked")
        alg = std::make_unique<::gloo::AllreduceRingChunked<T>>(ctx, ptrs,
                                                                static_cast<int>(a.s.count), fn);
      else
        alg = std::make_unique<::gloo::AllreduceHalvingDoubling<T>>(
            ctx, ptrs, static_cast<int>(a.s.count), fn);
      it = classic_.emplace(key, std::move(alg)).first;
    }
    return *it->second;
  }

  template <class T>
  static const ::gloo::ReductionFunction<T>* reduce_fn_classic(tb::redop op) {
    switch (op) {
      case tb::redop::prod:
        return ::gloo::ReductionFunction<T>::product;
      case tb::redop::min:
        return ::gloo::ReductionFunction<T>::min;
      case tb::redop::max:
        return ::gloo::ReductionFunction<T>::max;
      default:
        return ::gloo::ReductionFunction<T>::sum;
    }
  }

  Comm& comm_;
  std::string algo_;
  tb::collective coll_;
  std::uint32_t tag_ = 1;
  std::map<std::tuple<void*, std::size_t, int, int>, std::unique_ptr<::gloo::Algorithm>> classic_;
};

}  // namespace

int main(int argc, char** argv) {
  return tb::program_main(argc, argv,
                          {.name = "tutti-bench-gloo", .spawns_ranks = true, .algos = algorithms},
                          [](const tb::options& o) {
                            return tutti::spawn(o.np != 0 ? o.np : 2, [&] {
                              auto comm = tutti::communicator<tutti::gloo>::from_env();
                              gloo_backend<decltype(comm)> b(comm, o.algo, o.coll);
                              return tb::run(b, o, "tutti-bench-gloo");
                            });
                          });
}
