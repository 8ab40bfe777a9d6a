// PipeDream's asynchronous schedules, each one registry entry over the depth rule: a unit
// is a whole minibatch and stages update without a flush. pipedream stashes the version a
// forward read for its backward; vsync makes every stage read stage 0's version; nostash
// (an ablation) reads the latest in backward; 2bw reads W(t-1) for minibatch t.
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

ScheduleDef async_entry(const char* name, const char* doc, VersionRule versions, MemoryRule memory, bool per_minibatch) {
  ScheduleDef d;
  d.name = name;
  d.doc = doc;
  d.flush = false;
  d.per_minibatch_units = per_minibatch;
  d.versions = versions;
  d.memory = memory;
  d.generate = [](Schedule& S) { generate_depth_rule(S, 0); };
  return d;
}

ScheduleDef nostash_entry() {
  ScheduleDef d = async_entry("pipedream-nostash", "ablation: pipedream without weight stashing (backward reads the latest; INVALID gradients)",
                              VersionRule::nostash, MemoryRule::no_stash, true);
  d.valid_gradients = false;
  d.planner = false;
  return d;
}

ScheduleDef two_bw_entry() {
  ScheduleDef d = async_entry("2bw", "PipeDream-2BW: minibatch t reads W(t-1); two weight versions, gradients over M microbatches",
                              VersionRule::two_bw, MemoryRule::two_bw, false);
  d.check = [](const Layout& l, int M) {
    return M >= l.stages() ? std::string()
                           : "2bw needs at least one microbatch per stage (M >= K), got M = " + std::to_string(M) + " for " +
                                 std::to_string(l.stages()) + " stages";
  };
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(pipedream, async_entry("pipedream", "PipeDream: asynchronous 1F1B with weight stashing (forward and backward read one version)",
                                            VersionRule::stash, MemoryRule::pipedream, true))
PT_REGISTER_SCHEDULE(pipedream_vsync, [] {
  ScheduleDef d = async_entry("pipedream-vsync", "PipeDream with vertical sync: every stage reads the version stage 0 chose",
                              VersionRule::vsync, MemoryRule::pipedream, true);
  d.planner = false;
  return d;
}())
PT_REGISTER_SCHEDULE(pipedream_nostash, nostash_entry())
PT_REGISTER_SCHEDULE(two_bw, two_bw_entry())

}  // namespace pt
