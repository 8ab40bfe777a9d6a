// The schedule registry: one entry per schedule kind, registered once beside its generator
// (src/schedule/kinds/*.cpp), as LAMMPS registers a pair style. Everything that lists or
// switches on schedules reads the entry: deck choices and docs/DECK.md, the setup formulas
// in summary.json, the validator's version rule, the planner's candidates, the simulator
// and the emulator. A generator emits compute actions only (F, B, I, W per rank, in order);
// make_schedule then inserts updates, assigns weight versions and lowers communication.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/schedule_ir.hpp"

namespace pt {

// How compute actions choose weight versions (docs/ARCHITECTURE.md, "Weight versions").
enum class VersionRule : uint8_t {
  flush,    // every action of update group g reads version g (one version)
  stash,    // forward reads the latest, backward the forward's (PipeDream weight stashing)
  vsync,    // every stage reads stage 0's choice, rounded to its update stride
  nostash,  // forward and backward read the latest (invalid gradients; an ablation)
  two_bw,   // minibatch t reads W(t-1) (PipeDream-2BW)
  none,     // evaluation: the latest, nothing updated
};

// How a stage's in-flight units and weight versions grow, for the planner's memory cap and
// summary.json's formulas. d = Layout::in_flight_depth(s), d0 = depth of stage 0 on a
// straight pipeline (p / r), U units per minibatch, r replicas: in flight / versions
//   one_f_one_b  min(d, ceil(U/r)) / 1      gpipe     ceil(U/r) / 1
//   pipedream    d / d                      two_bw    d / 2
//   zb_h1        min(max(d, d0), ceil(U/r)) / 1         (upper bounds: with few units
//   zb_h2        min(2 max(d, d0) - 1, ceil(U/r)) / 1    zb-h2 may keep zb-h1's order)
//   one_unit     1 / 1 (model-parallel)     no_stash  d / 1 (the ablation)
// For several stages per rank (looped, V) the generator's replay is the formula (-1).
enum class MemoryRule : uint8_t { one_f_one_b, gpipe, pipedream, two_bw, zb_h1, zb_h2, one_unit, no_stash, replay };

struct ScheduleDef {
  std::string name;  // deck name, e.g. "zb-h1"
  std::string doc;   // one line for docs/DECK.md and `pipetrain schedule --list`
  bool flush = true;                 // updates after whole minibatches; the pipeline drains there
  bool per_minibatch_units = false;  // a unit is a whole minibatch (the pipedream family)
  bool valid_gradients = true;       // false for the no-stash ablation
  bool split_backward = false;       // emits I and W instead of the fused B
  bool planner = true;               // a candidate of `plan` and split = "auto"
  bool deck_choice = true;           // a value of parallel.schedule
  Placement placement = Placement::contiguous;
  VersionRule versions = VersionRule::flush;
  MemoryRule memory = MemoryRule::one_f_one_b;
  // Fills S.workers with the compute actions (F, B, I, W; stage and unit set, version -1)
  // of every rank, in the order each rank runs them.
  std::function<void(Schedule& S)> generate;
  // Constraints on a layout and microbatch count: "" when it can run, else why not (named
  // values, for a located deck error).
  std::function<std::string(const Layout&, int microbatches)> check;
};

// Registration (at static initialisation): returns true; a second entry with one name is
// an internal error at start-up.
bool register_schedule(ScheduleDef def);
#define PT_REGISTER_SCHEDULE(id, ...) \
  namespace { [[maybe_unused]] const bool pt_schedule_registered_##id = ::pt::register_schedule(__VA_ARGS__); }

// The entry of a name; unknown names are bad input naming the choices (and a close one).
const ScheduleDef& schedule_def(const std::string& name);
const ScheduleDef* find_schedule(const std::string& name);
// The registered entries offered as parallel.schedule (deck_choice), sorted by name: every
// registered one today (the evaluation IR's entry is built apart, never registered).
std::vector<const ScheduleDef*> schedule_defs();
std::vector<std::string> schedule_names();
std::vector<std::string> planner_schedule_names();  // the entries with planner = true
// The placement a file records (plan.json, summary.json), or where it records none (files
// written before the field) the schedule's own: contiguous for every kind with one stage
// per rank. Bad input naming `where` for an unknown schedule or placement.
Placement recorded_placement(const std::string& recorded, const std::string& schedule, const std::string& where);

// ---- the memory rules (summary.json formulas, planner) ---------------------------------
// Units in flight and versions held for depth d, stage 0's depth d0, r replicas and U units
// per minibatch (-1: only the replay knows); and the same for a stage of a layout.
int memory_in_flight(MemoryRule rule, int d, int d0, int r, int U);
int memory_versions(MemoryRule rule, int d);
int rule_in_flight(MemoryRule rule, const Layout& l, int stage, int units_per_minibatch);
int rule_versions(MemoryRule rule, const Layout& l, int stage);

// ---- helpers for generators --------------------------------------------------------------

// The units of stage `stage` that replica `replica` runs, ascending (m = replica mod r).
std::vector<int64_t> replica_units(const Schedule& S, int stage, int replica);
// A compute action (version and peer unset).
Action compute_action(Op op, int stage, int64_t mb);
// The greedy per-worker rule of the classic schedules (one stage per rank): forward the
// next unit while fewer than `depth` are in flight, the weight version it would read exists
// and (flush) it belongs to the current update group; otherwise backward the oldest.
void generate_depth_rule(Schedule& S, int depth_override /* 0: in_flight_depth */);
// The unit-cost makespan of a generator's compute actions (the passes run on a copy), for
// generators that choose between candidate orders.
double unit_makespan(const Schedule& compute_only);
// A list scheduler over all workers with unit costs: each round starts, over every worker,
// the ready action that can start earliest (ties between workers to the lower rank), with
// priority only breaking ties of start time within a worker: I or B first (shallowest stage
// first), then F while the rank's activations stay under `cap(rank)` chunk-units (deepest
// stage first), then the oldest pending W. Used by generators whose order is easiest to
// state as a policy (zb-v).
void generate_list_scheduled(Schedule& S, const std::function<int(int rank)>& cap);

}  // namespace pt
