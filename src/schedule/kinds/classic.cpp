// The classic flush schedules, each one registry entry over the depth rule: gpipe (every
// forward of a minibatch, then every backward), 1f1b (PipeDream-Flush: one forward, one
// backward), model-parallel (one unit in flight) and bsp (data parallelism: one stage). Also
// the flush version rule every flush schedule reads by default (ScheduleDef::versions).
#include <algorithm>
#include <climits>

#include "pipetrain/schedule_registry.hpp"

namespace pt {

// Every action of update group g reads version g: the weights of the last flush. Emulated:
// unit m reads floor(m / M) forward and backward.
VersionRule flush_versions() {
  VersionRule v;
  v.read = [](const VersionQuery& q) { return static_cast<int32_t>(q.S.group_of(q.stage, q.unit)); };
  v.formula = [](const EmulatedUnit& u) { return VersionPair{u.m / u.M, u.m / u.M}; };
  v.violation = [](int32_t read, int32_t want, int32_t) {
    return "flush schedule reads version " + std::to_string(read) + " in step " + std::to_string(want);
  };
  v.staleness = 0;
  return v;
}

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// In flight / versions, for depth d, r replicas, U units per minibatch (one object each,
// shared by the entries that use it):
const MemoryRule* one_f_one_b_memory() {  // min(d, ceil(U/r)) / 1: the fewest of any rule
  static const MemoryRule m{[](int d, int, int r, int U) { return std::min(d, ceil_div(U, r)); }, [](int) { return 1; }, true};
  return &m;
}

const MemoryRule* gpipe_memory() {  // ceil(U/r) / 1
  static const MemoryRule m{[](int, int, int r, int U) { return ceil_div(U, r); }, [](int) { return 1; }};
  return &m;
}

const MemoryRule* one_unit_memory() {  // 1 / 1
  static const MemoryRule m{[](int, int, int, int) { return 1; }, [](int) { return 1; }};
  return &m;
}

ScheduleDef flush_entry(const char* name, const char* doc, const MemoryRule* memory, int depth) {
  ScheduleDef d;
  d.name = name;
  d.doc = doc;
  d.memory = memory;
  d.generate = [depth](Schedule& S) { generate_depth_rule(S, depth); };
  return d;
}

ScheduleDef bsp_entry() {
  ScheduleDef d = flush_entry("bsp", "data parallelism: one stage, every rank a replica, one allreduce per minibatch",
                              one_f_one_b_memory(), 0);
  d.planner = false;  // the planner's baseline (Plan::bsp), not a candidate
  d.data_parallel = true;
  d.stages = 1;
  d.stages_doc = "(data parallel) runs the whole model on every rank";
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(gpipe, flush_entry("gpipe", "GPipe: all forwards of a minibatch, then all backwards; M units in flight",
                                        gpipe_memory(), INT_MAX))
PT_REGISTER_SCHEDULE(one_f_one_b, [] {
  ScheduleDef d = flush_entry("1f1b", "1F1B with a flush per minibatch (PipeDream-Flush): one forward, one backward",
                              one_f_one_b_memory(), 0);
  d.memory_reference = true;
  d.deck_default = true;
  return d;
}())
PT_REGISTER_SCHEDULE(model_parallel, [] {
  ScheduleDef d = flush_entry("model-parallel", "one unit in the pipeline at a time (no overlap); a baseline", one_unit_memory(), 1);
  d.planner = false;
  return d;
}())
PT_REGISTER_SCHEDULE(bsp, bsp_entry())

}  // namespace pt
