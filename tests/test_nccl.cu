// tutti::nccl on real GPUs: every collective, blocking and async, on the communicator's stream
// and on a user's, in place and out of place, checked element by element against exact values.
// One rank per GPU (NCCL cannot run two ranks on one GPU): the world size is the number of
// GPUs, 1 on a one-GPU machine, where every collective still runs through NCCL and must give
// the identity (avg divides by 1). Without a GPU: "SKIP: no CUDA device", exit 77 (ctest:
// skipped). Built by nvcc with <tutti/transport/nccl.cuh>, so tutti's own policies (ring, tree,
// recursive_halving) run too, with the device reduction kernels.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include <tutti/transport/nccl.cuh>
#include <tutti/tutti.hpp>

// The type and op mapping (tutti/detail/nccl/types.hpp), checked where no GPU is needed.
namespace map_check {
using tutti::dtype;
using tutti::op_kind;
using tutti::detail::nccl_op_of;
using tutti::detail::nccl_type_of;
static_assert(nccl_type_of(dtype::int8) == ncclInt8 && nccl_type_of(dtype::uint8) == ncclUint8);
static_assert(nccl_type_of(dtype::boolean) == ncclUint8);
static_assert(nccl_type_of(dtype::character) == (std::is_signed_v<char> ? ncclInt8 : ncclUint8));
static_assert(nccl_type_of(dtype::int32) == ncclInt32 && nccl_type_of(dtype::uint32) == ncclUint32);
static_assert(nccl_type_of(dtype::int64) == ncclInt64 && nccl_type_of(dtype::uint64) == ncclUint64);
static_assert(nccl_type_of(dtype::float16) == ncclFloat16);
static_assert(nccl_type_of(dtype::bfloat16) == ncclBfloat16);
static_assert(nccl_type_of(dtype::float32) == ncclFloat32);
static_assert(nccl_type_of(dtype::float64) == ncclFloat64);
static_assert(nccl_type_of(dtype::int16) == -1 && nccl_type_of(dtype::uint16) == -1);
static_assert(nccl_type_of(dtype::float128) == -1);
static_assert(nccl_op_of(op_kind::sum) == ncclSum && nccl_op_of(op_kind::prod) == ncclProd);
static_assert(nccl_op_of(op_kind::min) == ncclMin && nccl_op_of(op_kind::max) == ncclMax);
static_assert(nccl_op_of(op_kind::avg) == ncclAvg);
static_assert(nccl_op_of(op_kind::band) == -1 && nccl_op_of(op_kind::bor) == -1);
static_assert(nccl_op_of(op_kind::bxor) == -1 && nccl_op_of(op_kind::none) == -1);
}  // namespace map_check

namespace {

int g_rank = -1;
int g_checks = 0;
int g_failures = 0;

void expect(bool ok, const std::string& what, int line) {
  ++g_checks;
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "rank %d: test_nccl.cu:%d: FAILED: %s\n", g_rank, line, what.c_str());
}
#define EXPECT(cond) expect((cond), #cond, __LINE__)

void cuda_ok(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(r));
}

/// cudaMalloc'd memory for `n` elements of T (none for n == 0), freed on destruction.
template <class T>
class device_buffer {
 public:
  explicit device_buffer(std::size_t n) : n_(n) {
    if (n_ != 0) cuda_ok(cudaMalloc(&p_, n_ * sizeof(T)), "cudaMalloc");
  }
  explicit device_buffer(const std::vector<T>& host) : device_buffer(host.size()) { upload(host); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
  ~device_buffer() {
    if (p_ != nullptr) (void)cudaFree(p_);
  }

  [[nodiscard]] tutti::device_span<T> span() const noexcept { return {p_, n_}; }
  [[nodiscard]] tutti::device_span<const T> cspan() const noexcept { return {p_, n_}; }
  void upload(const std::vector<T>& host) {
    if (n_ != 0)
      cuda_ok(cudaMemcpy(p_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
  [[nodiscard]] std::vector<T> download() const {
    std::vector<T> host(n_);
    if (n_ != 0)
      cuda_ok(cudaMemcpy(host.data(), p_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

template <class T>
[[nodiscard]] std::vector<T> make(std::size_t n, auto value) {
  std::vector<T> v;
  v.reserve(n);
  for (std::size_t i = 0; i < n; ++i) v.push_back(static_cast<T>(static_cast<double>(value(i))));
  return v;
}

/// Every element of `got` equals want(i) (within `tol`, 0 for exact); reports the first miss.
template <class T>
void expect_values(const std::vector<T>& got, auto want, const std::string& what, int line,
                   double tol = 0.0) {
  ++g_checks;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = static_cast<double>(got[i]);
    const double w = static_cast<double>(want(i));
    if (std::fabs(g - w) > tol * std::max(1.0, std::fabs(w))) {
      ++g_failures;
      std::fprintf(stderr,
                   "rank %d: test_nccl.cu:%d: FAILED: %s: element %zu of %zu is %g, not %g\n",
                   g_rank, line, what.c_str(), i, got.size(), g, w);
      return;
    }
  }
}

/// `fn` raises tutti::error of kind `kind`.
void expect_error(tutti::errc kind, auto fn, const std::string& what, int line) {
  try {
    fn();
  } catch (const tutti::error& e) {
    expect(e.kind() == kind, what + ": raised the wrong kind: " + e.what(), line);
    return;
  }
  expect(false, what + ": did not raise", line);
}

/// The relative error NCCL's avg may make on floating types at a world size that is not a
/// power of two (it scales every input by 1/W, rounded, before summing); exact otherwise.
template <class T>
[[nodiscard]] double avg_tolerance(int world) {
  if (std::is_integral_v<T> || (world & (world - 1)) == 0) return 0.0;
  const double eps = std::is_same_v<T, float>         ? 0x1p-23
                     : std::is_same_v<T, tutti::half> ? 0x1p-10
                                                      : 0x1p-7;  // bfloat16
  return 2.0 * world * eps;
}

using native_comm = tutti::communicator<tutti::nccl, tutti::native>;

/// all_reduce and reduce of T: sum, avg, max, min, in place and out of place. Inputs are
/// small integers (i % 16 + rank + 1), so every sum is exact in every type, 16-bit ones too.
template <class T>
void reductions(native_comm& comm, const char* type) {
  const int r = comm.rank(), w = comm.size();
  const std::string t = type;
  const auto input = [r](std::size_t i) { return static_cast<double>(i % 16) + r + 1; };
  const auto sum = [w](std::size_t i) { return w * static_cast<double>(i % 16) + w * (w + 1) / 2; };
  for (const std::size_t n : {std::size_t{1}, std::size_t{1000}}) {
    const std::string at = t + " n=" + std::to_string(n);
    device_buffer<T> buf(make<T>(n, input));
    comm.all_reduce(buf.span(), tutti::sum);
    expect_values(buf.download(), sum, "all_reduce sum " + at, __LINE__);

    buf.upload(make<T>(n, input));
    comm.all_reduce(buf.span(), tutti::max);
    expect_values(
        buf.download(), [w](std::size_t i) { return static_cast<double>(i % 16) + w; },
        "all_reduce max " + at, __LINE__);

    buf.upload(make<T>(n, input));
    comm.all_reduce(buf.span(), tutti::min);
    expect_values(
        buf.download(), [](std::size_t i) { return static_cast<double>(i % 16) + 1; },
        "all_reduce min " + at, __LINE__);

    buf.upload(make<T>(n, input));
    comm.all_reduce(buf.span(), tutti::avg);
    if constexpr (std::is_integral_v<T>) {  // NCCL: the sum, divided in integers
      expect_values(
          buf.download(), [&](std::size_t i) { return std::floor(sum(i) / w); },
          "all_reduce avg " + at, __LINE__);
    } else {
      expect_values(
          buf.download(),
          [w](std::size_t i) { return static_cast<double>(i % 16) + (w + 1) / 2.0; },
          "all_reduce avg " + at, __LINE__, avg_tolerance<T>(w));
    }

    // Out of place: the input stays as it was.
    const device_buffer<T> in(make<T>(n, input));
    device_buffer<T> out(n);
    comm.all_reduce(in.cspan(), out.span(), tutti::sum);
    expect_values(out.download(), sum, "all_reduce out of place " + at, __LINE__);
    expect_values(in.download(), input, "all_reduce out of place leaves the input " + at, __LINE__);

    // reduce to the last rank, out of place and in place.
    const int root = w - 1;
    device_buffer<T> red(n);
    comm.reduce(in.cspan(), red.span(), tutti::sum, root);
    if (r == root) expect_values(red.download(), sum, "reduce " + at, __LINE__);
    buf.upload(make<T>(n, input));
    comm.reduce(buf.span(), tutti::max, 0);
    if (r == 0)
      expect_values(
          buf.download(), [w](std::size_t i) { return static_cast<double>(i % 16) + w; },
          "reduce in place " + at, __LINE__);
  }

  // reduce_scatter: rank q's block of the sum. in_p[j] = j % 16 + p.
  const std::size_t c = 5;
  const std::size_t total = c * static_cast<std::size_t>(w);
  const device_buffer<T> in(make<T>(total, [r](std::size_t j) { return j % 16 + r; }));
  device_buffer<T> out(c);
  comm.reduce_scatter(in.cspan(), out.span(), tutti::sum);
  expect_values(
      out.download(),
      [&](std::size_t i) {
        return w * static_cast<double>((static_cast<std::size_t>(r) * c + i) % 16) +
               w * (w - 1) / 2;
      },
      "reduce_scatter sum " + t, __LINE__);
}

/// The collectives that move data without reducing, on int32 (bytes to NCCL: the type does not
/// matter), with `c` elements per rank.
void movements(native_comm& comm, std::size_t c) {
  using T = std::int32_t;
  const int r = comm.rank(), w = comm.size();
  const auto ws = static_cast<std::size_t>(w), rs = static_cast<std::size_t>(r);
  const std::string at = " c=" + std::to_string(c);

  for (const int root : {0, w - 1}) {
    device_buffer<T> buf(make<T>(c, [&](std::size_t i) { return r == root ? 2 * i + 7 : -1.0; }));
    comm.broadcast(buf.span(), root);
    expect_values(
        buf.download(), [](std::size_t i) { return 2.0 * i + 7; },
        "broadcast from " + std::to_string(root) + at, __LINE__);
  }

  // Rank p's element i is p * 1000 + i.
  const auto own = [](std::size_t p, std::size_t i) { return static_cast<double>(p * 1000 + i); };
  const device_buffer<T> mine(make<T>(c, [&](std::size_t i) { return own(rs, i); }));
  const auto gathered = [&](std::size_t j) { return own(j / c, j % c); };

  device_buffer<T> all(c * ws);
  comm.all_gather(mine.cspan(), all.span());
  expect_values(all.download(), gathered, "all_gather" + at, __LINE__);

  // In place: this rank's block of the buffer already holds its contribution.
  device_buffer<T> in_place(
      make<T>(c * ws, [&](std::size_t j) { return j / c == rs ? own(rs, j % c) : -1.0; }));
  comm.all_gather(in_place.span());
  expect_values(in_place.download(), gathered, "all_gather in place" + at, __LINE__);

  const int root = w - 1;
  device_buffer<T> at_root(c * ws);
  comm.gather(mine.cspan(), at_root.span(), root);
  if (r == root) expect_values(at_root.download(), gathered, "gather" + at, __LINE__);

  // scatter: the root's element j is 3j; rank p gets elements p*c .. p*c + c - 1.
  const device_buffer<T> to_scatter(
      make<T>(c * ws, [&](std::size_t j) { return r == 0 ? 3.0 * j : -1.0; }));
  device_buffer<T> piece(c);
  comm.scatter(to_scatter.cspan(), piece.span(), 0);
  expect_values(
      piece.download(), [&](std::size_t i) { return 3.0 * static_cast<double>(rs * c + i); },
      "scatter" + at, __LINE__);

  // all_to_all: block q of rank p's input, (p, q, i) encoded, lands as block p on rank q.
  const auto code = [](std::size_t p, std::size_t q, std::size_t i) {
    return static_cast<double>(p * 10000 + q * 100 + i);
  };
  const device_buffer<T> send(
      make<T>(c * ws, [&](std::size_t j) { return code(rs, j / c, j % c); }));
  device_buffer<T> recv(c * ws);
  comm.all_to_all(send.cspan(), recv.span());
  expect_values(
      recv.download(), [&](std::size_t j) { return code(j / c, rs, j % c); }, "all_to_all" + at,
      __LINE__);
  // The same with one buffer as input and output: NCCL has no in-place all-to-all, so tutti
  // stages the input.
  device_buffer<T> both(make<T>(c * ws, [&](std::size_t j) { return code(rs, j / c, j % c); }));
  comm.all_to_all(both.cspan(), both.span());
  expect_values(
      both.download(), [&](std::size_t j) { return code(j / c, rs, j % c); },
      "all_to_all, input and output one buffer" + at, __LINE__);
}

/// Async calls and blocking calls on a user's stream.
void streams(native_comm& comm) {
  const int w = comm.size();
  cudaStream_t s = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  const std::size_t n = 4096;
  std::vector<float> ones(n, 1.0f);
  device_buffer<float> buf(n);

  // Stream order: the upload on `s` precedes the collective enqueued on `s`.
  cuda_ok(
      cudaMemcpyAsync(buf.span().data(), ones.data(), n * sizeof(float), cudaMemcpyHostToDevice, s),
      "cudaMemcpyAsync");
  tutti::work one = comm.all_reduce_async(buf.span(), tutti::sum, s);
  one.wait();
  EXPECT(one.done());
  expect_values(
      buf.download(), [w](std::size_t) { return static_cast<double>(w); },
      "all_reduce_async on a user stream", __LINE__);

  // Three in flight on one stream, waited in order: W, W^2, W^3.
  buf.upload(ones);
  std::vector<tutti::work> pending;
  for (int k = 0; k < 3; ++k) pending.push_back(comm.all_reduce_async(buf.span(), tutti::sum, s));
  for (auto& wk : pending) wk.wait();
  expect_values(
      buf.download(), [w](std::size_t) { return static_cast<double>(w) * w * w; },
      "three all_reduce_async in a row", __LINE__);

  // Async on the communicator's own stream; out of place.
  buf.upload(ones);
  device_buffer<float> out(n);
  tutti::work own = comm.all_reduce_async(buf.cspan(), out.span(), tutti::avg);
  own.wait();
  expect_values(
      out.download(), [](std::size_t) { return 1.0; }, "all_reduce_async avg out of place",
      __LINE__);

  // Blocking on a user stream: returns once the work on `s` is done.
  buf.upload(ones);
  comm.all_reduce(buf.span(), tutti::sum, s);
  std::vector<float> host(n);
  cuda_ok(
      cudaMemcpyAsync(host.data(), buf.span().data(), n * sizeof(float), cudaMemcpyDeviceToHost, s),
      "cudaMemcpyAsync");
  cuda_ok(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  expect_values(
      host, [w](std::size_t) { return static_cast<double>(w); },
      "blocking all_reduce on a user stream", __LINE__);

  // Other async collectives.
  device_buffer<float> b(make<float>(
      n, [&](std::size_t i) { return comm.rank() == 0 ? static_cast<double>(i) : -1.0; }));
  comm.broadcast_async(b.span(), 0, s).wait();
  expect_values(
      b.download(), [](std::size_t i) { return static_cast<double>(i); }, "broadcast_async",
      __LINE__);
  device_buffer<float> g(n * static_cast<std::size_t>(w));
  comm.all_gather_async(b.cspan(), g.span(), s).wait();
  expect_values(
      g.download(), [n](std::size_t j) { return static_cast<double>(j % n); }, "all_gather_async",
      __LINE__);

  comm.barrier(s);
  cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy");
}

/// Zero counts are no-ops; a root outside the world raises errc::invalid_argument before
/// anything runs.
void edges(native_comm& comm) {
  const int w = comm.size();
  device_buffer<float> none(0);
  comm.all_reduce(none.span(), tutti::sum);
  comm.all_reduce(tutti::device_span<float>(nullptr, 0), tutti::avg);
  comm.broadcast(none.span(), 0);
  comm.all_gather(none.cspan(), none.span());
  comm.reduce_scatter(none.cspan(), none.span(), tutti::sum);
  comm.all_to_all(none.cspan(), none.span());
  comm.all_reduce_async(none.span(), tutti::sum).wait();
  EXPECT(true);  // reached: no zero-count call raised

  device_buffer<float> buf(4);
  for (const int bad : {w, -1}) {
    const std::string at = "root " + std::to_string(bad);
    expect_error(
        tutti::errc::invalid_argument, [&] { comm.broadcast(buf.span(), bad); }, "broadcast " + at,
        __LINE__);
    expect_error(
        tutti::errc::invalid_argument, [&] { comm.reduce(buf.span(), tutti::sum, bad); },
        "reduce " + at, __LINE__);
  }
}

/// tutti's own policies over NCCL's send/recv, reducing with nccl.cuh's kernels.
template <class Policy>
void own_policy(const char* name) {
  auto comm = tutti::communicator<tutti::nccl, Policy>::from_env();
  const int r = comm.rank(), w = comm.size();
  for (const std::size_t n : {std::size_t{1}, std::size_t{7}, std::size_t{100000}}) {
    const std::string at = std::string(name) + " n=" + std::to_string(n);
    device_buffer<float> buf(
        make<float>(n, [r](std::size_t i) { return static_cast<double>(i % 16) + r + 1; }));
    comm.all_reduce(buf.span(), tutti::sum);
    expect_values(
        buf.download(),
        [w](std::size_t i) { return w * static_cast<double>(i % 16) + w * (w + 1) / 2; },
        "all_reduce sum " + at, __LINE__);
    buf.upload(make<float>(n, [r](std::size_t i) { return static_cast<double>(i % 16) + r + 1; }));
    comm.all_reduce(buf.span(), tutti::avg);
    expect_values(
        buf.download(), [w](std::size_t i) { return static_cast<double>(i % 16) + (w + 1) / 2.0; },
        "all_reduce avg " + at, __LINE__, avg_tolerance<float>(w));
  }
  // A barrier of zero-byte messages (they travel as one byte each) returns, blocking and async.
  comm.barrier();
  comm.barrier_async().wait();
  // Two calls in flight on two streams share the communicator's scratch: the second waits for
  // the first on the GPU. Values as above, with a kernel-free upload on each stream.
  const std::size_t n = 1 << 20;
  const auto start = [r](std::size_t i) { return static_cast<double>(i % 16) + r + 1; };
  device_buffer<float> a(make<float>(n, start)), b(make<float>(n, start));
  cudaStream_t s = nullptr;
  cuda_ok(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  tutti::work first = comm.all_reduce_async(a.span(), tutti::sum);
  tutti::work second = comm.all_reduce_async(b.span(), tutti::sum, s);
  first.wait();
  second.wait();
  cuda_ok(cudaStreamDestroy(s), "cudaStreamDestroy");
  const auto summed = [w](std::size_t i) {
    return w * static_cast<double>(i % 16) + w * (w + 1) / 2;
  };
  expect_values(a.download(), summed, std::string(name) + " all_reduce_async, own stream",
                __LINE__);
  expect_values(b.download(), summed, std::string(name) + " all_reduce_async, second stream",
                __LINE__);
}

/// Sub-communicators through ncclCommSplit: parity halves ranked in reverse, the last rank left
/// out of a second split, a group of rank 0 alone; an all_reduce on each names its members.
void splits(native_comm& comm) {
  const int r = comm.rank(), w = comm.size();
  auto half = comm.split(r % 2, -r);
  EXPECT(half.has_value());
  std::vector<int> members;
  for (int q = w - 1; q >= 0; --q)
    if (q % 2 == r % 2) members.push_back(q);
  EXPECT(half->size() == static_cast<int>(members.size()));
  EXPECT(members[static_cast<std::size_t>(half->rank())] == r);
  device_buffer<std::int32_t> buf(make<std::int32_t>(3, [r](std::size_t i) { return r * 10 + i; }));
  half->all_reduce(buf.span(), tutti::sum);
  std::int64_t base = 0;
  for (int q : members) base += q * 10;
  const auto count = static_cast<double>(members.size());
  expect_values(
      buf.download(), [&](std::size_t i) { return static_cast<double>(base) + count * i; },
      "split all_reduce", __LINE__);
  auto most = comm.split(r == w - 1 && w > 1 ? tutti::no_color : 0, r);
  EXPECT(most.has_value() == !(r == w - 1 && w > 1));
  if (most) EXPECT(most->size() == (w > 1 ? w - 1 : 1));
  const std::vector<int> zero{0};
  auto solo = comm.group(zero);
  EXPECT(solo.has_value() == (r == 0));
  if (solo) solo->barrier();
}

/// tutti::bucketer over tutti::nccl: buckets in GPU memory. Gradients of three types in small
/// buckets, one of them owned by the bucketer, one never marked (left as it was); a no_sync
/// window; an all_reduce_hook that sums instead of averaging.
void buckets(native_comm& comm) {
  const int r = comm.rank(), w = comm.size();
  tutti::bucketer b(comm, {.first_bucket_bytes = 64, .bucket_bytes = 128});
  device_buffer<float> g0(make<float>(40, [r](std::size_t i) { return r + 1.0 + i; }));
  device_buffer<std::int32_t> g2(make<std::int32_t>(5, [](std::size_t) { return 77; }));
  device_buffer<double> g3(make<double>(7, [r](std::size_t i) { return r * 0.5 + i; }));
  EXPECT(b.add(g0.span()) == 0);
  EXPECT(b.template add<float>(10) == 1);
  EXPECT(b.add(g2.span()) == 2);
  EXPECT(b.add(g3.span()) == 3);
  const auto own = make<float>(10, [r](std::size_t i) { return 2.0 * r + i; });
  cuda_ok(cudaMemcpy(b.template gradient<float>(1).data(), own.data(), 10 * sizeof(float),
                     cudaMemcpyHostToDevice),
          "upload owned gradient");
  for (std::size_t i : {3, 1, 0}) b.mark_ready(i);
  b.finish();
  const double mean_r = (w - 1) / 2.0;
  expect_values(
      g0.download(), [&](std::size_t i) { return mean_r + 1 + i; }, "bucket float", __LINE__);
  std::vector<float> owned(10);
  cuda_ok(cudaMemcpy(owned.data(), b.template gradient<float>(1).data(), 10 * sizeof(float),
                     cudaMemcpyDeviceToHost),
          "download owned gradient");
  expect_values(
      owned, [&](std::size_t i) { return 2 * mean_r + i; }, "bucket owned", __LINE__);
  expect_values(
      g2.download(), [](std::size_t) { return 77.0; }, "bucket unused", __LINE__);
  expect_values(
      g3.download(), [&](std::size_t i) { return 0.5 * mean_r + i; }, "bucket double", __LINE__);
  EXPECT(!b.used(2) && b.used(0));
  {
    auto quiet = b.no_sync();  // no communication: nothing changes
    b.mark_ready(0);
    b.finish();
  }
  expect_values(
      g0.download(), [&](std::size_t i) { return mean_r + 1 + i; }, "after no_sync", __LINE__);

  tutti::bucketer sum(comm, {.all_reduce_hook = [&comm](const tutti::bucket_view& v) {
                        return comm.all_reduce_async(v.on_device<float>(), tutti::sum);
                      }});
  device_buffer<float> h(make<float>(6, [r](std::size_t i) { return r + i; }));
  sum.add(h.span());
  sum.mark_ready(0);
  sum.finish();
  expect_values(
      h.download(), [&](std::size_t i) { return w * mean_r + w * static_cast<double>(i); },
      "bucket hook", __LINE__);
  bool refused = false;
  try {
    tutti::bucketer<native_comm> bad(comm, {.compress = tutti::compression::fp16});
  } catch (const tutti::error& e) {
    refused = e.code() == tutti::errc::invalid_argument;
  }
  EXPECT(refused);
}

/// isend/irecv and batch() on device memory. One GPU: the argument checks (no peer to send
/// to). Several: a ring as one batch per rank, and pairs exchanging through separate isend and
/// irecv ordered so that no two ranks both send first (NCCL issues each at once).
void point_to_point(native_comm& comm) {
  using T = std::int32_t;
  const int r = comm.rank(), w = comm.size();
  const std::size_t c = 4099;
  const auto code = [](int from, int to, std::size_t i) {
    return static_cast<double>(from * 100000 + to * 1000) + static_cast<double>(i % 997);
  };
  device_buffer<T> out(c), in(c);
  expect_error(
      tutti::errc::invalid_argument, [&] { (void)comm.isend(out.cspan(), r); }, "isend to self",
      __LINE__);
  expect_error(
      tutti::errc::invalid_argument, [&] { (void)comm.irecv(in.span(), w); },
      "irecv from a rank past the world", __LINE__);
  if (w < 2) return;
  const int right = (r + 1) % w, left = (r + w - 1) % w;
  out.upload(make<T>(c, [&](std::size_t i) { return code(r, right, i); }));
  comm.batch().recv(in.span(), left).send(out.cspan(), right).run();
  expect_values(
      in.download(), [&](std::size_t i) { return code(left, r, i); }, "batch ring", __LINE__);

  // Ranks 2k and 2k+1 exchange; an odd rank out sits this one out.
  const int partner = r % 2 == 0 ? r + 1 : r - 1;
  if (partner >= w) return;
  out.upload(make<T>(c, [&](std::size_t i) { return code(r, partner, i); }));
  tutti::work first, second;
  if (r % 2 == 0) {
    first = comm.isend(out.cspan(), partner);
    second = comm.irecv(in.span(), partner);
  } else {
    first = comm.irecv(in.span(), partner);
    second = comm.isend(out.cspan(), partner);
  }
  second.wait();
  first.wait();
  expect_values(
      in.download(), [&](std::size_t i) { return code(partner, r, i); }, "isend/irecv pair",
      __LINE__);
}

int rank_main(int gpus) {
  auto comm = native_comm::from_env();
  g_rank = comm.rank();
  const int w = comm.size();
  EXPECT(w == gpus);
  int devices = 0;
  cuda_ok(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
  EXPECT(comm.transport().device() == comm.rank() % devices);
  EXPECT(comm.transport().handle() != nullptr);
  EXPECT(comm.transport().stream() != nullptr);

  reductions<float>(comm, "float");
  reductions<tutti::half>(comm, "half");
  reductions<tutti::bfloat16>(comm, "bfloat16");
  reductions<std::int32_t>(comm, "int32");
  for (const std::size_t c : {std::size_t{1}, std::size_t{3}, std::size_t{4097}})
    movements(comm, c);
  streams(comm);
  comm.barrier();

  // tutti::automatic (the default policy) is NCCL's own collectives on tutti::nccl.
  {
    auto automatic = tutti::communicator<tutti::nccl>::from_env();
    device_buffer<std::int32_t> buf(
        make<std::int32_t>(10, [&](std::size_t i) { return i + g_rank; }));
    automatic.all_reduce(buf.span(), tutti::sum);
    expect_values(
        buf.download(), [w](std::size_t i) { return w * static_cast<double>(i) + w * (w - 1) / 2; },
        "automatic all_reduce", __LINE__);
  }
  own_policy<tutti::ring>("ring");
  own_policy<tutti::tree>("tree");
  own_policy<tutti::recursive_halving>("recursive_halving");

  splits(comm);
  point_to_point(comm);
  buckets(comm);
  edges(comm);  // last: what a communicator does after an error is not this test's business

  std::printf("rank %d of %d (GPU %d): %d checks, %d failed\n", g_rank, w,
              comm.transport().device(), g_checks, g_failures);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int main() {
  // Count GPUs without touching CUDA: the ranks fork from this process.
  const int gpus = tutti::nccl::local_gpus();
  if (gpus == 0) {
    std::printf("SKIP: no CUDA device\n");
    return 77;
  }
  return tutti::spawn(gpus, [gpus] { return rank_main(gpus); });
}
