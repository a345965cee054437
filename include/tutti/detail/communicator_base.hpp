#pragma once
/// \file
/// The machinery behind tutti::communicator: argument checks, sequence numbers, fingerprints,
/// dispatch to the algorithm policy, avg's final division, async execution in issue order.

#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "tutti/core/error.hpp"
#include "tutti/core/ops.hpp"
#include "tutti/core/options.hpp"
#include "tutti/core/reduce.hpp"
#include "tutti/core/types.hpp"
#include "tutti/detail/algo_table.hpp"
#include "tutti/detail/call.hpp"
#include "tutti/detail/communicator_args.hpp"
#include "tutti/detail/communicator_buffers.hpp"
#include "tutti/detail/communicator_p2p.hpp"
#include "tutti/detail/context.hpp"
#include "tutti/detail/policy_traits.hpp"
#include "tutti/detail/progress.hpp"
#include "tutti/work.hpp"

namespace tutti::inline v0::detail {

template <class Transport, class Algorithm>
class communicator_base {
  using ctx_t = context<Transport>;
  using bytes_in = const std::byte*;
  using bytes_out = std::byte*;

 protected:
  communicator_base(Transport t, const options& opts)
      : s_(std::make_unique<state>(std::move(t), opts)) {}

  [[nodiscard]] int rank() const noexcept { return s_->t.rank(); }
  [[nodiscard]] int size() const noexcept { return s_->t.size(); }
  [[nodiscard]] const options& opts() const noexcept { return s_->opts; }
  [[nodiscard]] Transport& transport() noexcept { return s_->t; }

  // Each typed entry point checks what depends on the element type at compile time, then hands
  // bytes and a call_spec to a byte-level member below. Only those members build the job that
  // runs the algorithm, so a program pays for one job per (collective, transport, policy), not
  // one per (collective, element type, op): the algorithms and their error paths are compiled
  // once however many types a program reduces.

  template <class T, class Op>
  work all_reduce_impl(input_span<T> in, std::span<T> out, Op, bool async, void* stream = nullptr) {
    check_reducible<Op, T>();
    static_assert(has_all_reduce<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement all_reduce on this transport "
                  "(see the policy table in README.md; tutti::automatic implements everything)");
    return reducing(with<T, Op>(collective::all_reduce, in.size(), -1).on(stream), bytes(in),
                    in.size(), bytes(out), out.size(), -1, async);
  }

  template <class T, class Op>
  work reduce_impl(input_span<T> in, std::span<T> out, Op, int root, bool async,
                   void* stream = nullptr) {
    check_reducible<Op, T>();
    static_assert(has_reduce<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement reduce on this transport");
    return reducing(with<T, Op>(collective::reduce, in.size(), root).on(stream), bytes(in),
                    in.size(), bytes(out), out.size(), root, async);
  }

  template <class T, class Op>
  work reduce_scatter_impl(input_span<T> in, std::span<T> out, Op, bool async,
                           void* stream = nullptr) {
    check_reducible<Op, T>();
    static_assert(has_reduce_scatter<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement reduce_scatter on this "
                  "transport");
    return reducing(with<T, Op>(collective::reduce_scatter, out.size(), -1).on(stream), bytes(in),
                    in.size(), bytes(out), out.size(), -1, async);
  }

  template <class T>
  work broadcast_impl(std::span<T> buf, int root, bool async, void* stream = nullptr) {
    static_assert(has_broadcast<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement broadcast on this transport");
    return moving(plain<T>(collective::broadcast, buf.size(), root).on(stream), bytes(buf),
                  buf.size(), bytes(buf), buf.size(), root, async);
  }

  template <class T>
  work all_gather_impl(input_span<T> in, std::span<T> out, bool async, void* stream = nullptr) {
    static_assert(has_all_gather<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement all_gather on this transport");
    return moving(plain<T>(collective::all_gather, in.size(), -1).on(stream), bytes(in), in.size(),
                  bytes(out), out.size(), -1, async);
  }
  template <class T>
  work all_gather_in_place(std::span<T> buf, bool async, void* stream = nullptr) {
    const std::size_t n = args(collective::all_gather).block(buf.size());
    return all_gather_impl<T>(buf.subspan(static_cast<std::size_t>(rank()) * n, n), buf, async,
                              stream);
  }
  /// In place: block rank() of `buf` receives the result (NCCL's in-place layout too).
  template <class T, class Op>
  work reduce_scatter_in_place(std::span<T> buf, Op op, bool async, void* stream = nullptr) {
    const std::size_t n = args(collective::reduce_scatter).block(buf.size());
    return reduce_scatter_impl<T>(buf, buf.subspan(static_cast<std::size_t>(rank()) * n, n), op,
                                  async, stream);
  }

  template <class T>
  work gather_impl(input_span<T> in, std::span<T> out, int root, bool async,
                   void* stream = nullptr) {
    static_assert(has_gather<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement gather on this transport");
    return moving(plain<T>(collective::gather, in.size(), root).on(stream), bytes(in), in.size(),
                  bytes(out), out.size(), root, async);
  }

  template <class T>
  work scatter_impl(input_span<T> in, std::span<T> out, int root, bool async,
                    void* stream = nullptr) {
    static_assert(has_scatter<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement scatter on this transport");
    return moving(plain<T>(collective::scatter, out.size(), root).on(stream), bytes(in), in.size(),
                  bytes(out), out.size(), root, async);
  }

  template <class T>
  work all_to_all_impl(input_span<T> in, std::span<T> out, bool async, void* stream = nullptr) {
    static_assert(has_all_to_all<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement all_to_all on this transport");
    return moving(plain<T>(collective::all_to_all, in.size() / static_cast<std::size_t>(size()), -1)
                      .on(stream),
                  bytes(in), in.size(), bytes(out), out.size(), -1, async);
  }

  template <collective Kind, class T>
  work vector_impl(input_span<T> in, std::span<T> out, std::span<const std::size_t> counts,
                   int root, bool async, void* stream = nullptr) {
    static_assert(Kind != collective::all_gatherv || has_all_gatherv<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement all_gatherv");
    static_assert(Kind != collective::gatherv || has_gatherv<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement gatherv");
    static_assert(Kind != collective::scatterv || has_scatterv<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement scatterv");
    return vector_bytes(plain<T>(Kind, 0, root).on(stream), bytes(in), in.size(), bytes(out),
                        out.size(), counts, async);
  }

  template <class T>
  work all_to_allv_impl(input_span<T> in, std::span<const std::size_t> sc, std::span<T> out,
                        std::span<const std::size_t> rc, bool async, void* stream = nullptr) {
    static_assert(has_all_to_allv<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement all_to_allv on this transport");
    return all_to_allv_bytes(plain<T>(collective::all_to_allv, 0, -1).on(stream), bytes(in),
                             in.size(), sc, bytes(out), out.size(), rc, async);
  }

  work barrier_impl(bool async, void* stream = nullptr) {
    static_assert(has_barrier<Algorithm, Transport>,
                  "tutti: this algorithm policy does not implement barrier on this transport");
    return run(plain<std::uint8_t>(collective::barrier, 0, -1).on(stream), async, [](ctx_t& c) {
      if constexpr (has_barrier<Algorithm, Transport>) Algorithm::barrier(c);
    });
  }

  /// The call of one point-to-point message, after the checks that refuse it before anything
  /// moves. Point-to-point calls carry the last collective's number and are matched by tag.
  [[nodiscard]] call p2p_call(const p2p_msg& m, void* stream) const {
    const state& s = *s_;
    call c;
    c.fp = fingerprint{m.is_send ? collective::send : collective::recv, m.type, op_kind::none, -1,
                       m.out.size() + m.in.size()};
    c.seq = s.seq;
    c.stream = stream;
    if (!s.broken.empty())
      throw error(errc::aborted, c.name_str(), c.seq, rank(), s.broken_peer, s.broken);
    if (m.peer < 0 || m.peer >= size() || m.peer == rank())
      throw error(errc::invalid_argument, c.name_str(), c.seq, rank(), m.peer,
                  "peer must be another rank in [0, " + std::to_string(size()) + ")");
    return c;
  }

  /// A blocking send or receive (after queued async collectives). Its errors are its own: they
  /// do not break the communicator (the transport aborts the world where they leave it unusable).
  void p2p_impl(const p2p_msg& m, void* stream = nullptr) {
    state& s = *s_;
    s.queue.drain();
    const call c = p2p_call(m, stream);
    const auto deadline = clock::now() + s.opts.timeout;
    auto req = m.is_send ? s.t.isend(m.peer, m.out, c, space::p2p, m.tag)
                         : s.t.irecv(m.peer, m.in, c, space::p2p, m.tag);
    s.t.wait(req, c, deadline);
  }

  /// Posts every message of `msgs` now, on this thread (after queued async collectives), and
  /// returns one handle for all of them. Nothing waits before every message is posted, so no
  /// order of posting on the ranks can deadlock. On host memory the messages move whenever
  /// this rank waits (for them or for any other call of this communicator) or polls done()
  /// (detail/communicator_p2p.hpp); on a device transport they are issued in one NCCL group.
  work p2p_async(std::span<const p2p_msg> msgs, void* stream = nullptr) {
    state& s = *s_;
    s.queue.drain();
    if (msgs.empty()) return {};
    const auto deadline = clock::now() + s.opts.timeout;
    const auto call_of = [&](const p2p_msg& m) { return p2p_call(m, stream); };
    if constexpr (device_transport<Transport>) {
      std::vector<call> calls;  // every message checked before any is queued
      for (const p2p_msg& m : msgs) calls.push_back(call_of(m));
      for (std::size_t i = 0; i < msgs.size(); ++i) {  // queued: issued together by flush
        const p2p_msg& m = msgs[i];
        (void)(m.is_send ? s.t.isend(m.peer, m.out, calls[i], space::p2p, m.tag)
                         : s.t.irecv(m.peer, m.in, calls[i], space::p2p, m.tag));
      }
      const call& c = calls.back();
      s.t.flush(c, deadline);
      auto ev = s.t.record(c);
      return work(s.queue.push([sp = &s, ev, c, deadline] { sp->t.complete(ev, c, deadline); }));
    } else {
      return s.p2p.post(msgs, call_of, deadline);
    }
  }

 private:
  struct state {
    state(Transport tr, const options& o)
        : t(std::move(tr)), opts(o), overrides(overrides_for<Algorithm>(o.algo)) {}
    state(const state&) = delete;
    state& operator=(const state&) = delete;
    Transport t;
    options opts;
    algo_table overrides;
    scratch_space scratch;
    std::uint64_t seq = 0;
    std::string broken;    // why the communicator can no longer be used; "" while healthy
    int broken_peer = -1;  // the peer the error that broke it named: later calls name it too
    p2p_pending<Transport> p2p{t, queue};  // isend/irecv/batch not yet done (host transports)
    progress_queue queue;  // last: destroyed (and joined) first, while the rest still lives
  };

  struct call_spec {
    fingerprint fp;
    reducer red;
    std::size_t elem;
    void* stream = nullptr;  // device transports: the cudaStream_t (null: the transport's own)

    [[nodiscard]] call_spec on(void* s) const noexcept {
      call_spec r = *this;
      r.stream = s;
      return r;
    }
  };

  template <class T, class Op>
  [[nodiscard]] static call_spec with(collective k, std::size_t n, int root) noexcept {
    constexpr op_kind kind = std::remove_cvref_t<Op>::kind;
    return {fingerprint{k, dtype_of<T>, kind, root, n}, make_reducer<kind, T>(), sizeof(T)};
  }
  template <class T>
  [[nodiscard]] static call_spec plain(collective k, std::uint64_t n, int root) noexcept {
    return {fingerprint{k, dtype_of<T>, op_kind::none, root, n},
            reducer{nullptr, nullptr, sizeof(T), op_kind::none}, sizeof(T)};
  }

  template <class T>
  static bytes_in bytes(std::span<const T> s) noexcept {
    return reinterpret_cast<bytes_in>(s.data());
  }
  template <class T>
  static bytes_out bytes(std::span<T> s) noexcept {
    return reinterpret_cast<bytes_out>(s.data());
  }
  /// The checks on the arguments of a call of `k`, the next this communicator numbers.
  [[nodiscard]] call_args args(collective k) const noexcept {
    return {k, s_->seq + 1, rank(), size()};
  }

  /// all_reduce, reduce and reduce_scatter on bytes: sizes are in elements of spec.elem.
  work reducing(const call_spec& spec, bytes_in i, std::size_t in_n, bytes_out o, std::size_t out_n,
                int root, bool async) {
    const collective k = spec.fp.coll;
    const call_bytes b = args(k).reducing(i, in_n, o, out_n, root);
    return run(spec, async, [k, b, root](ctx_t& c) {
      (void)root;  // unused where the policy has no reduce
      if (k == collective::all_reduce) {
        if constexpr (has_all_reduce<Algorithm, Transport>)
          Algorithm::all_reduce(c, b.in, b.out, b.n);
      } else if (k == collective::reduce) {
        if constexpr (has_reduce<Algorithm, Transport>)
          Algorithm::reduce(c, b.in, b.out, b.n, root);
      } else {
        if constexpr (has_reduce_scatter<Algorithm, Transport>)
          Algorithm::reduce_scatter(c, b.in, b.out, b.n);
      }
      c.finish(b.out, b.n);
    });
  }

  /// broadcast (i == o), all_gather, gather, scatter and all_to_all on bytes.
  work moving(const call_spec& spec, bytes_in i, std::size_t in_n, bytes_out o, std::size_t out_n,
              int root, bool async) {
    const collective k = spec.fp.coll;
    const call_bytes b = args(k).moving(i, in_n, o, out_n, root);
    return run(spec, async, [k, b, root](ctx_t& c) {
      (void)root;  // unused where the policy has none of broadcast, gather, scatter
      switch (k) {
        case collective::broadcast:
          if constexpr (has_broadcast<Algorithm, Transport>)
            Algorithm::broadcast(c, b.out, b.n, root);
          break;
        case collective::all_gather:
          if constexpr (has_all_gather<Algorithm, Transport>)
            Algorithm::all_gather(c, b.in, b.out, b.n);
          break;
        case collective::gather:
          if constexpr (has_gather<Algorithm, Transport>)
            Algorithm::gather(c, b.in, b.out, b.n, root);
          break;
        case collective::scatter:
          if constexpr (has_scatter<Algorithm, Transport>)
            Algorithm::scatter(c, b.in, b.out, b.n, root);
          break;
        default:
          if constexpr (has_all_to_all<Algorithm, Transport>)
            Algorithm::all_to_all(c, b.in, b.out, b.n);
          break;
      }
    });
  }

  /// all_gatherv, gatherv and scatterv on bytes.
  work vector_bytes(call_spec spec, bytes_in i, std::size_t in_n, bytes_out o, std::size_t out_n,
                    std::span<const std::size_t> counts, bool async) {
    const collective kind = spec.fp.coll;
    const int root = spec.fp.root;
    const call_bytes b = args(kind).vectored(i, in_n, o, out_n, counts, root);
    spec.fp.count = hash_counts(counts);
    return run(
        spec, async,
        [kind, b, cv = std::vector<std::size_t>(counts.begin(), counts.end()), root](ctx_t& c) {
          (void)root;  // unused where the policy has neither gatherv nor scatterv
          const std::span<const std::size_t> cs(cv);
          if (kind == collective::all_gatherv) {
            if constexpr (has_all_gatherv<Algorithm, Transport>)
              Algorithm::all_gatherv(c, b.in, b.out, cs);
          } else if (kind == collective::gatherv) {
            if constexpr (has_gatherv<Algorithm, Transport>)
              Algorithm::gatherv(c, b.in, b.out, cs, root);
          } else {
            if constexpr (has_scatterv<Algorithm, Transport>)
              Algorithm::scatterv(c, b.in, b.out, cs, root);
          }
        });
  }

  work all_to_allv_bytes(const call_spec& spec, bytes_in i, std::size_t in_n,
                         std::span<const std::size_t> sc, bytes_out o, std::size_t out_n,
                         std::span<const std::size_t> rc, bool async) {
    args(collective::all_to_allv).all_to_allv(in_n, sc, out_n, rc);
    return run(spec, async,
               [i, o, s = std::vector<std::size_t>(sc.begin(), sc.end()),
                r = std::vector<std::size_t>(rc.begin(), rc.end())](ctx_t& c) {
                 if constexpr (has_all_to_allv<Algorithm, Transport>)
                   Algorithm::all_to_allv(c, i, std::span<const std::size_t>(s), o,
                                          std::span<const std::size_t>(r));
               });
  }

  /// Numbers the call, then runs it now (after queued async calls) or queues it. On a device
  /// transport the call is enqueued on its stream now, in the caller's thread (stream order is
  /// issue order), and only the wait for its completion event is queued when async.
  template <class Body>
  work run(const call_spec& spec, bool async, Body body) {
    state* s = s_.get();
    call c;
    c.fp = spec.fp;
    c.seq = ++s->seq;
    c.red = spec.red;
    c.elem_size = spec.elem;
    c.stream = spec.stream;
    auto job = [s, c, body = std::move(body)]() mutable {
      if (!s->broken.empty())
        throw error(errc::aborted, c.name_str(), c.seq, s->t.rank(), s->broken_peer,
                    "communicator unusable after an earlier error: " + s->broken);
      guarded(*s, [&] {
        s->t.publish(c);
        ctx_t ctx(s->t, c, clock::now() + s->opts.timeout, s->scratch, s->overrides);
        body(ctx);
      });
    };
    if constexpr (device_transport<Transport>) {
      const auto deadline = clock::now() + s->opts.timeout;
      job();
      auto ev = guarded(*s, [&] { return s->t.record(c); });
      if (!async) {
        guarded(*s, [&] { s->t.complete(ev, c, deadline); });
        return {};
      }
      // The transport remembers a failure seen here for the caller's later calls.
      return work(s->queue.push([s, ev, c, deadline] { s->t.complete(ev, c, deadline); }));
    } else {
      if (async) return work(s->queue.push(std::move(job)));
      s->queue.drain();
      job();
      return {};
    }
  }

  /// Runs f; an error breaks the communicator: every later call raises with it.
  template <class F>
  static decltype(auto) guarded(state& s, F&& f) {
    try {
      return f();
    } catch (const error& e) {
      s.broken = e.what();
      s.broken_peer = e.peer();
      throw;
    } catch (const std::exception& e) {
      s.broken = e.what();
      throw;
    }
  }

  std::unique_ptr<state> s_;
};

}  // namespace tutti::inline v0::detail
