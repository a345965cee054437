#pragma once
/// \file
/// tutti_torch::backend: a c10d::Backend (what `dist.init_process_group("tutti")` creates for
/// CPU tensors) running every operation over a tutti communicator: tutti::shm when every rank
/// of the group is on one host, tutti::gloo otherwise (TUTTI_TORCH_TRANSPORT=shm|gloo forces
/// one). Collectives run in call order on one thread per group; point-to-point messages run on
/// a thread per peer and direction, each over its own two-rank world, so sends never wait
/// behind receives (a pair exchanging with isend/irecv in any order cannot deadlock).
///
/// In a group of 3 or more ranks each message is announced by an envelope (its tag, 8 bytes,
/// sent just before it on the same world) so that a receive from any rank (recvAnysource) can
/// learn which peer has a message with its tag before taking it. Receives match as MPI's do:
/// a message goes to the earliest-posted receive that matches it (same tag; same source, or
/// any), and messages from one rank with one tag arrive in the order sent.

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <tutti/communicator.hpp>
#include <tutti/transport/cluster.hpp>
#include <tutti/transport/gloo.hpp>
#include <tutti/transport/shm.hpp>

#include "dispatch.hpp"
#include "runner.hpp"

namespace tutti_torch {

using shm_comm = tutti::communicator<tutti::shm>;
using gloo_comm = tutti::communicator<tutti::gloo>;
using cluster_comm = tutti::communicator<tutti::cluster>;
using any_comm = std::variant<shm_comm, gloo_comm, cluster_comm>;

/// Calls f(comm, type_tag<T>{}) with the communicator `c` holds and the element type of `type`.
template <class F>
void visit_typed(any_comm& c, at::ScalarType type, F&& f) {
  std::visit(
      [&](auto& comm) { with_type(type, [&]<class T>(type_tag<T>) { f(comm, type_tag<T>{}); }); },
      c);
}

/// Which transport a group runs over (TUTTI_TORCH_TRANSPORT), or how it is chosen (automatic).
enum class transport_choice { automatic, shm, gloo, cluster };

class backend final : public c10d::Backend {
 public:
  backend(const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
          std::chrono::milliseconds timeout);
  ~backend() override;

  const std::string getBackendName() const override { return "tutti"; }
  /// "shm", "gloo" or "cluster": what this group's collectives run over.
  [[nodiscard]] std::string transport_name() const;

  c10::intrusive_ptr<c10d::Work> broadcast(std::vector<at::Tensor>& tensors,
                                           const c10d::BroadcastOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce(std::vector<at::Tensor>& tensors,
                                           const c10d::AllreduceOptions& opts) override;
  /// Sums sparse COO tensors (ReduceOp.SUM only, as gloo): each rank's indices and values
  /// gathered, then coalesced; the tensor ends coalesced (sparse.cpp).
  c10::intrusive_ptr<c10d::Work> allreduce_sparse(std::vector<at::Tensor>& tensors,
                                                  const c10d::AllreduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allreduce_coalesced(
      std::vector<at::Tensor>& tensors, const c10d::AllreduceCoalescedOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce(std::vector<at::Tensor>& tensors,
                                        const c10d::ReduceOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather(std::vector<std::vector<at::Tensor>>& outputs,
                                           std::vector<at::Tensor>& inputs,
                                           const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _allgather_base(at::Tensor& output, at::Tensor& input,
                                                 const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_coalesced(std::vector<std::vector<at::Tensor>>& outputs,
                                                     std::vector<at::Tensor>& inputs,
                                                     const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> allgather_into_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::AllgatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> gather(std::vector<std::vector<at::Tensor>>& outputs,
                                        std::vector<at::Tensor>& inputs,
                                        const c10d::GatherOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> scatter(std::vector<at::Tensor>& outputs,
                                         std::vector<std::vector<at::Tensor>>& inputs,
                                         const c10d::ScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter(std::vector<at::Tensor>& outputs,
                                                std::vector<std::vector<at::Tensor>>& inputs,
                                                const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> _reduce_scatter_base(
      at::Tensor& output, at::Tensor& input, const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> reduce_scatter_tensor_coalesced(
      std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
      const c10d::ReduceScatterOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall_base(at::Tensor& output, at::Tensor& input,
                                               std::vector<int64_t>& output_splits,
                                               std::vector<int64_t>& input_splits,
                                               const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> alltoall(std::vector<at::Tensor>& outputs,
                                          std::vector<at::Tensor>& inputs,
                                          const c10d::AllToAllOptions& opts) override;
  c10::intrusive_ptr<c10d::Work> barrier(const c10d::BarrierOptions& opts) override;
  /// Rank 0 waits (opts.timeout; zero is a timeout too) for every other rank to arrive and
  /// raises naming the ranks that did not, in gloo's words; the others wait for rank 0's
  /// verdict and raise with gloo's words and it. It meets through the group's store, not the
  /// transport, so a rank stuck in a collective or a broken group cannot hold it up.
  void monitoredBarrier(const c10d::BarrierOptions& opts, bool waitAllRanks) override;
  c10::intrusive_ptr<c10d::Work> send(std::vector<at::Tensor>& tensors, int dst, int tag) override;
  c10::intrusive_ptr<c10d::Work> recv(std::vector<at::Tensor>& tensors, int src, int tag) override;
  c10::intrusive_ptr<c10d::Work> recvAnysource(std::vector<at::Tensor>& tensors, int tag) override;
  uint64_t getSequenceNumberForGroup() override { return seq_; }

  /// Finishes the calls already posted and stops the group's threads; later calls raise.
  /// destroy_process_group calls it, and so does tutti_torch at interpreter exit for every group
  /// still alive (shutdown_all). Call without the GIL.
  void shutdown() override;
  static void shutdown_all();

 private:
  /// A receive (from one rank, or from any) until its message is in place.
  struct p2p_recv {
    uint64_t tag = 0;
    uint64_t order = 0;  // posting order among the group's receives
    at::Tensor t, d;     // the caller's tensor and the dense one the message lands in
    c10::intrusive_ptr<work> w;
    std::chrono::steady_clock::time_point deadline;
    bool claimed = false;  // a message was assigned to it (under any_mu_)
  };

  /// Messages one way between this rank and one peer: their own thread and two-rank world
  /// (sender rank 0, receiver rank 1), joined on the thread when the first message is posted.
  struct lane {
    int peer = -1;
    std::unique_ptr<any_comm> comm;
    // Receiving lanes with envelopes; the thread's own:
    std::array<int64_t, 1> envelope{};  // where the next envelope lands
    tutti::work envelope_wait;          // its receive, when posted
    bool envelope_posted = false;
    std::string broken;            // why a message timed out half-way: the lane cannot go on
    std::vector<at::Tensor> kept;  // buffers such a message may still be using
    // Under any_mu_:
    std::deque<std::pair<uint64_t, uint64_t>> arrived;  // (tag, arrival) of unclaimed envelopes
    std::deque<std::shared_ptr<p2p_recv>> waiting;      // receives from this peer, unmatched
    std::deque<std::shared_ptr<p2p_recv>> claims;       // matched, payloads to take in order
    bool scouting = false;  // a job on the thread takes envelopes for receives from any rank
    runner thread;          // last: joined (finishing its jobs) before comm goes
  };

  /// Runs fn in order with the group's other calls: on the caller's thread when the call is
  /// blocking (`async` false) and nothing is queued, else on the group's thread.
  c10::intrusive_ptr<work> post(c10d::OpType type, const char* title, bool async,
                                std::vector<at::Tensor> outputs, std::function<void()> fn);
  /// Joins the world `key` names. `unbounded`: its calls have no deadline of their own (the
  /// caller bounds its waits: a lane's receive of envelopes stays posted between calls).
  [[nodiscard]] std::unique_ptr<any_comm> join(const std::string& key, int rank, int size,
                                               transport_choice over, bool unbounded = false) const;
  lane& lane_to(int peer, bool sending);
  [[nodiscard]] lane* find_lane(int peer, bool sending);
  [[nodiscard]] std::string lane_key(int src, int dst) const;

  /// allreduce_sparse's job, on the group's thread.
  void sum_sparse(const at::Tensor& t);

  // Envelopes and receives from any rank (p2p.cpp).
  /// A receive into `t` completing `w`, due within the group's timeout.
  [[nodiscard]] std::shared_ptr<p2p_recv> receive(const at::Tensor& t, int tag,
                                                  c10::intrusive_ptr<work> w) const;
  void send_announced(lane& l, const at::Tensor& t, int dst, int tag);
  void recv_announced(lane& l, const std::shared_ptr<p2p_recv>& r, int src);
  [[nodiscard]] bool next_envelope(lane& l, std::chrono::steady_clock::time_point until,
                                   uint64_t& tag);
  void deposit(lane& l, uint64_t tag);
  void drain(lane& l);
  void scout(lane& l);
  void watch_any();
  void start_scouts(const std::vector<lane*>& lanes);
  void finish(const std::shared_ptr<p2p_recv>& r, std::exception_ptr error, int src);
  void fail_pending(const std::string& why);
  /// Waits for `w` up to the group's timeout (sooner when the group shuts down).
  void await(lane& l, const tutti::work& w, std::vector<at::Tensor> keep, const std::string& what);

  c10::intrusive_ptr<c10d::Store> store_;
  std::shared_ptr<tutti::bootstrap::store> tstore_;
  tutti::options opts_;
  transport_choice choice_;
  std::vector<std::string> hosts_;  // each rank's host_identity()
  transport_choice over_{};         // what the group's collectives run over (never automatic)
  std::unique_ptr<any_comm> comm_;
  uint64_t seq_ = 0;
  uint64_t monitored_ = 0;  // monitored barriers so far
  std::mutex lanes_mu_;
  std::map<std::pair<int, bool>, std::unique_ptr<lane>> lanes_;
  bool envelopes_ = false;  // a group of 3+ ranks: messages are announced
  std::atomic<bool> stopping_{false};
  std::mutex any_mu_;
  std::deque<std::shared_ptr<p2p_recv>> anys_;  // receives from any rank, unmatched
  uint64_t orders_ = 0;                         // receives posted
  uint64_t arrivals_ = 0;                       // envelopes taken
  bool watching_ = false;                       // watch_any is queued or running
  std::unique_ptr<runner> any_thread_;          // runs watch_any
  std::unique_ptr<runner> collectives_;         // last: joined first, while the rest still lives
};

}  // namespace tutti_torch
