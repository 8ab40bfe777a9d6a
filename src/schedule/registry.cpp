// The schedule registry (schedule_registry.hpp): entries by name and by role, lookup with a
// located "did you mean", what every entry answers from its fields (units, strides, stage
// count, the memory rule's formulas at a layout), and the small helpers generators share.
#include <algorithm>
#include <numeric>

#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/registry.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

NamedRegistry<ScheduleDef>& registry() { return NamedRegistry<ScheduleDef>::instance(); }

}  // namespace

bool register_schedule(ScheduleDef def) {
  PT_CHECK(def.generate, "schedule '" << def.name << "' registered without a generator");
  PT_CHECK(def.versions.read && def.versions.formula, "schedule '" << def.name << "': its VersionRule needs read and formula");
  PT_CHECK(def.flush == (def.staleness(2) == 0),
           "schedule '" << def.name << "': an asynchronous entry sets VersionRule::staleness (and a flush one leaves it 0)");
  return registry().add(std::move(def), "schedule");
}

const ScheduleDef* find_schedule(const std::string& name) { return registry().find(name); }

const ScheduleDef& schedule_def(const std::string& name) {
  if (const ScheduleDef* d = find_schedule(name)) return *d;
  std::string known;
  for (const std::string& n : schedule_names()) known += (known.empty() ? "" : ", ") + n;
  const std::string dym = did_you_mean(name, schedule_names());
  fail(Exit::bad_input, "unknown schedule '" + name + "'" + (dym.empty() ? "" : " (did you mean '" + dym + "'?)") +
                            "; known: " + known, true);
}

std::vector<const ScheduleDef*> schedule_defs() {
  std::vector<const ScheduleDef*> out;
  for (const ScheduleDef* d : registry().all())
    if (d->deck_choice) out.push_back(d);
  return out;
}

std::vector<std::string> schedule_names() {
  std::vector<std::string> out;
  for (const ScheduleDef* d : schedule_defs()) out.push_back(d->name);
  return out;
}

std::vector<std::string> planner_schedule_names() {
  std::vector<std::string> out;
  for (const ScheduleDef* d : schedule_defs())
    if (d->planner) out.push_back(d->name);
  return out;
}

Placement recorded_placement(const std::string& recorded, const std::string& schedule, const std::string& where) {
  const ScheduleDef* d = find_schedule(schedule);
  if (!d) fail(Exit::bad_input, where + ": unknown schedule '" + schedule + "'", true);
  if (recorded.empty()) return d->placement;
  try {
    return placement_from_name(recorded);
  } catch (const Error& e) {
    fail(Exit::bad_input, where + ": " + e.what(), true);
  }
}

const ScheduleDef& flagged_schedule(bool ScheduleDef::*role) {
  const ScheduleDef* found = nullptr;
  for (const ScheduleDef* d : registry().all())
    if (d->*role) {
      PT_CHECK(!found, "schedules '" << found->name << "' and '" << d->name << "' both claim one role");
      found = d;
    }
  PT_CHECK(found, "no registered schedule has the role asked for");
  return *found;
}

// ---- what an entry answers -------------------------------------------------------------------

int ScheduleDef::units_per_minibatch(int microbatches) const { return per_minibatch_units ? 1 : std::max(1, microbatches); }

int64_t ScheduleDef::unit_size(int64_t batch_size, int microbatches) const {
  return batch_size / units_per_minibatch(microbatches);
}

int64_t ScheduleDef::version_stride(const Layout& l, int stage) const {
  return per_minibatch_units ? l.replicas_of(stage) : 1;
}

int64_t ScheduleDef::boundary_stride(const Layout& l) const {
  int64_t lcm = 1;
  for (int s = 0; s < l.stages(); ++s) lcm = std::lcm(lcm, version_stride(l, s));
  return lcm;
}

std::string ScheduleDef::stage_count_problem(int K) const {
  if (stages == 0 || K == stages) return "";
  return name + " needs " + (stages == 1 ? std::string("one stage") : std::to_string(stages) + " stages") + ", got " +
         std::to_string(K);
}

std::string ScheduleDef::problem(const Layout& l, int microbatches) const {
  if (std::string why = stage_count_problem(l.stages()); !why.empty()) return why;
  return check ? check(l, microbatches) : std::string();
}

int ScheduleDef::in_flight_formula(const Layout& l, int stage, int U) const {
  if (!memory) return -1;
  return memory->in_flight(l.in_flight_depth(stage), l.in_flight_depth(0), l.replicas_of(stage), U);
}

int ScheduleDef::versions_formula(const Layout& l, int stage) const {
  return memory ? memory->versions(l.in_flight_depth(stage)) : -1;
}

int ScheduleDef::staleness(int K) const {
  if (flush) return 0;
  if (versions.staleness >= 0) return versions.staleness;
  return K > 0 ? K - 1 : -1;
}

std::vector<int64_t> replica_units(const Schedule& S, int stage, int replica) {
  std::vector<int64_t> out;
  const int r = S.layout.replicas_of(stage);
  for (int64_t m = replica; m < S.units(); m += r) out.push_back(m);
  return out;
}

Action compute_action(Op op, int stage, int64_t mb) {
  return {op, static_cast<int16_t>(stage), static_cast<int32_t>(mb), -1, -1};
}

}  // namespace pt
