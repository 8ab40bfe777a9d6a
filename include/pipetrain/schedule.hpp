// The schedule IR: for every worker (stage, replica), the ordered list of actions it runs.
// Generators build it per schedule kind; the replay engine walks it with a cost model,
// matching messages and collectives (the validator proves it deadlock-free this way, the
// simulator predicts timings, the grid printer draws it). No schedule logic lives elsewhere.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/deck.hpp"

namespace pt {

// Stages and replicas. Ranks are stage-major: stage 0's replicas first.
struct Layout {
  std::vector<int> first;     // first layer of each stage, plus the layer count at the end
  std::vector<int> replicas;  // per stage

  int stages() const { return static_cast<int>(replicas.size()); }
  int ranks() const;
  int rank_of(int stage, int replica) const;
  int stage_of(int rank) const;
  int replica_of(int rank) const;
  int first_layer(int s) const { return first[static_cast<size_t>(s)]; }
  int end_layer(int s) const { return first[static_cast<size_t>(s) + 1]; }
  int replica_for(int stage, int64_t mb) const { return static_cast<int>(mb % replicas[static_cast<size_t>(stage)]); }
  // Ranks in stages s..K-1 divided by the replicas of s, rounded up: the minibatches a
  // replica of s keeps in flight in 1F1B (PipeDream's NOAM for the input stage).
  int in_flight_depth(int s) const;
  std::string str() const;        // "2 stages: layers 0-1 | 2-6, replicas 1-1"
  std::string replication() const;  // "2-1-1"

  // From the deck's [parallel] section for `ranks` MPI ranks and a model of `layers` layers.
  static Layout from_deck(const Deck& d, int layers, int ranks);
  static Layout make(const std::vector<int>& first_layers, int layers, const std::vector<int>& replicas);
};

enum class Op : uint8_t { forward, backward, send_act, recv_act, send_grad, recv_grad, allreduce, optimizer_step };
const char* op_name(Op op);  // "FORWARD", ...
bool is_compute(Op op);

struct Action {
  Op op;
  int32_t mb;       // microbatch id within the schedule (optimizer_step/allreduce: update group)
  int32_t version;  // forward/backward: weight version read; optimizer_step: version produced
  int32_t peer;     // communication: peer rank; otherwise -1
};

enum class ScheduleKind { gpipe, one_f_one_b, model_parallel, bsp, pipedream, pipedream_vsync, pipedream_nostash, two_bw, eval };
ScheduleKind schedule_kind(const std::string& name);  // deck name -> kind
const char* schedule_name(ScheduleKind k);
bool is_flush(ScheduleKind k);   // gpipe, 1f1b, model-parallel, bsp: one version, update after the whole minibatch
bool is_async(ScheduleKind k);   // pipedream family and 2bw: no flush

struct Schedule {
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  Layout layout;
  int64_t steps = 0;         // minibatches (optimizer steps of the model) covered
  int microbatches = 1;      // units per minibatch (1 for the pipedream family)
  int64_t units() const { return steps * microbatches; }
  // Update groups: the units whose gradients one optimizer step of stage s applies.
  int64_t group_of(int stage, int64_t mb) const;
  int64_t groups(int stage) const;
  // Version ids count minibatches applied; a step of stage s adds version_stride(s).
  int64_t version_stride(int stage) const;
  std::vector<std::vector<Action>> workers;  // by rank

  std::string grid() const;  // rank x time grid (unit costs)
};

// Build the training IR of `steps` minibatches, or the forward-only evaluation IR of
// `units` microbatches (kind eval).
Schedule make_schedule(ScheduleKind kind, const Layout& layout, int64_t steps, int microbatches);
Schedule make_eval_schedule(const Layout& layout, int64_t units);

// ---- replay: the one walk over the IR -------------------------------------------------

struct CostModel {
  // Seconds for a compute action of a worker (forward/backward/optimizer_step).
  std::function<double(int rank, const Action&)> compute;
  // Seconds from a send's post to its arrival (bytes of that message inside).
  std::function<double(int src, int dst, const Action&)> transfer;
  // Seconds of an allreduce among the replicas of `stage`, from the last arrival.
  std::function<double(int stage)> allreduce;
};
CostModel unit_costs();  // forward 1, backward 2, everything else 0

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

// Validate: deadlock-free, every send received, every microbatch forwarded once per stage
// on the right replica and backwarded after its forward on the same worker, allreduces
// matched among replicas, and the version rules of the kind. Throws Exit::internal with
// a message naming worker and action (a generator bug), or returns the message.
std::string validate(const Schedule& s);

// The consistent cut at update boundary `version` (relative; a multiple of every stage's
// version stride): per rank, the number of its actions that run before the checkpoint
// (right after its optimizer step producing `version`), and the indices of its sends made
// before the cut whose receives come after the receiver's cut ("crossing" messages: the
// sender saves their payload and sends them again on resume).
struct Cut {
  std::vector<size_t> position;
  std::vector<std::vector<size_t>> crossing;
};
Cut consistent_cut(const Schedule& s, int64_t version);

// Weight-version liveness on one worker: the most versions held at once under the store's
// policy (update in place when the latest version has no remaining readers, else copy).
int max_versions_held(const Schedule& s, int rank);
// Most microbatches in flight (forwarded, not yet backwarded) on one worker.
int max_in_flight(const Schedule& s, int rank);

}  // namespace pt
