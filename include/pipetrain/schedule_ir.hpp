// The schedule IR: for every rank, the ordered list of actions it runs. Every action names
// the stage it works on; a rank hosts one stage (contiguous placement) or several (looped,
// V). Schedules are registered once (schedule_registry.hpp): a generator emits compute actions
// (F, B, I, W), and common passes add the updates, the weight versions and the messages.
// The replay engine walks the IR with a cost model, matching messages and collectives (the
// validator proves it deadlock-free this way, the simulator predicts timings, the grid and
// the text form draw it). No schedule logic lives elsewhere.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/placement.hpp"

namespace pt {

struct Deck;
struct ScheduleDef;

// Stages, their placement on rank groups, and replicas per group. A rank group (pipeline
// position) is `replicas[g]` ranks that each hold every stage of the group; ranks are
// group-major (group 0's replicas first). Contiguous placement has one stage per group, so
// replicas[s] is stage s's replica count there.
struct Layout {
  std::vector<int> first;     // first layer of each stage, plus the layer count at the end
  std::vector<int> replicas;  // per rank group
  Placement placement = Placement::contiguous;

  int stages() const { return static_cast<int>(first.size()) - 1; }
  int groups() const { return static_cast<int>(replicas.size()); }
  int chunks() const { return groups() ? stages() / groups() : 0; }  // stages per rank
  int group_of(int stage) const;
  int replicas_of(int stage) const { return replicas[static_cast<size_t>(group_of(stage))]; }
  int ranks() const;
  int rank_of(int stage, int replica) const;
  int group_of_rank(int rank) const;
  int replica_of(int rank) const;
  std::vector<int> stages_of_rank(int rank) const;  // ascending
  // The one stage of a rank; an internal error when the rank hosts several.
  int stage_of(int rank) const;
  int first_layer(int s) const { return first[static_cast<size_t>(s)]; }
  int end_layer(int s) const { return first[static_cast<size_t>(s) + 1]; }
  int replica_for(int stage, int64_t mb) const { return static_cast<int>(mb % replicas_of(stage)); }
  // The rank that runs unit `mb` of `stage`.
  int rank_for(int stage, int64_t mb) const { return rank_of(stage, replica_for(stage, mb)); }
  // Contiguous placement: ranks in stages s..K-1 divided by the replicas of s, rounded up:
  // the minibatches a replica of s keeps in flight in 1F1B (PipeDream's NOAM).
  int in_flight_depth(int s) const;
  std::string str() const;          // "2 stages: layers 0-1 | 2-6, replicas 1-1 (2 ranks)"
  std::string replication() const;  // "2-1-1"

  // From the deck's [parallel] section for `ranks` MPI ranks and a model of `layers` layers,
  // for the deck's schedule `def`: its placement (the deck's "auto") and its stage count.
  static Layout from_deck(const Deck& d, int layers, int ranks, const ScheduleDef& def);
  static Layout make(const std::vector<int>& first_layers, int layers, const std::vector<int>& replicas,
                     Placement placement = Placement::contiguous);
  // Why make() would refuse these (stage and group counts, empty stages), "" when it would
  // not: for layouts read back from files (plan.json, summary.json), a bad-input message.
  static std::string problem(const std::vector<int>& first_layers, int layers, const std::vector<int>& replicas,
                             Placement placement);
};

// FORWARD F, fused BACKWARD B, or its halves: BACKWARD_INPUT I (the input gradient, on the
// critical path) and BACKWARD_WEIGHT W (the weight gradient, movable into bubbles).
// GRAD_NORM (train.clip_grad_norm under a flush schedule): the rank's share of the global
// gradient norm of one update group, a collective of every rank (Schedule::grad_norm).
enum class Op : uint8_t {
  forward, backward, backward_input, backward_weight, send_act, recv_act, send_grad, recv_grad, allreduce, optimizer_step,
  grad_norm
};
constexpr int kOpCount = 11;
const char* op_name(Op op);  // "FORWARD", ...
bool is_compute(Op op);      // F, B, I, W: read a weight version
bool is_backward(Op op);     // B or I: consumes the gradient, produces the input gradient
bool is_comm(Op op);

struct Action {
  Op op;
  int16_t stage;    // the stage this action works on
  int32_t mb;       // unit id within the IR (allreduce/optimizer_step/grad_norm: update group)
  int32_t version;  // compute: weight version read (relative to the IR); optimizer_step: version produced
  int32_t peer;     // communication: peer rank; otherwise -1
};
// Text form: "0F3" (stage 0 forwards unit 3), B, I, W; "0U1" update group 1; "0A1"
// allreduce; "0N1" the gradient norm of group 1 (stage: the rank's first); "0<1:r2" receive
// from rank 2 (< activation, ( gradient); "0>1:r2" send.
std::string action_text(const Action& a);

struct Schedule {
  const ScheduleDef* def = nullptr;
  Layout layout;
  int64_t steps = 0;         // minibatches (optimizer steps of the model) covered
  int microbatches = 1;      // units per minibatch (the entry's units_per_minibatch)
  int64_t units() const { return steps * microbatches; }
  // Update groups: the units whose gradients one optimizer step of stage s applies
  // (microbatches x version_stride(s) consecutive units).
  int64_t group_of(int stage, int64_t mb) const;
  int64_t groups(int stage) const;
  // Version ids count minibatches applied; a step of stage s adds version_stride(s) (the
  // entry's).
  int64_t version_stride(int stage) const;
  bool training() const;
  // Gradient clipping (train.clip_grad_norm) under a flush schedule: every rank runs one
  // GRAD_NORM per update group, after its last backward work of the group (and its stages'
  // ALLREDUCEs) and before its first OPTIMIZER_STEP of it. The replay treats it as a
  // collective of all ranks (docs/ARCHITECTURE.md, "Gradient clipping").
  bool grad_norm = false;
  std::vector<std::vector<Action>> workers;  // by rank

  std::string name() const;
  std::string grid() const;     // rank x time grid (unit costs)
  std::string actions() const;  // per rank, the action list in the text form (compute only)
};

// Build the training IR of `steps` minibatches of the named kind, or the forward-only
// evaluation IR of `units` microbatches. grad_norm: insert the GRAD_NORM actions (only a
// flush schedule has them; an asynchronous one clips each stage's update locally).
Schedule make_schedule(const ScheduleDef& def, const Layout& layout, int64_t steps, int microbatches, bool grad_norm = false);
Schedule make_schedule(const std::string& name, const Layout& layout, int64_t steps, int microbatches, bool grad_norm = false);
Schedule make_eval_schedule(const Layout& layout, int64_t units);

// ---- replay: the one walk over the IR -------------------------------------------------

struct CostModel {
  // Seconds for a compute action of a worker (F, B, I, W, optimizer_step; grad_norm: its
  // local part, after the last rank arrived).
  std::function<double(int rank, const Action&)> compute;
  // Seconds from a send's post to its arrival (bytes of that message inside).
  std::function<double(int src, int dst, const Action&)> transfer;
  // Seconds of an allreduce among the replicas of `stage`, from the last arrival.
  std::function<double(int stage)> allreduce;
};
// Each rank's work per unit is F = I = W = 1 (fused B = 2), split evenly over the stages it
// holds (a rank of v chunks spends 1/v of that per chunk); everything else is free.
CostModel unit_costs(const Layout& layout);

struct ReplayEvent {
  int32_t index;  // action index in the worker's list
  double start, end;
};
struct Replay {
  bool ok = true;
  std::string error;  // deadlock or unmatched message, naming worker, action, microbatch, peer
  std::vector<std::vector<ReplayEvent>> events;  // by rank, one per action
  double makespan = 0;
};
Replay replay(const Schedule& s, const CostModel& costs);

// Validate: deadlock-free, every send received, every unit forwarded once per stage on the
// right replica and backwarded (B, or I then W) after its forward on the same worker,
// weight gradients in unit order, allreduces matched among replicas, and the version rule
// of the kind. Returns "" or the message naming worker and action.
std::string validate(const Schedule& s);

// The consistent cut at update boundary `version` (relative; a multiple of every stage's
// version stride): per rank, the number of its actions that run before the checkpoint
// (right after its last optimizer step producing `version`), and the indices of its sends
// made before the cut whose receives come after the receiver's cut ("crossing" messages:
// the sender saves their payload and sends them again on resume).
struct Cut {
  std::vector<size_t> position;
  std::vector<std::vector<size_t>> crossing;
};
Cut consistent_cut(const Schedule& s, int64_t version);

// Weight-version liveness of one stage on one worker: the most versions held at once under
// the store's policy (update in place when the latest version has no remaining readers,
// else copy).
int max_versions_held(const Schedule& s, int rank, int stage);
// Units of one stage in flight on a worker: forwarded and not yet done with their backward
// (B, or W when the backward is split, which keeps the activations until W).
int max_in_flight(const Schedule& s, int rank, int stage);
// Units of one stage on a worker between their I and their W (0 without a split backward):
// under full recomputation each holds a recompute buffer besides the one a F or B uses.
int max_between_i_and_w(const Schedule& s, int rank, int stage);
// Per action of a worker: a B or I whose stage bound no other unit's recompute buffer since
// that unit's F (no F, B or I of another unit of the stage in between). Under full
// recomputation its F's layout is still in the buffer and it recomputes nothing (StagePools).
std::vector<bool> backward_reuses_forward(const Schedule& s, int rank);
// A rank's peak activations over all its stages, in units of a whole rank's share of one
// microbatch (a stage of a v-chunk rank counts 1/v).
double peak_activations(const Schedule& s, int rank);

}  // namespace pt
