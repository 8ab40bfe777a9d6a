// The planner: PipeDream's dynamic program over the layer chain (stage split, replication,
// hierarchical levels, a per-rank memory cap from the schedule's in-flight depth), then the
// simulator over candidate schedules and microbatch counts; plus the graph.txt converter.
// docs/PLANNER.md describes the model, the DP and its complexity.
//
// For `parallel.split = "auto"` (the trainer):
//
//   Profile prof = ...;                                   // measured, or Profile::load(deck.parallel.profile)
//   ClusterModel net = ClusterModel::from_deck(deck, prof);
//   PlanOptions o;  o.memory_cap = deck.cluster.memory;
//   Plan plan = choose_plan(prof, net, world_size, deck.train.batch_size, o);
//   if (!plan.ok) fail(..., plan.error);
//   plan.split()      -> first layer of stages 2..K (deck parallel.split)
//   plan.replicas()   -> replicas per stage, stage-major (deck parallel.replicas)
//   plan.schedule     -> deck parallel.schedule name (a schedule registry entry)
//   plan.microbatches -> deck parallel.microbatches (divides the batch size; 1 for pipedream)
//   plan.sim.time_per_sample, plan.sim.bubble, plan.to_json() -> the prediction to log and
//                        store beside the measured time per sample.
// choose_plan is deterministic (no randomness, no timing), so every rank that calls it
// with the same profile gets the same plan; still, broadcast rank 0's profile first
// (profile measurements differ per rank).
#pragma once
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/profile.hpp"
#include "pipetrain/schedule_ir.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "pipetrain/sim.hpp"

namespace pt {

// ---- the dynamic program's cost model ---------------------------------------------------

// How a stage's in-flight units and weight versions follow from its depth
// d = Layout::in_flight_depth (ranks from this stage to the end / its replicas), for r
// replicas and U units per minibatch: the schedule's MemoryRule (its registry entry,
// schedule_registry.hpp; each rule's formula is written beside its entry in
// src/schedule/kinds/), checked against max_in_flight / max_versions_held in
// tests/unit/test_planner.cpp. E.g. 1f1b min(d, ceil(U/r)) / 1, pipedream d / d.

// A layer chain for one schedule kind, microbatch count and minibatch size.
struct ChainCosts {
  std::vector<double> compute;    // per layer: forward + backward seconds per minibatch
  std::vector<double> params;     // per layer: parameter bytes
  std::vector<double> opt_state;  // per layer: optimizer-state bytes
  std::vector<double> stash;      // per layer: bytes kept for backward, per unit
  std::vector<double> out;        // per layer: output bytes per unit (crosses the cut after it)
  double input_bytes = 0;         // model input per unit
  double optimizer_s_per_byte = 0;
  int units = 1;           // units per minibatch (the entry's units_per_minibatch)
  bool amortized = false;  // minibatch units (per_minibatch_units): one allreduce and step per `replicas` minibatches
  bool serial_allreduce = false;  // T = compute + allreduce instead of max (no overlap, as this runtime)
  const MemoryRule* rule = nullptr;  // the entry's; none (only the replay knows): d in flight, 1 version
  int ranks = 1;  // the job's ranks (the zero-bubble rules' deepest depth)
  bool bf16 = false;  // the profile's precision is bf16 (messages 2 bytes per value, weights as the WeightStore keeps them)
  // The memory model (memory_model.hpp): a stage's sizes from `memory` (model_footprints of the
  // deck's model: exact) or, when null, from the per-layer bytes above (chain_footprints),
  // for units of unit_samples samples; rank terms from memory_shared.
  std::shared_ptr<const FootprintSource> memory;
  MemoryShared memory_shared;
  int64_t unit_samples = 1;
  bool split_backward = false;  // the entry's (slots keep output gradients)
  bool flush = true;            // the entry's (an asynchronous schedule's checkpoint may keep units)
  // parallel.recompute of every stage (from_profile's): compute adds the forward again (full)
  // or the measured selective backward; stash is the selective stash; a full stage's unit
  // keeps its input and output and one recompute buffer (more with a split backward).
  Recompute recompute = Recompute::none;

  int layers() const { return static_cast<int>(compute.size()); }
  double in_bytes(int i) const { return i == 0 ? input_bytes : out[static_cast<size_t>(i) - 1]; }
  static ChainCosts from_profile(const Profile& p, const ScheduleDef& kind, int microbatches, int64_t batch_size,
                                 Recompute recompute = Recompute::none);
};

int rule_in_flight(const ChainCosts& c, int depth, int replicas);
int rule_versions(const ChainCosts& c, int depth);

// The DP's model of one layout (stages = contiguous layer ranges on contiguous rank ranges,
// stage-major), per minibatch:
//   stage s (layers i..j-1, r replicas on ranks o..o+r-1, level l_s = level_of(o, o+r-1)):
//     C = sum of compute, P = sum of params, AR = allreduce_seconds(l_s, r, P), OPT = opt/byte x P
//     T_s = max(C ceil(U/r)/U + OPT, AR)        (microbatch units: one allreduce per minibatch)
//     T_s = max((C + OPT)/r, AR/r)               (minibatch units: one per r minibatches)
//     (with serial_allreduce the max is a sum: the allreduce does not overlap compute)
//   cut at layer j between stage s and s+1: each side's ranks carry its share,
//     out-term = 2U p2p_seconds(level_of(o_s, o_{s+1}), out[j-1]) / r_s
//     in-term  = 2U p2p_seconds(level_of(o_{s+1} - 1, o_{s+1} + r_{s+1} - 1), out[j-1]) / r_{s+1}
//   objective = the largest T_s and cut term (the slowest pipeline stage, PipeDream's
//   objective); memory of stage s with n in flight and v versions (rules above): the memory
//   model's total for a rank holding that stage (memory_model.hpp: stage_memory of its
//   footprint plus add_rank_terms; the reporter's gather on the last stage), which must not
//   exceed the cap (0 = no cap) on every stage.
double stage_memory(const ChainCosts& c, int i, int j, int r, int depth);

struct LayoutCost {
  double objective = 0;  // +inf when a stage exceeds the memory cap
  bool fits = true;
  double max_memory = 0;
  std::vector<double> stage_time, stage_memory, cut_time;  // cut_time[s]: max of the two terms of cut s|s+1
};
LayoutCost evaluate_layout(const ChainCosts& c, const ClusterModel& net, const Layout& layout, double memory_cap);

// Replica counts the DP tries for a stage when m ranks remain (the stage starts at rank
// offset o = N - m):
//   all: 1..m (exact over every layout);  one: 1 (the straight pipeline);
//   powers_of_two: 1, 2, 4, ... <= m that divide o, i.e. power-of-two groups aligned to
//     their size (buddy placement): such a group lies inside the smallest power-of-two
//     block that holds it, so with power-of-two level sizes no stage straddles a server
//     it does not fill; lcm(replicas) = the largest count (the pipedream schedules need
//     the minibatch count to be a multiple of it); about 2 choices per state on average.
//   automatic: all when the job has at most exact_ranks_limit ranks, else powers_of_two.
enum class ReplicaSet { automatic, all, powers_of_two, one };

struct DpOptions {
  double memory_cap = 0;  // bytes per rank; 0 = none
  ReplicaSet replicas = ReplicaSet::automatic;
  int exact_ranks_limit = 64;
};

struct DpResult {
  bool ok = false;
  double objective = std::numeric_limits<double>::infinity();
  std::vector<int> first;     // first layer of each stage (first[0] = 0)
  std::vector<int> replicas;  // per stage
  int64_t states = 0, evaluations = 0;  // work done
  Layout layout(int layers) const { return Layout::make(first, layers, replicas); }
};

// Minimise the objective over every split and replica assignment using all `ranks` ranks.
// Suffix DP: B[i][m] = best for layers i..L-1 on the last m ranks; a stage knows its ranks
// (offset N - m) and its depth ceil(m / r), so levels and the memory cap are exact.
DpResult plan_dp(const ChainCosts& c, const ClusterModel& net, int ranks, const DpOptions& o);

// ---- choosing a plan: DP per candidate schedule, then the simulator ---------------------

struct PlanOptions {
  // the memory model's stage sizes and rank terms (ChainCosts::memory, SimConfig::memory):
  // model_footprints of the deck's model when there is one; null: the profile's bytes
  std::shared_ptr<const FootprintSource> memory;
  MemoryShared memory_shared;
  // candidate schedules: every registry entry marked as a planner candidate (schedule_registry.hpp)
  std::vector<std::string> schedules = planner_schedule_names();
  std::vector<int> microbatches;  // candidates for flush kinds and 2bw; empty = divisors of the batch (up to 4N, <= 8 of them)
  double memory_cap = 0;          // bytes per rank; 0 = none
  // parallel.recompute candidates, the same mode on every stage: every schedule, split,
  // replication and M is planned under each, and the fastest plan that fits wins. Only
  // `none` when the deck sets parallel.recompute (the user's choice) or without a cap (a
  // recomputation never makes a step faster). `recompute`: the mode being planned.
  std::vector<Recompute> recompute_modes = {Recompute::none};
  Recompute recompute = Recompute::none;
  ReplicaSet replicas = ReplicaSet::automatic;
  bool baselines = true;          // also evaluate bsp and the straight pipeline (1 replica per stage)
  int64_t bsp_batch = 0;          // minibatch of the bsp baseline; 0 = the plan's. PipeDream's data-parallel
                                  // baseline runs the profiled minibatch on every rank: ranks x batch.
  bool serial_variant = true;     // small jobs: also run the DP with serial_allreduce (the simulator arbitrates)
  int64_t sim_budget = 2000000;   // most IR actions one candidate's replay may have (SimConfig::max_actions)
  int refine_steps = 150;         // small jobs: simulations spent refining each schedule's best layout (0 = off)
  // Statistical efficiency: a candidate whose update averages more samples than another's (a
  // pipedream-family stage with r replicas averages r minibatches per update) needs more
  // samples to reach the same loss; it wins only when predicted faster by more than this
  // fraction (docs/PLANNER.md: r = 2 on tinygpt needed 1.32x the samples). 0 = time alone.
  double batch_growth_margin = 0.10;
  // why the model cannot train `def` on `layout` (e.g. tie_conflict), "" when it can; a
  // vetoed candidate is listed with the reason and never chosen. Empty function = no veto.
  std::function<std::string(const ScheduleDef& def, const Layout& layout)> veto;
  // parallel.tensor of the plan being made: every rank of its layouts stands for t ranks, the
  // profile and memory source are one part's (SimConfig::tensor)
  int tensor = 1;
};

struct PlanCandidate {
  std::string label;     // "plan", "bsp", "straight"
  std::string schedule;  // deck name
  int microbatches = 1;
  int64_t batch_size = 0;
  Layout layout;
  double dp_objective = 0;  // the DP's slowest-stage time per minibatch (0 for bsp)
  SimResult sim;            // without the IR
  bool fits = true;
  bool no_split_fits = false;  // the DP found no layout under the memory cap (not simulated)
  Recompute recompute = Recompute::none;  // parallel.recompute of every stage
  std::string note;         // why it was skipped, if it was
  // samples whose gradients one weight update averages: the minibatch for flush kinds, 2bw and
  // bsp; r minibatches for a pipedream-family stage of r replicas (the largest version stride)
  int64_t samples_per_update() const;
};

struct Plan {
  bool ok = false;
  std::string error;
  int ranks = 0;
  int layers = 0;
  int64_t batch_size = 0;
  double memory_cap = 0;
  std::string profile_source, cluster;
  // the choice
  std::string schedule;
  int microbatches = 1;
  Layout layout;
  double dp_objective = 0;
  SimResult sim;
  bool fits = true;
  bool no_split_fits = false;  // the DP found no layout under the memory cap (not simulated)
  Recompute recompute = Recompute::none;  // parallel.recompute of every stage
  int tensor = 1;  // parallel.tensor: the layout's ranks are groups of this many (choose_tensor_plan)
  // baselines and everything evaluated
  bool has_bsp = false, has_straight = false;
  PlanCandidate bsp, straight;
  std::vector<PlanCandidate> candidates;
  std::string choice_note;  // set when batch_growth_margin chose a slower candidate: which and why
  double plan_seconds = 0;  // wall time of choose_plan
  int64_t dp_evaluations = 0;
  // which model chose the layout: "pipetrain" (choose_plan) or "pipedream" (plan_pipedream,
  // whose own prediction, a JSON object, is in cost_model_json and goes to plan.json)
  std::string cost_model = "pipetrain";
  std::string cost_model_json;

  std::vector<int> split() const;     // first layer of stages 2..K
  std::vector<int> replicas() const { return layout.replicas; }
  double speedup_vs_bsp() const;       // bsp time per sample / plan time per sample
  double comm_reduction_vs_bsp() const;  // 1 - network bytes per sample / bsp's
  std::string to_json() const;
  std::string table() const;  // chosen plan vs bsp vs straight, then every candidate
};

// The recompute modes the planner may choose for `deck` (PlanOptions::recompute_modes): the
// deck's parallel.recompute when it sets one (its first value: the planner chooses one mode
// for every stage), else none, selective and full.
std::vector<Recompute> planner_recompute_modes(const Deck& deck);

Plan choose_plan(const Profile& p, const ClusterModel& net, int ranks, int64_t batch_size, const PlanOptions& o);

// parallel.tensor = 0 ("auto", with split = "auto"): t as a decision beside the rest. One
// candidate per t: the profile of one part of the split layers (Profile::tensor = t) and the
// memory source of that part's model; each is planned on ranks / t ranks (choose_plan with
// PlanOptions::tensor = t, so the simulator adds the tensor sums) and the fastest plan that
// fits wins, t = 1 on a tie. A candidate whose t does not divide the ranks is skipped. The
// plan's choice_note says which t were tried and why the others lost; with none fitting the
// error lists each t's.
struct TensorCandidate {
  int t = 1;
  Profile profile;
  std::shared_ptr<const FootprintSource> memory;
  MemoryShared memory_shared;
};
Plan choose_tensor_plan(const std::vector<TensorCandidate>& candidates, const ClusterModel& net, int ranks, int64_t batch_size,
                        PlanOptions o);

// plan.json read back (simulate --plan, train with a stored plan).
struct PlanFile {
  std::string schedule;
  int microbatches = 1;
  int64_t batch_size = 0;
  int layers = 0;
  std::vector<int> split, replicas;  // replicas per rank group
  // "placement"; plans written before the field: the schedule's own (recorded_placement),
  // contiguous for every kind with one stage per rank
  Placement placement = Placement::contiguous;
  Layout layout() const;
  static PlanFile load(const std::string& path);
};

// A synthetic layer chain for planner benchmarks and tests (deterministic in seed):
// conv-like front layers with large activations and few parameters, dense back layers
// with the reverse; forward 0.2-2 ms, backward 2x forward, at microbatch 32.
Profile synthetic_chain(int layers, uint64_t seed);

// ---- PipeDream's own cost model (`plan --cost-model pipedream`) ------------------------
// Its name as --cost-model and plan.json's cost_model say it; the schedule it plans is the
// registry's (flagged_schedule(&ScheduleDef::pipedream_model)).
constexpr const char* kPipeDreamCostModel = "pipedream";
// A reimplementation of the dynamic program of PipeDream's optimizer
// (optimizer/optimizer_graph_hierarchical.py in msr-fiddle/pipedream), formulas and quirks
// included, over pipetrain's layer chain (graph.txt DAGs linearised as above, not
// PipeDream's antichain states). docs/PLANNER.md "PipeDream's cost model" gives the formulas
// and where they differ from pipetrain's; tests/unit/test_pipedream_model.cpp checks the
// partitions against PipeDream's own output (tests/fixtures/pipedream_partitions.json).

// Per layer, per minibatch (the profile's values scaled linearly to the minibatch).
struct PipeDreamChain {
  std::vector<double> compute;     // forward + backward seconds
  std::vector<double> activation;  // bytes stashed (PipeDream's activation_size: memory only)
  std::vector<double> output;      // bytes crossing the cut after the layer (output_activation_size)
  std::vector<double> params;      // parameter bytes
  int layers() const { return static_cast<int>(compute.size()); }
  static PipeDreamChain from_profile(const Profile& p, int64_t batch_size);
};

// The optimizer's command-line options.
struct PipeDreamOptions {
  std::vector<int> machines;       // per level, innermost first (-n: machines per component)
  std::vector<double> bandwidths;  // per level, bytes/s (-b)
  double memory_size = 0;          // > 0: --use_memory_constraint with -s memory_size
  bool straight_pipeline = false;  // --straight_pipeline: one machine per stage
  bool use_fewer_machines = false;  // --use_fewer_machines
  double activation_compression_ratio = 0;  // > 0: pipeline transfers / ratio enter the objective
  // pipetrain's levels (cumulative ranks) as PipeDream's per-level machine counts for
  // `ranks` ranks; throws pt::Error (bad_input) when a level size does not divide.
  static PipeDreamOptions from_cluster(const ClusterModel& net, int ranks);
};

struct PipeDreamStage {
  int first = 0, end = 0;  // layers first..end-1
  int replicas = 1;        // at this level
  double compute = 0;      // the layers' compute per minibatch (as PipeDream prints it)
};

struct PipeDreamPlan {
  bool ok = false;
  std::string error;
  double time_per_minibatch = 0;   // PipeDream's "time per stage in pipeline" (its objective)
  double single_machine_time = 0;  // every layer on one machine
  double data_parallel_time = 0;   // its data-parallel estimate on every machine
  // per level, innermost first: that level's stages, each outer stage refined in order
  std::vector<std::vector<PipeDreamStage>> levels;
  Layout layout;  // the innermost stages; replicas = the product over the levels
  int unused_machines = 0;  // with use_fewer_machines
};

PipeDreamPlan plan_pipedream(const PipeDreamChain& c, const PipeDreamOptions& o);

// ---- PipeDream graph.txt profiles -------------------------------------------------------

struct GraphTxt {
  struct Node {
    std::string id, desc;
    double forward_ms = 0, backward_ms = 0, activation_bytes = 0, parameter_bytes = 0;
    bool input = false;  // desc starts with "Input"
  };
  std::vector<Node> nodes;                  // in file order
  std::vector<std::pair<int, int>> edges;   // indices into nodes, from -> to
};
GraphTxt read_graph_txt(const std::string& text, const std::string& path);

// Linearisation by topological frontiers: the Input nodes are dropped (their bytes become
// the profile's input_bytes), the other nodes are ordered topologically (greedy: among the
// ready nodes, the one that leaves the smallest frontier, ties by file order), layer k =
// the k-th node, and layer k's output_bytes = the frontier after it: the summed
// activations of nodes in the prefix 0..k that feed a node after k. A cut after layer k
// then carries exactly the tensors that cross it. For a chain the order is the chain and
// the frontier is the node's own output.
struct Linearised {
  Profile profile;
  std::vector<int> order;  // node index per layer
  int inputs = 0;          // Input nodes dropped
  bool chain = false;      // every layer feeds the next (the topological order is unique)
};
Linearised linearise_graph(const GraphTxt& g, const std::string& path);

}  // namespace pt
