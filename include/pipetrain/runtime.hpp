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
  void prepare(const Schedule& ir, int rank);
  const float* read(int32_t rel_version) const;
  void done_reading(int32_t rel_version);
  // The buffer the optimizer updates to produce rel_version (the latest, or a copy of it).
  float* begin_update(int32_t rel_version);
  float* latest() { return pool_[static_cast<size_t>(latest_slot_)].data(); }
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

struct ExecutorConfig {
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t eval_mb = 0;
  bool debug_versions = false;
  bool skip_nonfinite = false;
  int64_t trace_limit = 0;  // timeline events kept for trace.json
};

struct ExecutorStats {
  double compute_s = 0, wall_s = 0;
  int64_t bytes_p2p = 0, bytes_allreduce = 0, samples = 0, skipped_updates = 0;
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
  void train(const Schedule& ir, const std::vector<int64_t>& perm, int64_t sample_base,
             const std::function<void(const UpdateReport&)>& on_update);

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
