// The schedule registry: one entry per schedule kind, registered once beside its generator
// (src/schedule/kinds/*.cpp), as LAMMPS registers a pair style. Every rule about a schedule
// lives in its entry: its stage count and placement, the unit (a microbatch or a whole
// minibatch) and the update stride, the version rule, the memory rule, flush or
// asynchronous, its constraints, its generator. Nothing else names a schedule: the deck and
// Layout::from_deck, TrainSetup (and summary.json's formulas), make_schedule and the
// validator, the planner, the simulator, the emulator and the stability words all ask the
// entry. A generator emits compute actions only (F, B, I, W per rank, in order);
// make_schedule then inserts updates, assigns weight versions and lowers communication.
//
// Adding a schedule = one new entry in one kinds/ file (docs/ARCHITECTURE.md, "The schedule
// registry"): its generator, its flags, a VersionRule (flush_versions() unless it updates
// without a flush) and a MemoryRule (none: only the generated schedule's replay knows).
#pragma once
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/schedule_ir.hpp"

namespace pt {

// ---- the version rule: how compute actions choose weight versions ------------------------
// (docs/ARCHITECTURE.md, "Weight versions"). Version ids count minibatches applied to a stage.

// What an action of the IR asks: the version `op` of `unit` on `stage` reads.
struct VersionQuery {
  const Schedule& S;
  Op op;            // F, B, I or W
  int stage;
  int64_t unit;
  int64_t latest;   // the stage's latest version on this worker
  int32_t forward;  // the version the unit's forward read on this stage (backward actions; -1 before it)
  int32_t stage0;   // the version stage 0's forward of the unit read (vertical sync)
};

// What the emulator's closed form is given: unit m of a segment (counted from its start) on
// a stage of r replicas and in-flight depth d (Layout::in_flight_depth), stage 0's r0 and d0,
// and M units per minibatch.
struct EmulatedUnit {
  int64_t m;
  int r, d, r0, d0, M;
};
struct VersionPair {
  int64_t forward, backward;  // relative to the segment's first version
};

struct VersionRule {
  std::function<int32_t(const VersionQuery&)> read;          // the IR's rule: assign_versions, the depth rule, the validator
  std::function<VersionPair(const EmulatedUnit&)> formula;   // the same rule as a formula of m, for `pipetrain emulate`
  std::function<std::string(int32_t read, int32_t want, int32_t forward)> violation;  // the validator's words; unset: generic
  int staleness = 0;  // updates a gradient's weights lag the weights it is applied to: fixed (flush 0, 2bw 1), or -1: K-1 on K stages
};
// The flush rule (kinds/classic.cpp): every action of update group g reads version g.
VersionRule flush_versions();

// ---- the memory rule: in-flight units and weight versions a stage holds -------------------
// For summary.json's formulas, the planner's memory cap and its DP. With d = the stage's
// in-flight depth, d0 = stage 0's (on a straight pipeline, p / r), r replicas and U units per
// minibatch. Each rule is written beside its entries in their kinds/ file, one object that
// entries sharing it point to; its values equal the generated schedules' max_in_flight /
// max_versions_held or bound them from above (tests/unit/test_schedule.cpp, test_planner.cpp).
struct MemoryRule {
  std::function<int(int d, int d0, int r, int U)> in_flight;  // units in flight
  std::function<int(int d)> versions;                          // weight versions held
  bool least = false;  // never more units or versions than any other rule (1f1b): the planner reuses its DP layouts
};

// ---- the entry -----------------------------------------------------------------------------

struct ScheduleDef {
  std::string name;                  // deck name, e.g. "zb-h1"
  std::string doc;                   // one line for docs/DECK.md and `pipetrain schedule --list`
  bool flush = true;                 // updates after whole minibatches, the pipeline drains there (false: asynchronous)
  bool per_minibatch_units = false;  // a unit is a whole minibatch; a stage of r replicas updates every r minibatches
  bool valid_gradients = true;       // false for the no-stash ablation (the run says INVALID)
  bool split_backward = false;       // emits I and W instead of the fused B
  bool planner = true;               // a candidate of `plan` and split = "auto"
  bool deck_choice = true;           // a value of parallel.schedule
  bool training = true;              // false only for the evaluation IR (forward only; built apart, never registered)
  Placement placement = Placement::contiguous;  // how its stages sit on rank groups (Layout)
  int stages = 0;                    // the stage count it needs, 0 = any (bsp: 1)
  std::string stages_doc;            // why, ending the deck's error "<name> <stages_doc>, but split = [...]"
  VersionRule versions = flush_versions();  // how compute actions choose weight versions
  const MemoryRule* memory = nullptr;  // units in flight and versions held per stage; unset: only the replay knows
  bool memory_reference = false;     // 1f1b: the peak activations `schedule --json` compares others with (one entry)
  bool data_parallel = false;        // bsp: the planner's data-parallel baseline (one entry)
  bool pipedream_model = false;      // pipedream: the schedule `plan --cost-model pipedream` plans (one entry)
  bool deck_default = false;         // 1f1b: parallel.schedule when a deck names none (one entry)
  // Fills S.workers with the compute actions (F, B, I, W; stage and unit set, version -1)
  // of every rank, in the order each rank runs them.
  std::function<void(Schedule& S)> generate;
  // Constraints beyond the stage count on a layout and microbatch count: "" when it can
  // run, else why not (named values, for a located deck error).
  std::function<std::string(const Layout&, int microbatches)> check;

  // ---- what the entry answers (src/schedule/registry.cpp) ----
  // Units per minibatch for the deck's microbatch count M: 1 per minibatch unit, else M.
  int units_per_minibatch(int microbatches) const;
  // Samples per unit of a minibatch of `batch_size` samples.
  int64_t unit_size(int64_t batch_size, int microbatches) const;
  // Minibatches one update of `stage` applies (its replicas for minibatch units, else 1),
  // and their least common multiple: the update boundaries every stage shares.
  int64_t version_stride(const Layout& l, int stage) const;
  int64_t boundary_stride(const Layout& l) const;
  // "" or why `stages` stages cannot run it ("bsp needs one stage, got 3").
  std::string stage_count_problem(int stages) const;
  // "" or why it cannot run on this layout with this many units per minibatch: the stage
  // count, then `check`.
  std::string problem(const Layout& l, int microbatches) const;
  // Updates a gradient's weights lag on K stages (0: flush), -1 when K is not known yet.
  int staleness(int stages) const;
  // The memory rule at a stage of a layout (summary.json's formulas): units in flight with
  // U units per minibatch, and weight versions held; -1 where only the replay knows.
  int in_flight_formula(const Layout& l, int stage, int units_per_minibatch) const;
  int versions_formula(const Layout& l, int stage) const;
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
// The one entry with a role flag set, e.g. flagged_schedule(&ScheduleDef::data_parallel);
// an internal error unless exactly one entry has it.
const ScheduleDef& flagged_schedule(bool ScheduleDef::*role);
// The placement a file records (plan.json, summary.json), or where it records none (files
// written before the field) the schedule's own: contiguous for every kind with one stage
// per rank. Bad input naming `where` for an unknown schedule or placement.
Placement recorded_placement(const std::string& recorded, const std::string& schedule, const std::string& where);

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
