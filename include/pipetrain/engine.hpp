// The runtime: the weight store (versions with integer ids, a pool sized from the IR), the
// stage runtimes a rank holds (one per stage: slice, weights, optimizer, pools), the
// timeline of executed actions, and the executor that runs a rank's action list with real
// kernels and nonblocking messages through a Transport, one small handler per op.
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/data.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/schedule_ir.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/stage_pools.hpp"
#include "pipetrain/transport.hpp"

namespace pt {

// Weight versions of one stage. Version ids count the minibatches whose gradients have been
// applied. Policy (the same for every schedule): an update is applied in place when nothing
// will read the latest version again, otherwise to a copy of it (weight stashing); a version
// is freed when its last reader ends. The IR says who reads what, so the pool is sized
// before training from the IR and never grows during a step.
//
// bf16 (train.precision = "bf16"): compute reads the bf16 copy of a version (round_bf16 of
// every parameter), never its fp32 values. The latest version is one fp32 master, which
// the optimizer updates in place; every other held version (a stash) exists only as its
// bf16 copy packed two per 32-bit word (pack_bf16), half the bytes. read() returns a
// per-stage compute buffer holding the bf16 copy of the version asked for: made from the
// master once per update (on the first read after it) or unpacked from a stash, and kept
// while consecutive reads ask for the same version. A stash is packed from that copy
// when an update must keep the old latest for its readers. read() hands out both: a
// ParamView (dtype.hpp) of the compute buffer's fp32 values and of the same values as a bf16
// array (the stash the version came from, or one packed beside the master's rounding) with a
// new array version, so products read the weights without converting them. In fp32 nothing
// of this exists.
class WeightStore {
 public:
  WeightStore(Backend& be, size_t n, bool bf16 = false);
  // The buffers a store of n parameters allocates once it holds `versions` versions, floats:
  // the latest (fp32; the master in bf16), each other version (an fp32 copy, or in bf16 a
  // packed stash of (n + 1) / 2 words), and in bf16 the compute buffer and its bf16 array.
  // The constructor and prepare allocate by it; the memory model counts it.
  struct Sizes {
    int64_t latest = 0, per_other = 0, others = 0, compute = 0, compute_packed = 0;
    int64_t bytes() const { return (latest + per_other * others + compute + compute_packed) * 4; }
  };
  static Sizes sizes(size_t n, bool bf16, int versions);
  WeightStore(const WeightStore&) = delete;
  WeightStore& operator=(const WeightStore&) = delete;
  // Prepare for an IR whose relative version 0 is the current latest version.
  void prepare(const Schedule& ir, int rank, int stage, size_t from = 0);
  // prepare's allocation alone (the buffers for the IR's most versions held at once): the
  // trainer's setup, before the clock starts.
  void reserve(const Schedule& ir, int rank, int stage);
  // Replace the held versions (resume): absolute ids, the latest, and the IR's base id.
  // bf16: the latest becomes the fp32 master, the others are stored packed.
  void restore(const std::vector<std::pair<int64_t, std::vector<float>>>& versions, int64_t latest, int64_t base);
  // The parameters a compute action reads (bf16: the compute buffer and its bf16 array, valid
  // until the next read, read_latest or begin_update of this store).
  ParamView read(int32_t rel_version);
  ParamView read_latest();  // the same for the latest version (evaluation)
  // The latest's values were changed in place outside begin_update (the profiler's timed
  // updates): the next read rebuilds the bf16 compute copy.
  void latest_changed() { compute_id_ = -1; }
  void done_reading(int32_t rel_version);
  // The buffer the optimizer updates to produce rel_version (the latest, or a copy of it).
  float* begin_update(int32_t rel_version);
  // bf16: the optimizer has written the new latest's values [offset, offset + count) (its
  // RangeHook, in order, after begin_update): they are rounded and packed into the compute
  // copy now, while in cache; once every range is in, the compute copy holds the latest and
  // its first read rounds nothing. An update without the hook leaves that to the first read.
  // No-op in fp32.
  void updated_range(size_t offset, size_t count);
  // bf16: the ranges {offset, count} (even offsets and counts; Stage::operand_only_ranges)
  // of parameters the layers read only as product operands. The compute copy makes their
  // bf16 array but not their fp32 values, which hold NaN, so a read that should not happen
  // shows in the results. Call before the first read. No-op in fp32.
  void set_operand_only(std::vector<std::pair<int64_t, int64_t>> ranges);
  // The latest version's fp32 values (bf16: the master).
  float* latest() { return pool_[static_cast<size_t>(latest_slot_)].data(); }
  const float* latest() const { return pool_[static_cast<size_t>(latest_slot_)].data(); }
  int64_t latest_id() const { return latest_id_; }
  int64_t base() const { return base_; }  // absolute id of relative version 0 of the current IR
  void set_latest_id(int64_t id) { latest_id_ = id; }
  int held() const;
  int max_held() const { return max_held_; }
  size_t size() const { return n_; }
  bool bf16() const { return bf16_; }
  // Device bytes of the store: fp32 pool, and in bf16 the compute buffer, its bf16 array and
  // the packed stashes.
  int64_t bytes() const;
  // Live versions (absolute id, fp32 host values; a packed stash unpacked exactly), for
  // checkpoints.
  std::vector<std::pair<int64_t, std::vector<float>>> host_versions() const;

 private:
  int slot_of(int32_t rel) const;
  int packed_slot_of(int64_t abs) const;
  ParamView compute_copy(int64_t abs);  // bf16: the compute buffer holding version abs
  void stash_latest();                     // bf16: pack the latest's bf16 copy into a free stash
  // bf16: the compute copy of the latest's [offset, offset + count): rounded and packed, in
  // the operand-only ranges packed only; a stash's values unpacked outside those ranges
  void make_compute(size_t offset, size_t count);
  void unpack_compute(const float* stash);
  void poison_operand_only();  // NaN in the compute buffer's operand-only ranges
  Backend& be_;
  size_t n_;
  bool bf16_;
  std::vector<Buffer> pool_;
  std::vector<int64_t> id_;      // absolute version in each pool slot, -1 free
  std::map<int32_t, int> uses_;  // remaining readers per relative version
  int64_t base_ = 0, latest_id_ = 0;
  int latest_slot_ = 0, max_held_ = 1;
  // bf16 only (empty in fp32): the stashes, (n + 1) / 2 words each, and their absolute ids
  // (-1 free); the compute buffer and the version it holds (-1 none)
  std::vector<Buffer> packed_;
  std::vector<int64_t> packed_id_;
  Buffer compute_;
  Buffer compute_packed_;  // pack_bf16 of the compute buffer when it holds the latest
  int64_t compute_id_ = -1;
  size_t rounded_ = 0;                   // parameters of the latest rounded by updated_range
  std::vector<std::pair<int64_t, int64_t>> operand_only_;  // sorted, disjoint
  const float* compute_bf16_ = nullptr;  // the bf16 array of the version in compute_
  uint64_t compute_version_ = 0;         // its array version (CView::version)
};

struct TimelineEvent {
  double start, end;
  Op op;
  int32_t mb;
  int64_t bytes;
  int16_t stage;
};

struct UpdateReport {
  int stage = 0;            // the stage that updated
  int64_t minibatches = 0;  // version produced: minibatches applied to this stage so far
  double loss_sum = 0;      // last stage: summed loss of the samples of this update
  int64_t samples = 0;
  double lr = 0;
  bool skipped = false;     // non-finite gradients dropped under train.nonfinite = "skip"
  // train.clip_grad_norm: the gradient norm before clipping (a flush schedule: the whole
  // model's, the same on every stage; an asynchronous one: this stage's update's); -1 when
  // clipping is off.
  double grad_norm = -1;
};

// One hosted stage's state at a consistent cut (see consistent_cut): what a checkpoint holds
// and what resuming restores. Weights and payloads are host copies. The rank-level fields
// (epoch, position, elapsed time, reporting totals) are the same in every stage of a rank.
struct WorkerState {
  int stage = 0;            // the stage this state belongs to
  int64_t epoch = 0;        // epoch in progress
  int64_t epoch_steps = 0;  // minibatches in that epoch's IR
  int64_t epoch_start = 0;  // minibatches applied before it (absolute id of relative version 0)
  int64_t position = 0;     // actions of this rank's epoch IR already run
  int64_t latest = 0;       // absolute id of the latest weight version
  std::vector<std::pair<int64_t, std::vector<float>>> versions;  // every live version (latest included)
  std::vector<std::vector<float>> optimizer;                      // Optimizer::state() order
  int64_t optimizer_updates = 0;
  std::vector<float> state;  // running state (batch-norm statistics) of this replica, Stage::num_state() floats
  struct Unit {            // a microbatch forwarded here and not yet done with its backward
    int32_t mb = 0;
    int64_t fwd_version = 0;  // absolute
    double loss = 0;
    // its whole activation slot (Stage::carve_unit): input, outputs, saved extras, kept
    // gradients; under full recomputation the stage's input and output only
    std::vector<float> slot;
  };
  std::vector<Unit> units;
  Recompute recompute = Recompute::none;  // the stage's parallel.recompute when captured: how `slot` is laid out
  // the run's train.precision when captured: how `slot` and the crossing payloads are laid
  // out (unset: a checkpoint from before it was recorded; resume then checks the slots' sizes)
  std::optional<Precision> precision;
  struct Message {         // a send made before the cut whose receive comes after the peer's cut
    int64_t action = 0;    // its index in the rank's IR
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
// same way for the same version; save() runs the collective checkpoint commit of the states
// of every stage the rank holds.
class TrainControl {
 public:
  virtual ~TrainControl() = default;
  virtual void on_update(const UpdateReport& r) = 0;
  virtual CutAction at_boundary(int64_t version) = 0;
  virtual void save(std::vector<WorkerState>& states) = 0;
};

struct ExecutorConfig {
  uint64_t seed = 0;
  int64_t batch_size = 0;
  int64_t eval_mb = 0;
  bool debug_versions = false;
  bool skip_nonfinite = false;
  bool nccl_allreduce = false;  // parallel.allreduce = "nccl" (CUDA backend)
  double clip_grad_norm = 0;    // train.clip_grad_norm (0 = off; clip.hpp)
  int64_t trace_limit = 0;  // timeline events kept for trace.json
  // parallel.tensor > 1: this rank's tensor group, handed to every layer (LayerCtx::tensor)
  const TensorGroup* tensor = nullptr;
};

struct ExecutorStats {
  double compute_s = 0, wall_s = 0;
  double forward_s = 0, eval_compute_s = 0;  // training FORWARDs; evaluation forwards (infer and scoring)
  int64_t eval_samples = 0;
  int64_t bytes_p2p = 0, bytes_allreduce = 0, bytes_allreduce_network = 0, samples = 0, skipped_updates = 0;
  // activation_bytes: the pools' unit slots and recompute buffers; recompute_bytes: the latter
  int64_t activation_bytes = 0, buffer_bytes = 0, weight_bytes = 0, optimizer_bytes = 0, recompute_bytes = 0;
  int max_versions = 1, max_in_flight = 0;
};

// The boundary before layer l (past the last layer: the loss's output, which never crosses),
// `below` the stage under it; and the input of `stage` and its output. bf16 = train.precision
// is "bf16".
Boundary boundary_at_layer(const Model& model, int layer, int below, bool bf16);
Boundary boundary_below(const Model& model, const Layout& layout, int stage, bool bf16 = false);
Boundary boundary_above(const Model& model, const Layout& layout, int stage, bool bf16 = false);

// One stage held by this rank: its slice, weight versions, optimizer, accumulated
// gradients, running state, boundaries (`in` below it, `out` above it), the update group in
// progress, evaluation buffers, and its per-unit pools (StagePools: activation slots,
// incoming and outgoing gradient buffers, sized from the IR; nothing else touches them).
// Built by the trainer; run by the executor.
class StageRuntime {
 public:
  StageRuntime(Backend& be, const Model& model, const Layout& layout, int stage, int64_t train_mb, int64_t eval_mb,
               bool split_backward, const Deck::Train& train, int64_t total_updates,
               Recompute recompute = Recompute::none);
  ~StageRuntime();
  StageRuntime(const StageRuntime&) = delete;
  StageRuntime& operator=(const StageRuntime&) = delete;

  const int id;  // the stage index
  std::unique_ptr<Stage> stage;
  std::unique_ptr<WeightStore> weights;
  std::unique_ptr<Optimizer> opt;
  Buffer grads;  // accumulated gradients + 1 float: the loss sum riding along the allreduce
  Buffer state;  // running state of this replica (batch-norm statistics), Stage::num_state() floats
  const Boundary in, out;
  const bool first, last;  // holds the model's first / last layer
  int64_t labels_per_sample = 1;  // of the training data (the trainer sets it before the first IR)
  StagePools pools;

  // The update group in progress: the summed loss of its finished units, whether one of its
  // gradients was not finite (train.nonfinite = "skip"), and its replica allreduce. Once
  // `reduced` (at its GRAD_NORM or its update) the allreduce has completed, the loss is the
  // replicas' sum, `skip` says whether the update is dropped and the tied gradients are summed.
  struct Group {
    double loss = 0;
    bool nonfinite = false;
    Request allreduce;
    bool reduced = false, skip = false;
  } group;

  // Evaluation: two input and two output buffers of eval_mb samples and the last stage's
  // labels, allocated on the first evaluation and kept.
  struct EvalBuffers {
    Buffer in[2], out[2];
    int32_t* labels = nullptr;
  };
  EvalBuffers& eval_buffers(int64_t eval_mb);
  // Their sizes (eval_buffers allocates by it; the memory model counts it): floats of each
  // input and each output buffer, int32 labels (last stage).
  struct EvalSizes {
    int64_t in = 0, out = 0, labels = 0;
    int64_t bytes() const { return (2 * (in + out) + labels) * 4; }
  };
  static EvalSizes eval_sizes(const Boundary& in, const Boundary& out, bool last, int64_t eval_mb, int64_t labels_per_sample);

  // Device bytes of the gradients and the pools' gradient and wire buffers (summary.json).
  int64_t pool_bytes() const { return static_cast<int64_t>(grads.bytes()) + pools.buffer_bytes(); }

 private:
  EvalBuffers eval_;
};

class Executor {
 public:
  // Messages go through `transport`; null: make_transport(be, cfg.nccl_allreduce) (MPI).
  Executor(ParallelContext& ctx, std::vector<StageRuntime*> stages, Backend& be, const Dataset& train,
           const Dataset& test, const ExecutorConfig& cfg, std::unique_ptr<Transport> transport = nullptr);
  ~Executor();
  // The host staging of samples (inputs, labels, indices) for the widest microbatch `mb`
  // (training or evaluation) into stage inputs of up to `in_numel` floats per sample: the
  // constructor sizes it so; the memory model counts it.
  static int64_t staging_bytes(int64_t mb, int64_t in_numel, int64_t label_count) {
    return mb * in_numel * 4 + mb * std::max<int64_t>(1, label_count) * 4 + mb * 8;
  }

  // Allocate what train(ir) grows for its IR (activation pools, weight versions) now: a fresh
  // run's trainer does it at setup, before its clock starts (train(ir) then grows neither).
  void reserve(const Schedule& ir);
  // Run this rank's actions of a training IR. Unit m holds samples perm[m*mb .. (m+1)*mb)
  // of the segment; sample_base + position is the global sample id (dropout keys).
  // Returns false when a checkpoint_and_stop cut ended it early. With `resume`, start
  // from those states (one per held stage, same IR) instead of the beginning.
  bool train(const Schedule& ir, const std::vector<int64_t>& perm, int64_t sample_base, TrainControl& control,
             const std::vector<WorkerState>* resume = nullptr);

  struct EvalResult {
    double loss_sum = 0;
    int64_t correct = 0, samples = 0, labels = 0;  // labels: predictions scored (tokens for text)
  };
  // Forward-only pass over the test set; the result is valid on the reporter rank.
  EvalResult evaluate(const Schedule& eval_ir);

  const ExecutorStats& stats() const { return stats_; }
  // Its transport (the host's MPI, or the CUDA one with NCCL under parallel.allreduce =
  // "nccl"): the CUDA backend's tensor group sums device buffers through it.
  Transport& transport() { return *tr_; }
  const std::vector<TimelineEvent>& timeline() const { return timeline_; }
  // Version log: (stage, microbatch, forward version, backward version) in absolute ids.
  struct VersionRecord {
    int stage;
    int64_t epoch_unit;
    int64_t fwd, bwd;
  };
  const std::vector<VersionRecord>& version_log() const { return version_log_; }
  void clear_version_log() { version_log_.clear(); }

 private:
  struct Step;      // the state of one train() call
  struct Tie;       // a parameter tensor held by two stages (tied embeddings): gradients summed per update
  struct GradNorm;  // train.clip_grad_norm: this rank's tensors of the norm and the last norm
  using Handler = void (Executor::*)(const Action&, Step&);
  static const Handler kHandlers[kOpCount];

  StageRuntime& rt(int stage);
  int tag(int kind, int boundary, int64_t mb) const;
  void post_receives();
  void post_receive(const Action& a);
  int64_t isend_message(const MessageBuffer& m, int64_t n, int peer, int tag);
  void finish_message(const MessageBuffer& m, int64_t n);
  // Megatron's scatter/gather of pipeline messages under parallel.tensor = t: this tensor
  // rank's part of a message of `words` words on the wire, [k c, k c + len) with c = ceil(words
  // / t) (the whole message when t = 1); the receiver's group all-gathers the rest.
  struct WirePart {
    size_t off = 0, len = 0, chunk = 0;
  };
  WirePart wire_part(size_t words) const;
  // Wait for a request through the transport, with run.comm_timeout_s's deadline.
  void wait(Request* q, const std::function<std::string()>& what) { tr_->wait(q, ctx_.timeout(), what); }
  void progress();  // between layers: post receives, reap finished sends and reductions
  static void poll_thunk(void* self);
  LayerCtx layer_ctx(StageRuntime& r, const Stage::Slot& slot, int64_t mb, bool training) const;
  void load_inputs(StageRuntime& r, Stage::Slot& slot, int64_t mb);
  float* claim_grad_out(StageRuntime& r, const Action& a);
  void run_backward(const Action& a, StagePools::Half half, Step& st);  // B or I
  void finish_unit(StageRuntime& r, const Action& a, Step& st);
  void check_finite_grads(StageRuntime& r, int64_t mb, const char* when);
  void cut_at(const Action& a, int64_t version, Step& st);
  void find_ties();
  void apply_ties(const Action& a);  // before a stage's update: sum its tied gradients with the partner's
  // Before a stage's update (or the rank's GRAD_NORM): its replica allreduce completed, the
  // group's loss, the skip decision, the tied gradients summed. Once per group.
  void reduce_group(StageRuntime& r, const Action& a);
  void init_clipping();
  // The coefficient a stage's update scales its gradients by, and the norm behind it (-1 off).
  float clip_coefficient_of(StageRuntime& r, const Action& a, double* norm);

  // One handler per op (kHandlers): what each does to which buffer is in executor.cpp.
  void on_forward(const Action& a, Step& st);
  void on_backward(const Action& a, Step& st);
  void on_backward_input(const Action& a, Step& st);
  void on_backward_weight(const Action& a, Step& st);
  void on_send_act(const Action& a, Step& st);
  void on_recv_act(const Action& a, Step& st);
  void on_send_grad(const Action& a, Step& st);
  void on_recv_grad(const Action& a, Step& st);
  void on_allreduce(const Action& a, Step& st);
  void on_optimizer_step(const Action& a, Step& st);
  void on_grad_norm(const Action& a, Step& st);

  std::vector<WorkerState> capture(const Schedule& ir, size_t position, const std::vector<size_t>& crossing);
  void restore(const Schedule& ir, const std::vector<WorkerState>& states);
  void restore_units(StageRuntime& r, const WorkerState& st);
  void resend_crossing(const Schedule& ir, const WorkerState::Message& m);
  void quiesce(const Schedule& ir, const Cut& cut);  // before stopping: drain messages that crossed the cut
  void drain_sends(const char* when);
  std::string waiting_for(const Action& a) const;
  void eval_forward(const Action& a, int64_t n, std::vector<const float*>& input, EvalResult& res);

  ParallelContext& ctx_;
  std::vector<StageRuntime*> stages_;
  Backend& be_;
  const Dataset& train_;
  const Dataset& test_;
  ExecutorConfig cfg_;
  std::unique_ptr<Transport> tr_;
  ExecutorStats stats_;
  std::vector<float> host_x_;
  std::vector<int32_t> host_labels_;
  std::vector<int64_t> idx_;

  // state of the current IR
  const Schedule* ir_ = nullptr;
  const std::vector<int64_t>* perm_ = nullptr;
  int64_t mb_size_ = 0, sample_base_ = 0;
  std::vector<size_t> recv_positions_;
  size_t next_recv_ = 0;
  TrainControl* control_ = nullptr;

  std::vector<TimelineEvent> timeline_;
  std::vector<VersionRecord> version_log_;
  std::vector<Tie> ties_;
  std::unique_ptr<GradNorm> norm_;  // null when clipping is off
};

}  // namespace pt
