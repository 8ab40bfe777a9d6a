// The schedule registry (schedule_registry.hpp): entries by name, lookup with a located "did you
// mean", the memory rules behind summary.json's formulas and the planner's cap, and the
// small helpers generators share.
#include <algorithm>

#include "pipetrain/error.hpp"
#include "pipetrain/registry.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

NamedRegistry<ScheduleDef>& registry() { return NamedRegistry<ScheduleDef>::instance(); }

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

bool register_schedule(ScheduleDef def) {
  PT_CHECK(def.generate, "schedule '" << def.name << "' registered without a generator");
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
  for (Placement p : {Placement::contiguous, Placement::looped, Placement::v})
    if (recorded == placement_name(p)) return p;
  fail(Exit::bad_input, where + ": unknown placement '" + recorded + "'; known: contiguous, looped, v", true);
}

int memory_in_flight(MemoryRule rule, int d, int d0, int r, int U) {
  const int per = ceil_div(U, r);
  switch (rule) {
    case MemoryRule::one_f_one_b: return std::min(d, per);
    case MemoryRule::gpipe: return per;
    case MemoryRule::pipedream:
    case MemoryRule::no_stash:
    case MemoryRule::two_bw: return d;
    case MemoryRule::one_unit: return 1;
    case MemoryRule::zb_h1: return std::min(std::max(d, d0), per);
    case MemoryRule::zb_h2: return std::min(2 * std::max(d, d0) - 1, per);
    case MemoryRule::replay: return -1;
  }
  return d;
}

int memory_versions(MemoryRule rule, int d) {
  switch (rule) {
    case MemoryRule::pipedream: return d;
    case MemoryRule::two_bw: return 2;
    case MemoryRule::replay: return -1;
    default: return 1;
  }
}

int rule_in_flight(MemoryRule rule, const Layout& l, int stage, int U) {
  return memory_in_flight(rule, l.in_flight_depth(stage), l.in_flight_depth(0), l.replicas_of(stage), U);
}

int rule_versions(MemoryRule rule, const Layout& l, int stage) { return memory_versions(rule, l.in_flight_depth(stage)); }

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
