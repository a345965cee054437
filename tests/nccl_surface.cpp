// Compile-only coverage of the device half of tutti::communicator's surface: every collective,
// every in-place form and every _async on GPU memory (tutti::device_span), with and without a
// stream, instantiated by the C++ compiler against tutti::nccl for the default policy
// (automatic, which implements everything) and for native (NCCL's own collectives, where NCCL
// has them). Built with tutti_nccl_all; it needs no GPU because nothing here runs. The same
// forms run with exact values on host memory in tests/test_surface.cpp, and on GPUs through
// the calls tests/test_nccl.cu makes.

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <vector>

#include <tutti/transport/nccl.hpp>
#include <tutti/tutti.hpp>

namespace {

using device_comm = tutti::communicator<tutti::nccl>;
static_assert(std::is_same_v<device_comm::memory_space, tutti::cuda_device_memory>);
static_assert(std::is_same_v<device_comm::span_type<float>, tutti::device_span<float>>);
static_assert(std::is_same_v<device_comm::stream_type, tutti::stream_ref>);

/// Device buffers for one call of each form: `f` holds floats, `x` ints; `p` blocks of `n`.
struct device_buffers {
  float* f;
  std::int32_t* x;
  std::size_t n;
  std::size_t p;
  [[nodiscard]] tutti::device_span<float> fs(std::size_t count) const { return {f, count}; }
  [[nodiscard]] tutti::device_span<const float> cfs(std::size_t count) const { return {f, count}; }
  [[nodiscard]] tutti::device_span<std::int32_t> xs(std::size_t count) const { return {x, count}; }
  [[nodiscard]] tutti::device_span<const std::int32_t> cxs(std::size_t count) const {
    return {x, count};
  }
};

/// Every reducing form: out of place and in place, blocking and async, on the communicator's
/// stream (no argument) and on `s`.
template <class Comm>
void reducing_forms(Comm& comm, const device_buffers& d, cudaStream_t s) {
  using tr = typename Comm::transport_type;
  using policy = typename Comm::algorithm_type;
  const std::size_t n = d.n, all = d.n * d.p;
  if constexpr (tutti::detail::has_all_reduce<policy, tr>) {
    comm.all_reduce(d.fs(n), tutti::sum);
    comm.all_reduce(d.fs(n), tutti::avg, s);
    comm.all_reduce(d.cfs(n), d.fs(n), tutti::max);
    comm.all_reduce(d.fs(n), d.fs(n), tutti::min, s);  // a non-const input converts
    comm.all_reduce_async(d.xs(n), tutti::bxor).wait();
    comm.all_reduce_async(d.xs(n), tutti::band, s).wait();
    comm.all_reduce_async(d.cxs(n), d.xs(n), tutti::bor).wait();
    comm.all_reduce_async(d.cxs(n), d.xs(n), tutti::prod, s).wait();
  }
  if constexpr (tutti::detail::has_reduce<policy, tr>) {
    comm.reduce(d.cfs(n), d.fs(n), tutti::sum, 0);
    comm.reduce(d.cfs(n), d.fs(n), tutti::sum, 0, s);
    comm.reduce(d.fs(n), tutti::sum, 0);
    comm.reduce(d.fs(n), tutti::sum, 0, s);
    comm.reduce_async(d.cfs(n), d.fs(n), tutti::sum, 0).wait();
    comm.reduce_async(d.cfs(n), d.fs(n), tutti::sum, 0, s).wait();
    comm.reduce_async(d.fs(n), tutti::sum, 0).wait();
    comm.reduce_async(d.fs(n), tutti::sum, 0, s).wait();
  }
  if constexpr (tutti::detail::has_reduce_scatter<policy, tr>) {
    comm.reduce_scatter(d.cfs(all), d.fs(n), tutti::sum);
    comm.reduce_scatter(d.cfs(all), d.fs(n), tutti::sum, s);
    comm.reduce_scatter(d.fs(all), tutti::sum);
    comm.reduce_scatter(d.fs(all), tutti::sum, s);
    comm.reduce_scatter_async(d.cfs(all), d.fs(n), tutti::sum).wait();
    comm.reduce_scatter_async(d.cfs(all), d.fs(n), tutti::sum, s).wait();
    comm.reduce_scatter_async(d.fs(all), tutti::sum).wait();
    comm.reduce_scatter_async(d.fs(all), tutti::sum, s).wait();
  }
}

/// Every data-movement form, the v-variants, barrier and point-to-point.
template <class Comm>
void moving_forms(Comm& comm, const device_buffers& d, cudaStream_t s) {
  using tr = typename Comm::transport_type;
  using policy = typename Comm::algorithm_type;
  const std::size_t n = d.n, all = d.n * d.p;
  if constexpr (tutti::detail::has_broadcast<policy, tr>) {
    comm.broadcast(d.xs(n), 0);
    comm.broadcast(d.xs(n), 0, s);
    comm.broadcast_async(d.xs(n), 0).wait();
    comm.broadcast_async(d.xs(n), 0, s).wait();
  }
  if constexpr (tutti::detail::has_all_gather<policy, tr>) {
    comm.all_gather(d.cxs(n), d.xs(all));
    comm.all_gather(d.cxs(n), d.xs(all), s);
    comm.all_gather(d.xs(all));
    comm.all_gather(d.xs(all), s);
    comm.all_gather_async(d.cxs(n), d.xs(all)).wait();
    comm.all_gather_async(d.cxs(n), d.xs(all), s).wait();
    comm.all_gather_async(d.xs(all)).wait();
    comm.all_gather_async(d.xs(all), s).wait();
  }
  if constexpr (tutti::detail::has_gather<policy, tr> && tutti::detail::has_scatter<policy, tr>) {
    comm.gather(d.cxs(n), d.xs(all), 0);
    comm.gather(d.cxs(n), d.xs(all), 0, s);
    comm.gather_async(d.cxs(n), d.xs(all), 0).wait();
    comm.gather_async(d.cxs(n), d.xs(all), 0, s).wait();
    comm.scatter(d.cxs(all), d.xs(n), 0);
    comm.scatter(d.cxs(all), d.xs(n), 0, s);
    comm.scatter_async(d.cxs(all), d.xs(n), 0).wait();
    comm.scatter_async(d.cxs(all), d.xs(n), 0, s).wait();
  }
  if constexpr (tutti::detail::has_all_to_all<policy, tr>) {
    comm.all_to_all(d.cxs(all), d.xs(all));
    comm.all_to_all(d.cxs(all), d.xs(all), s);
    comm.all_to_all(d.xs(all));
    comm.all_to_all(d.xs(all), s);
    comm.all_to_all_async(d.cxs(all), d.xs(all)).wait();
    comm.all_to_all_async(d.cxs(all), d.xs(all), s).wait();
    comm.all_to_all_async(d.xs(all)).wait();
    comm.all_to_all_async(d.xs(all), s).wait();
  }
  const std::vector<std::size_t> counts(d.p, n);  // a vector converts to the counts span
  if constexpr (tutti::detail::has_all_gatherv<policy, tr>) {
    comm.all_gatherv(d.cfs(n), d.fs(all), counts);
    comm.all_gatherv(d.cfs(n), d.fs(all), counts, s);
    comm.all_gatherv_async(d.cfs(n), d.fs(all), counts).wait();
    comm.all_gatherv_async(d.cfs(n), d.fs(all), counts, s).wait();
  }
  if constexpr (tutti::detail::has_gatherv<policy, tr>) {
    comm.gatherv(d.cfs(n), d.fs(all), counts, 0);
    comm.gatherv(d.cfs(n), d.fs(all), counts, 0, s);
    comm.gatherv_async(d.cfs(n), d.fs(all), counts, 0).wait();
    comm.gatherv_async(d.cfs(n), d.fs(all), counts, 0, s).wait();
  }
  if constexpr (tutti::detail::has_scatterv<policy, tr>) {
    comm.scatterv(d.cfs(all), d.fs(n), counts, 0);
    comm.scatterv(d.cfs(all), d.fs(n), counts, 0, s);
    comm.scatterv_async(d.cfs(all), d.fs(n), counts, 0).wait();
    comm.scatterv_async(d.cfs(all), d.fs(n), counts, 0, s).wait();
  }
  if constexpr (tutti::detail::has_all_to_allv<policy, tr>) {
    comm.all_to_allv(d.cfs(all), counts, d.fs(all), counts);
    comm.all_to_allv(d.cfs(all), counts, d.fs(all), counts, s);
    comm.all_to_allv_async(d.cfs(all), counts, d.fs(all), counts).wait();
    comm.all_to_allv_async(d.cfs(all), counts, d.fs(all), counts, s).wait();
  }
  if constexpr (tutti::detail::has_barrier<policy, tr>) {
    comm.barrier();
    comm.barrier(s);
    comm.barrier_async().wait();
    comm.barrier_async(s).wait();
  }
  comm.send(d.cfs(n), 1);
  comm.send(d.fs(n), 1, 7, s);
  comm.recv(d.fs(n), 1);
  comm.recv(d.fs(n), 1, 7, s);
  comm.isend(d.cfs(n), 1).wait();
  comm.irecv(d.fs(n), 1, 0, s).wait();
  comm.batch(s).send(d.cfs(n), 1).recv(d.fs(n), 1).start().wait();
  comm.batch().recv(d.xs(n), 1).send(d.cxs(n), 1).run();
}

// tutti::bucketer over tutti::nccl: every member, buckets in GPU memory.
[[maybe_unused]] void bucketer_surface(device_comm& comm, const device_buffers& d) {
  tutti::bucketer b(comm, {.first_bucket_bytes = 64});
  b.add(d.fs(d.n));
  b.add(d.xs(d.n));
  b.template add<float>(d.n);
  (void)b.template gradient<float>(2);
  (void)b.layout();
  b.mark_ready(0);
  { auto guard = b.no_sync(); }
  b.finish();
  (void)b.used(0);
  (void)b.active_ranks();
  (void)b.join();  // refuses: uneven_inputs is off (compiles all the same)
}

// automatic implements every collective on tutti::nccl, so none of the guards above skips a
// form for the default policy.
template <class P, class T>
concept implements_everything =
    tutti::detail::has_all_reduce<P, T> && tutti::detail::has_reduce<P, T> &&
    tutti::detail::has_reduce_scatter<P, T> && tutti::detail::has_broadcast<P, T> &&
    tutti::detail::has_all_gather<P, T> && tutti::detail::has_gather<P, T> &&
    tutti::detail::has_scatter<P, T> && tutti::detail::has_all_to_all<P, T> &&
    tutti::detail::has_all_gatherv<P, T> && tutti::detail::has_gatherv<P, T> &&
    tutti::detail::has_scatterv<P, T> && tutti::detail::has_all_to_allv<P, T> &&
    tutti::detail::has_barrier<P, T>;
static_assert(implements_everything<tutti::automatic, tutti::nccl>);

template <class Comm>
void every_form(Comm& comm, const device_buffers& d, cudaStream_t s) {
  reducing_forms(comm, d, s);
  moving_forms(comm, d, s);
}

}  // namespace

// Sub-communicators and a mesh through ncclCommSplit (run on GPUs by tests/test_nccl.cu).
void nccl_surface_split(tutti::communicator<tutti::nccl>& comm);
void nccl_surface_split(tutti::communicator<tutti::nccl>& comm) {
  auto parity = comm.split(comm.rank() % 2, 0);
  auto native = comm.split<tutti::native>(tutti::no_color, 0);
  const std::vector<int> ranks{0};
  auto solo = comm.group(ranks);
  tutti::mesh m(comm, {1, comm.size()}, {"dp", "tp"});
  (void)parity;
  (void)native;
  (void)solo;
  m["tp"].barrier();
}

// Entry points with external linkage, so each instantiation is compiled in full.
void nccl_surface_automatic(tutti::communicator<tutti::nccl>& comm, float* f, std::int32_t* x,
                            std::size_t n, cudaStream_t s);
void nccl_surface_native(tutti::communicator<tutti::nccl, tutti::native>& comm, float* f,
                         std::int32_t* x, std::size_t n, cudaStream_t s);

void nccl_surface_automatic(tutti::communicator<tutti::nccl>& comm, float* f, std::int32_t* x,
                            std::size_t n, cudaStream_t s) {
  every_form(comm, {f, x, n, static_cast<std::size_t>(comm.size())}, s);
}
void nccl_surface_native(tutti::communicator<tutti::nccl, tutti::native>& comm, float* f,
                         std::int32_t* x, std::size_t n, cudaStream_t s) {
  every_form(comm, {f, x, n, static_cast<std::size_t>(comm.size())}, s);
}
