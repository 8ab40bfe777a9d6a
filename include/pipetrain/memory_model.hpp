// The memory model: each rank's bytes by category, before anything is allocated. It never
// sizes a buffer by a formula of its own: a stage's buffers come from the functions the
// engine allocates with (Stage::geometry, StagePools::unit_sizes, WeightStore::sizes,
// StageRuntime::eval_sizes, Executor::staging_bytes, the optimizer entry's state count), each
// buffer's resident bytes from host_resident_bytes (2 MiB pages), the units in flight and
// weight versions from the schedule IR the run builds (max_in_flight / max_versions_held of a
// short IR of the run's segment shape: memory_ir_steps), the data from what the dataset holds,
// and the runtime's own bytes are measured (this process's resident bytes at start-up).
// `check`, `plan` (the DP's cap and the candidate filter), `simulate` and the trainer (the fit
// check before allocating, summary.json beside the measured peak) all use it.
// docs/ARCHITECTURE.md, "Memory", lists the categories and where each number comes from.
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pipetrain/engine.hpp"
#include "pipetrain/profile.hpp"

namespace pt {

enum class MemCategory : int {
  master,         // fp32 master weights (the latest version) and running state
  gradients,      // accumulated gradients
  optimizer,      // optimizer state (momentum; Adam's m and v)
  weight_copies,  // other weight versions (stashes) and bf16 compute copies
  activations,    // activation slots x units in flight (inputs, outputs, saved extras, labels)
  output_grads,   // output gradients a split backward keeps in its slots from I until W
  messages,       // gradient buffers, bf16 wire copies, host staging of samples
  evaluation,     // evaluation buffers and the part of scratch/workspace the evaluation microbatch adds
  workspace,      // ping-pong scratch, the layers' workspace, the kernels' own buffers
  snapshots,      // host copies of weights and optimizer state (checkpoints, resume, weights.h5)
  dataset,        // the training and test data as held in memory (every rank holds them)
  runtime,        // the process before pipetrain allocates: libraries, MPI, allocator (measured)
};
constexpr int kMemCategories = 12;
const char* memory_category_name(MemCategory c);   // summary.json / check --json key
const char* memory_category_words(MemCategory c);  // what it holds, in words

// One rank's bytes by category.
struct RankMemory {
  int rank = 0;
  std::array<int64_t, kMemCategories> bytes{};
  int in_flight = 0, versions = 0;  // the most over its stages: activation slots, weight versions
  int64_t& operator[](MemCategory c) { return bytes[static_cast<size_t>(c)]; }
  int64_t operator[](MemCategory c) const { return bytes[static_cast<size_t>(c)]; }
  int64_t total() const;
  int64_t modelled() const { return total() - (*this)[MemCategory::runtime]; }  // less the measured base
  MemCategory largest() const;
  void add(const RankMemory& o);  // category by category; in_flight, versions: the larger
};
// {"rank": r, "total_bytes": ..., "categories": {"master_weights": ..., ...}}
nlohmann::json memory_json(const RankMemory& m);
// Bytes as text: "1.72 GB", "184 MB", "12.0 kB".
std::string bytes_text(double b);

// One held stage's sizes before units in flight and weight versions multiply them: what the
// engine allocates for layers [first, end) (model_footprints), or what a profile says of them
// (profile_footprints: no model at hand).
struct StageFootprint {
  int first = 0, end = 0;
  bool first_stage = false, last_stage = false;
  bool bf16 = false;
  int64_t params = 0, state = 0;   // floats
  int optimizer_states = 0;        // state buffers of params floats each (a model's)
  int64_t optimizer_floats = 0;    // all optimizer state (per-layer bytes: as given, optimizer_states 0)
  int64_t train_mb = 0, eval_mb = 0;
  Stage::Geometry geo;
  StagePools::UnitSizes unit;
  StageRuntime::EvalSizes eval;
  int64_t in_numel = 0;            // floats per sample of the stage input (sample staging)
  // Bytes the kernels keep for themselves (Backend::conv_kernel_bytes of its convolutions at
  // the unit's and the evaluation's sizes): cached with their plans, with what the library's
  // primitives hold themselves (a rank's stages add up),
  // and the scratch the library and the backend each grow to their largest (a rank's largest).
  int64_t kernel_work = 0, kernel_scratchpad = 0, kernel_scratch = 0;
  // bf16: values of the weight matrices the host backend keeps in oneDNN's layout for the
  // input-gradient product (Layer::product_weight_values of the layers whose input gradient is
  // computed: all but the model's first; a profile's: every parameter but the first layer's),
  // 2 bytes each
  int64_t kept_weight_values = 0;
};

// One stage's bytes by category with `in_flight` units (at least 1 slot) and `versions`
// weight versions; rank-level terms (data, base, staging, kernels' buffers, snapshots) are
// add_rank_terms'.
// recompute_buffers: full recomputation's buffers of the whole layout (1 + the units between an
// I and its W: max_between_i_and_w), counted as activations.
RankMemory stage_memory(const StageFootprint& f, int in_flight, int versions, int recompute_buffers = 0);

// What a rank holds besides its stages' buffers.
struct MemoryShared {
  int64_t dataset = 0;      // the data as held (every rank opens the training and test splits)
  int64_t base = 0;         // measured: resident bytes at start-up, before pipetrain allocates
  int64_t label_count = 1;  // labels per sample
  bool checkpoints = true;  // checkpoints (checkpoint.at_end, every_*) or --resume copy states to host
  bool mid_segment = false;  // checkpoint.every_* or --resume: a cut inside a segment (asynchronous schedules keep units)
  bool resuming = false;  // --resume: every replica holds the loaded weights and optimizer state (a checkpoint: replica 0 only)
  int64_t model_params = 0;  // the reporter gathers them all for weights.h5
  int64_t largest_stage_params = 0;  // the reporter's receive buffer; 0: the model's less the rank's own
  // parallel.tensor, tensor rank 0: its reporter also lays out the whole model's tensors for
  // weights.h5 and receives each split layer's t parts (whole params + the largest split
  // layer's t parts, floats); 0 otherwise
  int64_t tensor_whole = 0;
};
// Which end-of-run gathers a rank takes part in: the reporter (replica 0 of the last stage)
// receives every stage's weights for weights.h5, replica 0 of every other stage sends its own.
struct RankRole {
  bool reporter = false, replica0 = true;
  bool asynchronous = false;  // the schedule is not a flush schedule: a cut may keep units in flight
  // bytes of the gradients of its replicated stages (replica_allreduce_bytes): MPI's
  // nonblocking allreduce reduces through a scratch copy of the message (measured: a
  // replica's peak exceeds the rest by about its stage's gradients)
  int64_t allreduce_bytes = 0;
};
// The scratch a replicated stage's gradient allreduce takes (RankRole::allreduce_bytes).
int64_t replica_allreduce_bytes(const StageFootprint& f);
// A rank holding `held` (one entry per held stage; m.in_flight already its most units in
// flight): the data, the base, the host staging of samples, the kernels' own buffers (the
// largest of its stages'), the allreduce scratch of its replicated stages, and the
// snapshots (the larger of a checkpoint's host copies and the end-of-run gather, which never
// overlap the allreduce and so share its room).
void add_rank_terms(RankMemory& m, const std::vector<const StageFootprint*>& held, const MemoryShared& s, RankRole role);

// Where a stage's footprint comes from.
class FootprintSource {
 public:
  virtual ~FootprintSource() = default;
  virtual int layers() const = 0;
  // Layers [first, end) as one stage of units of `unit_samples` samples; split_backward: the
  // schedule's (its slots keep output gradients from I until W); recompute: the stage's
  // parallel.recompute (what a unit keeps, and full's recompute buffer: Stage::slot_geometry).
  virtual StageFootprint stage(int first, int end, int64_t unit_samples, bool split_backward, Recompute recompute) const = 0;
};
struct ModelMemoryInputs {
  bool bf16 = false;
  int optimizer_states = 0;
  int64_t labels_per_sample = 1;
  int64_t eval_mb = 1;
  // The backend whose kernels' own bytes count (conv_kernel_bytes, in the run's precision);
  // none: no kernel bytes (a profile, a test).
  std::shared_ptr<Backend> kernels;
};
// Exact: the engine's sizing functions on `model` (which must outlive the source).
std::shared_ptr<const FootprintSource> model_footprints(const Model& model, const ModelMemoryInputs& in);
// Per-layer bytes when no model is at hand (a profile, graph.txt, the planner's tests): the
// model input, each layer's output message (2 bytes per value in bf16), stash (its output
// unless a view and saved extras, 4 bytes per value), parameters and optimizer state, for
// `samples` samples. No workspace or evaluation terms; a bf16 message is an fp32 buffer plus
// its wire copy; a split backward keeps each parametrised layer's output (but the last's).
struct ChainBytes {
  double input = 0;
  std::vector<double> out, stash, params, opt;
  std::vector<double> stash_selective;  // stash under selective recomputation (empty: as stash)
  double samples = 1;
  bool bf16 = false;
};
std::shared_ptr<const FootprintSource> chain_footprints(const ChainBytes& b);
std::shared_ptr<const FootprintSource> profile_footprints(const Profile& p);  // its layers' bytes

// Minibatches of the IR whose units in flight and weight versions the model counts: the
// run's longest segment (the pools are sized per segment IR, grown, never shrunk; the first
// segment is the longest), capped where the pipeline has filled and every version rule has
// reached its depth: a flush schedule repeats from one update group on (2 x its boundary
// stride); an asynchronous one needs its in-flight depth (at most every rank) in units to
// fill, then as many updates: 2 ceil(ranks / units per minibatch) + 4 minibatches, rounded up to the
// boundary stride. tests/unit/test_memory_model.cpp checks the cap against the full IR.
int64_t memory_ir_steps(const ScheduleDef& def, const Layout& layout, int microbatches, int64_t longest_segment);

// Every rank of a layout: its stages' footprints with the units in flight and versions of
// `ir` (built for `layout` by the schedule ir.def), plus its rank terms.
class MemoryModel {
 public:
  // recompute: parallel.recompute per stage (empty: none everywhere).
  MemoryModel(std::shared_ptr<const FootprintSource> src, const Layout& layout, const Schedule& ir, int64_t unit_samples,
              const MemoryShared& shared, const std::vector<Recompute>& recompute = {});
  RankMemory rank(int r) const;
  std::vector<RankMemory> ranks() const;
  const StageFootprint& stage(int s) const { return stages_[static_cast<size_t>(s)]; }

 private:
  Layout layout_;
  std::vector<StageFootprint> stages_;
  struct Held {
    int in_flight, versions, recompute_buffers;
  };
  std::vector<std::vector<Held>> held_;  // per rank, per held stage
  MemoryShared shared_;
  bool flush_ = true;
};

// ---- a run's memory: the trainer's fit check, `check` --------------------------------

struct Deck;
struct TrainSetup;

// What the data and the process bring (the opened data in a run, data_info in `check`).
struct RunMemoryInputs {
  int64_t train_samples = 0, test_samples = 0;
  int64_t data_bytes = 0;  // Dataset::held_bytes of both splits (DataInfo::held_bytes)
  int64_t label_count = 1;
  std::vector<int64_t> base;  // per rank: measured resident bytes at start-up (one entry: every rank)
  bool resuming = false;      // train --resume: the checkpoint's states are held until the first segment ran
};
// Every rank's estimate for the deck's run with evaluation microbatch eval_mb.
std::vector<RankMemory> run_memory(const Deck& deck, const TrainSetup& setup, const RunMemoryInputs& in, int64_t eval_mb);

// A rank's budget: cluster.memory when set, else its share of the node: the bytes the node can
// still give (MemAvailable, cgroup limit) divided by the ranks on the node, plus what the rank
// holds already (at the fit check: the runtime and the data, which the estimate counts).
struct MemoryBudget {
  int64_t bytes = 0;
  bool from_deck = false;
  int64_t available = 0, resident = 0;  // node's MemAvailable; this rank's resident bytes then
  int ranks_on_node = 1;
  std::string source(const Deck& deck) const;  // "cluster.memory = ... (deck.toml:12)" or "MemAvailable ... / 2 ranks ..."
};
MemoryBudget memory_budget(const Deck& deck, int ranks_on_node);

// train.eval_batch_size (at most the test set), or with 0 (auto) the largest evaluation
// microbatch whose evaluation buffers stay within kEvalBudgetShare of `budget` (the smallest
// rank budget), no larger than the test set and kEvalAutoMax, at least 1. The buffers are
// counted for the whole model as one stage (the evaluation category of stage_memory with a
// training microbatch of 1): the most any rank of any layout needs up to its boundary
// buffers, so the rule does not depend on the layout and plan, check and train agree.
constexpr double kEvalBudgetShare = 0.125;
constexpr int64_t kEvalAutoMax = 64;
int64_t resolve_eval_batch(const Deck& deck, const Model& model, int64_t test_samples, int64_t label_count, int64_t budget);

// The planner's and the simulator's memory model for a deck: the model's footprints at the
// evaluation microbatch train would use under `budget` (resolve_eval_batch), and the rank
// terms of its data, checkpoints and the measured `base`. `model` must outlive the source.
struct DeckMemory {
  std::shared_ptr<const FootprintSource> source;
  MemoryShared shared;
  int64_t eval_mb = 1;
};
DeckMemory deck_memory(const Deck& deck, const Model& model, int64_t budget, int64_t base);

// "" when every rank's estimate fits its budget; else the message naming the first rank over
// its budget, its largest category, the budget and where it came from, and the remedies.
std::string fit_problem(const Deck& deck, const TrainSetup& setup, const std::vector<RankMemory>& est,
                        const std::vector<MemoryBudget>& budgets, int64_t eval_mb);

}  // namespace pt
