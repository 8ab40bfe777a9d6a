// The runtime: the weight store (versions with integer ids, a pool sized from the IR),
// the timeline of executed actions, and the executor that runs one worker's action list
// with real kernels and nonblocking MPI.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/data.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/schedule.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/transport.hpp"

namespace pt {

// Weight versions of one stage. Version ids count the minibatches whose gradients have been
// applied. Policy (the same for every schedule): an update is applied in place when nothing
// will read the latest version again, otherwise to a copy of it (weight stashing); a version
// is freed when its last reader ends. The IR says who reads what, so the pool is sized
// before training from the IR and never grows during a step.
class WeightStore {
 public:
  WeightStore(Backend& be, size_t n);
  // Prepare for an IR whose relative version 0 is the current latest version.
  void prepare(const Schedule& ir, int rank, int stage, size_t from = 0);
  // Replace the held versions (resume): absolute ids, the latest, and the IR's base id.
  void restore(const std::vector<std::pair<int64_t, std::vector<float>>>& versions, int64_t latest, int64_t base);
  const float* read(int32_t rel_version) const;
  void done_reading(int32_t rel_version);
  // The buffer the optimizer updates to produce rel_version (the latest, or a copy of it).
  float* begin_update(int32_t rel_version);
  float* latest() { return pool_[static_cast<size_t>(latest_slot_)].data(); }
  const float* latest() const { return pool_[static_cast<size_t>(latest_slot_)].data(); }
  int64_t latest_id() const { return latest_id_; }
  int64_t base() const { return base_; }  // absolute id of relative version 0 of the current IR
  void set_latest_id(int64_t id) { latest_id_ = id; }
  int held() const;
  int max_held() const { return max_held_; }
  size_t pool_size() const { return pool_.size(); }
  size_t size() const { return n_; }
  // Live versions (absolute id, buffer), for checkpoints.
  std::vector<std::pair<int64_t, const float*>> live() const;

 private:
  int slot_of(int32_t rel) const;
  Backend& be_;
  size_t n_;
  std::vector<Buffer> pool_;
  std::vector<int64_t> id_;      // absolute version in each pool slot, -1 free
  std::map<int32_t, int> uses_;  // remaining readers per relative version
  int64_t base_ = 0, latest_id_ = 0;
  int latest_slot_ = 0, max_held_ = 1;
};

struct TimelineEvent {
  double start, end;
  Op op;
  int32_t mb;
  int64_t bytes;
};

struct UpdateReport {
  int64_t minibatches = 0;  // version produced: minibatches applied to this stage so far
  double loss_sum = 0;      // last stage: summed loss of the samples of this update
  int64_t samples = 0;
  double lr = 0;
  bool skipped = false;     // non-finite gradients dropped under train.nonfinite = "skip"
};

// One worker's state at a consistent cut (see consistent_cut): what a checkpoint holds and
// what resuming restores. Weights and payloads are host copies.
struct WorkerState {
  int64_t epoch = 0;        // epoch in progress
  int64_t epoch_steps = 0;  // minibatches in that epoch's IR
  int64_t epoch_start = 0;  // minibatches applied before it (absolute id of relative version 0)
  int64_t position = 0;     // actions of this rank's epoch IR already run
  int64_t latest = 0;       // absolute id of the latest weight version
  std::vector<std::pair<int64_t, std::vector<float>>> versions;  // every live version (latest included)
  std::vector<std::vector<float>> optimizer;                      // Optimizer::state() order
  int64_t optimizer_updates = 0;
  struct Unit {            // a microbatch forwarded here and not yet backwarded
    int32_t mb = 0;
    int64_t fwd_version = 0;  // absolute
    double loss = 0;
    std::vector<float> slot;  // the whole activation slot: input, outputs, saved extras
  };
  std::vector<Unit> units;
  struct Message {         // a send made before the cut whose receive comes after the peer's cut
    int64_t action = 0;    // its index in the IR
    std::vector<float> payload;
  };
  std::vector<Message> crossing;
  double elapsed_train_s = 0;
  // The reporter's running totals, so a resumed run logs exactly what the uninterrupted
  // one would (every rank stores them; only the reporter's are meaningful).
  struct Reporting {
    double epoch_loss = 0, epoch_samples = 0, interval_loss = 0, interval_samples = 0, epoch_time = 0;
    double time_to_target = -1;
  } reporting;
};

enum class CutAction { none, checkpoint, checkpoint_and_stop };

// What the trainer decides at update boundaries. Every rank must answer at_boundary the
// same way for the same version; save() runs the collective checkpoint commit.
class TrainControl {
 public:
  virtual ~TrainControl() = default;
  virtual void on_update(const UpdateReport& r) = 0;
  virtual CutAction at_boundary(int64_t version) = 0;
  virtual void save(WorkerState& state) = 0;
};

struct ExecutorConfig {
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t eval_mb = 0;
  bool debug_versions = false;
  bool skip_nonfinite = false;
  bool nccl_allreduce = false;  // parallel.allreduce = "nccl" (CUDA backend)
  int64_t trace_limit = 0;  // timeline events kept for trace.json
};

struct ExecutorStats {
  double compute_s = 0, wall_s = 0;
  int64_t bytes_p2p = 0, bytes_allreduce = 0, bytes_allreduce_network = 0, samples = 0, skipped_updates = 0;
  int64_t activation_bytes = 0, buffer_bytes = 0, weight_bytes = 0, optimizer_bytes = 0;
  int max_versions = 1, max_in_flight = 0;
};

class Executor {
 public:
  Executor(ParallelContext& ctx, Stage& stage, WeightStore& weights, Optimizer& opt, const Dataset& train,
           const Dataset& test, const ExecutorConfig& cfg);
  ~Executor();

  // Run this rank's actions of a training IR. Unit m holds samples perm[m*mb .. (m+1)*mb)
  // of the epoch; sample_base + position is the global sample id (dropout keys).
  // Returns false when a checkpoint_and_stop cut ended it early. With `resume`, start
  // from that state (same IR) instead of the beginning.
  bool train(const Schedule& ir, const std::vector<int64_t>& perm, int64_t sample_base, TrainControl& control,
             const WorkerState* resume = nullptr);

  struct EvalResult {
    double loss_sum = 0;
    int64_t correct = 0, samples = 0;
  };
  // Forward-only pass over the test set; the result is valid on the reporter rank.
  EvalResult evaluate(const Schedule& eval_ir);

  const ExecutorStats& stats() const { return stats_; }
  const std::vector<TimelineEvent>& timeline() const { return timeline_; }
  // Version log: (stage, microbatch, forward version, backward version) in absolute ids.
  struct VersionRecord {
    int64_t epoch_unit;
    int64_t fwd, bwd;
  };
  const std::vector<VersionRecord>& version_log() const { return version_log_; }
  void clear_version_log() { version_log_.clear(); }

 private:
  struct SlotState;
  void ensure_pools(const Schedule& ir);
  void post_receives();
  void progress();  // between layers: post receives, reap finished sends
  static void poll_thunk(void* self);
  int tag(int kind, int64_t mb) const;
  void check_finite_grads(int64_t mb, const char* when);
  WorkerState capture(const Schedule& ir, size_t position, const std::vector<size_t>& crossing);
  void restore(const Schedule& ir, const WorkerState& st);
  void quiesce(const Schedule& ir, const Cut& cut);  // before stopping: drain messages that crossed the cut
  std::string waiting_for(const Action& a) const;

  ParallelContext& ctx_;
  Stage& stage_;
  WeightStore& weights_;
  Optimizer& opt_;
  const Dataset& train_;
  const Dataset& test_;
  ExecutorConfig cfg_;
  Backend& be_;
  std::unique_ptr<Transport> tr_;
  ExecutorStats stats_;

  // pools sized from the IR
  std::vector<Buffer> slot_mem_;
  std::vector<int32_t*> slot_labels_;
  std::vector<Stage::Slot> slots_;
  std::vector<SlotState> slot_state_;
  std::deque<int> free_slots_;
  std::vector<Buffer> grad_in_;
  std::vector<MPI_Request> grad_in_req_;
  std::vector<int64_t> grad_in_mb_;
  std::deque<int> free_grad_in_;
  std::vector<Buffer> grad_out_;
  std::vector<MPI_Request> grad_out_req_;
  std::vector<int64_t> grad_out_mb_;  // microbatch whose gradient each outgoing buffer holds
  int grad_out_next_ = 0;
  Buffer grads_;  // accumulated gradients + 1 float: the loss sum riding along the allreduce
  std::vector<float> host_x_;
  std::vector<int32_t> host_labels_;
  std::vector<int64_t> idx_;

  // state of the current IR
  const Schedule* ir_ = nullptr;
  const std::vector<int64_t>* perm_ = nullptr;
  int64_t mb_size_ = 0, sample_base_ = 0;
  std::vector<size_t> recv_positions_;
  size_t next_recv_ = 0;
  std::map<int64_t, int> slot_of_mb_, grad_of_mb_;
  MPI_Request allreduce_req_ = MPI_REQUEST_NULL;
  double group_loss_ = 0;
  bool group_nonfinite_ = false;

  std::vector<TimelineEvent> timeline_;
  std::vector<VersionRecord> version_log_;
  std::map<int64_t, int64_t> fwd_version_of_;
  Buffer eval_in_[2], eval_out_[2];
  int32_t* eval_labels_ = nullptr;
};

}  // namespace pt
