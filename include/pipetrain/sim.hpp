// The simulator: the schedule IR replayed (pt::replay, the one walk over the IR) with a
// cost model built from a Profile and a cluster model. It predicts time per minibatch,
// bubble fraction, peak memory per worker and bytes per sample, and draws the same Chrome
// trace as a real run. docs/PLANNER.md defines every quantity.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/deck.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/profile.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {

// The network: levels innermost first. Level k groups ranks into aligned blocks of
// `ranks` consecutive ranks (cumulative: a level-1 component of 16 ranks holds two level-0
// components of 8); two ranks talk at the innermost level whose block holds both, at that
// level's bandwidth and latency. The outermost level covers every rank whatever its size.
// A measured network model (pipetrain profile under mpirun) is one level with the fitted
// bandwidth/latency whose allreduce times come from the measured table.
struct ClusterModel {
  struct Level {
    int64_t ranks = 1;       // ranks in one component of this level
    double bandwidth = 0;    // bytes/s between the level-(k-1) components inside it
    double latency = 0;      // s per message
  };
  std::vector<Level> levels;
  bool measured = false;
  NetworkModel network;  // when measured: the allreduce table

  // Innermost level whose component holds ranks a..b (a <= b); -1 when a == b.
  int level_of(int a, int b) const;
  // One message of `bytes` at `level` (level < 0: same rank, free).
  double p2p_seconds(int level, double bytes) const;
  // Ring allreduce of `bytes` among r ranks whose span crosses `level`:
  // 2(r-1)/r * bytes / bandwidth + 2(r-1) * latency, or the measured table scaled by the
  // ring factor when the network was measured. 0 for r <= 1.
  double allreduce_seconds(int level, int r, double bytes) const;
  std::string describe() const;

  static ClusterModel single(double bandwidth, double latency = 0);
  static ClusterModel from_levels(const std::vector<ClusterLevel>& levels);
  static ClusterModel from_network(const NetworkModel& net);
  // [[cluster.levels]] when the deck has them, else the profile's measured network;
  // throws Exit::bad_input when neither exists.
  static ClusterModel from_deck(const Deck& deck, const Profile& profile);
};

// What to simulate: a layout, a schedule kind and its microbatch count, the minibatch size.
struct SimConfig {
  const ScheduleDef* def = &flagged_schedule(&ScheduleDef::deck_default);
  Layout layout;
  int microbatches = 1;     // the deck's M; simulate() takes the entry's units_per_minibatch of it
  // parallel.tensor: each rank of the layout is t ranks, each running one part (the
  // profile's costs are one part's, Profile::tensor); every forward and backward of a split
  // layer adds its tensor sums (LayerProfile::tensor_sums), each an allreduce among t ranks
  // at the innermost level
  int tensor = 1;
  int64_t batch_size = 0;   // samples per minibatch; 0 = the profile's microbatch
  double batch_samples() const { return static_cast<double>(batch_size); }
  int64_t minibatches = 0;  // minibatches to replay; 0 = automatic (warm-up + window + drain)
  bool keep_schedule = true;  // keep the IR and the replay (for traces); off saves memory
  // Refuse (ok = false) when the IR would exceed this many actions even with the fewest
  // minibatches that still give a steady-state window; 0 = no limit.
  int64_t max_actions = 0;
  // The memory model's stage sizes (memory_model.hpp): model_footprints of the deck's model
  // when there is one (exact), else null: profile_footprints of the profile; and the rank
  // terms (data, measured base, checkpoints).
  std::shared_ptr<const FootprintSource> memory;
  MemoryShared memory_shared;
  // parallel.recompute per stage (empty: none everywhere; TrainSetup::recompute's shape):
  // B and I cost the recomputation too, units in flight keep less (docs/PLANNER.md)
  std::vector<Recompute> recompute;
  Recompute recompute_of(int stage) const {
    return recompute.empty() ? Recompute::none : recompute.at(static_cast<size_t>(stage));
  }
};

struct StagePrediction {
  int first = 0, last = 0;  // layers first..last
  int replicas = 1;
  double samples_per_unit = 0;
  double forward_s = 0, backward_s = 0, optimizer_s = 0;  // per unit / per step
  double allreduce_s = 0;   // one allreduce among the replicas
  double busy_fraction = 0;  // compute / window, mean over replicas
  RankMemory memory;        // the largest replica's rank (memory_model.hpp)
};

struct SimResult {
  bool ok = true;
  std::string error;
  const ScheduleDef* def = nullptr;
  Layout layout;
  int microbatches = 1;
  int64_t batch_size = 0;
  int64_t minibatches = 0;        // replayed
  int64_t warmup = 0, window = 0;  // minibatches before the window, in it
  double window_start = 0, window_end = 0;
  double time_per_minibatch = 0;  // steady state: window length / window minibatches
  double time_per_sample = 0;
  double samples_per_s = 0;
  double bubble = 0;              // mean over workers of the idle share of the window
  double makespan = 0;            // whole replay, warm-up and drain included
  std::vector<RankMemory> memory;  // per rank: the memory model with this replay's IR
  double max_memory = 0;
  double bytes_p2p_per_sample = 0;        // activations + gradients sent (as summary.json counts)
  double bytes_allreduce_per_sample = 0;  // allreduce payload, summed over replicas (as summary.json)
  double network_bytes_per_sample = 0;    // p2p + ring allreduce traffic 2(r-1)/r x payload per replica
  std::vector<StagePrediction> stages;
  Schedule schedule;  // when keep_schedule
  Replay replay;
};

// The replay's cost model for a layout: compute = the stage's layers' forward/backward at
// the profile's microbatch scaled linearly to the unit's samples, optimizer =
// optimizer_s_per_byte x stage parameter bytes, transfer = latency + bytes/bandwidth at the
// level the two ranks' communication crosses, allreduce = the cluster's ring/measured cost.
// With the IR (`ir`), a B or I that finds its F's layout still in its recompute buffer
// (backward_reuses_forward) costs no recomputation under full.
CostModel make_cost_model(const Profile& p, const ClusterModel& c, const SimConfig& cfg, const Schedule* ir = nullptr);
// Samples per unit (one microbatch, or one minibatch for minibatch units: the entry's unit size).
double unit_samples(const SimConfig& cfg, const Profile& p);

SimResult simulate(const Profile& p, const ClusterModel& c, const SimConfig& cfg);
std::string sim_trace_json(const SimResult& r, const std::string& title);
std::string sim_report(const SimResult& r);  // human-readable summary and per-stage table

// --compare: set a prediction beside a measured run directory (summary.json, trace.json).
struct MeasuredRun {
  std::string schedule;
  std::vector<int> split, replicas;  // replicas per rank group
  Placement placement = Placement::contiguous;  // "placement" (absent: the schedule's own, recorded_placement)
  int microbatches = 1, ranks = 1, tensor = 1;  // tensor: summary.json's tensor_parallel
  int64_t batch_size = 0, steps = 0;
  double train_wall_s = 0, bubble = 0, bytes_p2p_per_sample = 0, bytes_allreduce_per_sample = 0;
  std::vector<double> forward_s, backward_s;  // per stage: mean per unit from trace.json (B, or I + W)
  std::vector<int64_t> units;                 // per stage: F events counted
  std::vector<Recompute> recompute;           // per stage (summary.json's "recompute"; empty: none)
  static MeasuredRun load(const std::string& run_dir);
  // The run's layout (split, replicas, placement) over a model of `layers` layers.
  Layout layout(int layers) const;
};
std::string compare_report(const SimResult& predicted, const MeasuredRun& measured);

}  // namespace pt
