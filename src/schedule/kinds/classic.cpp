// The classic flush schedules, each one registry entry over the depth rule: gpipe (every
// forward of a minibatch, then every backward), 1f1b (PipeDream-Flush: one forward, one
// backward), model-parallel (one unit in flight) and bsp (data parallelism: one stage).
#include <climits>

#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

ScheduleDef flush_entry(const char* name, const char* doc, MemoryRule memory, int depth) {
  ScheduleDef d;
  d.name = name;
  d.doc = doc;
  d.memory = memory;
  d.generate = [depth](Schedule& S) { generate_depth_rule(S, depth); };
  return d;
}

ScheduleDef bsp_entry() {
  ScheduleDef d = flush_entry("bsp", "data parallelism: one stage, every rank a replica, one allreduce per minibatch",
                              MemoryRule::one_f_one_b, 0);
  d.planner = false;  // the planner's baseline (Plan::bsp), not a candidate
  d.check = [](const Layout& l, int) {
    return l.stages() == 1 ? std::string() : "bsp needs one stage, got " + std::to_string(l.stages());
  };
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(gpipe, flush_entry("gpipe", "GPipe: all forwards of a minibatch, then all backwards; M units in flight",
                                        MemoryRule::gpipe, INT_MAX))
PT_REGISTER_SCHEDULE(one_f_one_b, flush_entry("1f1b", "1F1B with a flush per minibatch (PipeDream-Flush): one forward, one backward",
                                              MemoryRule::one_f_one_b, 0))
PT_REGISTER_SCHEDULE(model_parallel, [] {
  ScheduleDef d = flush_entry("model-parallel", "one unit in the pipeline at a time (no overlap); a baseline", MemoryRule::one_unit, 1);
  d.planner = false;
  return d;
}())
PT_REGISTER_SCHEDULE(bsp, bsp_entry())

}  // namespace pt
