// PipeDream's asynchronous schedules, each one registry entry over the depth rule: stages
// update without a flush. pipedream stashes the version a forward read for its backward;
// vsync makes every stage read stage 0's version; nostash (an ablation) reads the latest in
// backward; in those three a unit is a whole minibatch, and a stage of r replicas updates
// every r minibatches. 2bw reads W(t-1) for minibatch t, with M microbatches per minibatch.
//
// Their version rules as formulas (`pipetrain emulate`), for unit m of a segment on stage s
// with r_s replicas and in-flight depth d_s = ceil(ranks in stages >= s / r_s):
//   pipedream         forward = backward = r_s * max(0, floor(m / r_s) - d_s + 1)
//                     (straight pipeline: max(0, m - K + 1 + s), the paper's w_s(t-K+1+s))
//   pipedream-vsync   forward = backward = r_s * floor(v_0(m) / r_s), v_0 = stage 0's version
//   pipedream-nostash forward as pipedream; backward = the latest, r_s * floor(m / r_s)
//   2bw               batch t = floor(m / M): forward = backward = max(0, t - 1)  (W(t-1))
// Their memory rules (in flight / versions): pipedream and vsync d / d (one stashed version
// per unit in flight), nostash d / 1, 2bw d / 2 (an upper bound of the units in flight).
#include <algorithm>

#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

// The version pipedream's unit m reads on a stage of r replicas and depth d.
int64_t stashed_version(int64_t m, int r, int d) { return static_cast<int64_t>(r) * std::max<int64_t>(0, m / r - d + 1); }

std::string rule_words(const char* rule, int32_t read, int32_t want) {
  return std::string(rule) + " violated: reads version " + std::to_string(read) + ", the rule gives " + std::to_string(want);
}

VersionRule stash_versions() {  // forward reads the latest, backward the forward's
  VersionRule v;
  v.read = [](const VersionQuery& q) { return q.op == Op::forward ? static_cast<int32_t>(q.latest) : q.forward; };
  v.formula = [](const EmulatedUnit& u) {
    const int64_t f = stashed_version(u.m, u.r, u.d);
    return VersionPair{f, f};
  };
  v.violation = [](int32_t read, int32_t, int32_t forward) {
    return "stashing violated: reads version " + std::to_string(read) + ", forward read " + std::to_string(forward);
  };
  v.staleness = -1;
  return v;
}

VersionRule vsync_versions() {  // every stage reads stage 0's choice, rounded to its stride
  VersionRule v;
  v.read = [](const VersionQuery& q) {
    const int64_t stride = q.S.version_stride(q.stage);
    if (q.op != Op::forward) return q.forward;
    return static_cast<int32_t>(q.stage == 0 ? q.latest : stride * (q.stage0 / stride));
  };
  v.formula = [](const EmulatedUnit& u) {
    const int64_t v0 = stashed_version(u.m, u.r0, u.d0), f = u.r * (v0 / u.r);
    return VersionPair{f, f};
  };
  v.violation = [](int32_t read, int32_t want, int32_t) { return rule_words("vertical sync", read, want); };
  v.staleness = -1;
  return v;
}

VersionRule nostash_versions() {  // forward and backward read the latest
  VersionRule v;
  v.read = [](const VersionQuery& q) { return static_cast<int32_t>(q.latest); };
  v.formula = [](const EmulatedUnit& u) { return VersionPair{stashed_version(u.m, u.r, u.d), u.r * (u.m / u.r)}; };
  v.staleness = -1;
  return v;
}

VersionRule two_bw_versions() {  // minibatch t reads W(t-1)
  VersionRule v;
  v.read = [](const VersionQuery& q) {
    return static_cast<int32_t>(std::max<int64_t>(0, q.S.group_of(q.stage, q.unit) - 1));
  };
  v.formula = [](const EmulatedUnit& u) {
    const int64_t f = std::max<int64_t>(0, u.m / u.M - 1);
    return VersionPair{f, f};
  };
  v.violation = [](int32_t read, int32_t want, int32_t) {
    return "2BW reads version " + std::to_string(read) + ", the rule W(t-1) gives " + std::to_string(want);
  };
  v.staleness = 1;
  return v;
}

// In flight d (one object per rule, shared by the entries that use it):
const MemoryRule* stash_memory() {  // d versions: one stashed version per unit in flight
  static const MemoryRule m{[](int d, int, int, int) { return d; }, [](int d) { return d; }};
  return &m;
}

const MemoryRule* no_stash_memory() {  // 1 version
  static const MemoryRule m{[](int d, int, int, int) { return d; }, [](int) { return 1; }};
  return &m;
}

const MemoryRule* two_bw_memory() {  // 2 versions (the units in flight: an upper bound)
  static const MemoryRule m{[](int d, int, int, int) { return d; }, [](int) { return 2; }};
  return &m;
}

ScheduleDef async_entry(const char* name, const char* doc, VersionRule versions, const MemoryRule* memory, bool per_minibatch) {
  ScheduleDef d;
  d.name = name;
  d.doc = doc;
  d.flush = false;
  d.per_minibatch_units = per_minibatch;
  d.versions = std::move(versions);
  d.memory = memory;
  d.generate = [](Schedule& S) { generate_depth_rule(S, 0); };
  return d;
}

ScheduleDef pipedream_entry() {
  ScheduleDef d = async_entry("pipedream", "PipeDream: asynchronous 1F1B with weight stashing (forward and backward read one version)",
                              stash_versions(), stash_memory(), true);
  d.pipedream_model = true;
  return d;
}

ScheduleDef nostash_entry() {
  ScheduleDef d = async_entry("pipedream-nostash", "ablation: pipedream without weight stashing (backward reads the latest; INVALID gradients)",
                              nostash_versions(), no_stash_memory(), true);
  d.valid_gradients = false;
  d.planner = false;
  return d;
}

ScheduleDef two_bw_entry() {
  ScheduleDef d = async_entry("2bw", "PipeDream-2BW: minibatch t reads W(t-1); two weight versions, gradients over M microbatches",
                              two_bw_versions(), two_bw_memory(), false);
  d.check = [](const Layout& l, int M) {
    return M >= l.stages() ? std::string()
                           : "2bw needs at least one microbatch per stage (M >= K), got M = " + std::to_string(M) + " for " +
                                 std::to_string(l.stages()) + " stages";
  };
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(pipedream, pipedream_entry())
PT_REGISTER_SCHEDULE(pipedream_vsync, [] {
  ScheduleDef d = async_entry("pipedream-vsync", "PipeDream with vertical sync: every stage reads the version stage 0 chose",
                              vsync_versions(), stash_memory(), true);
  d.planner = false;
  return d;
}())
PT_REGISTER_SCHEDULE(pipedream_nostash, nostash_entry())
PT_REGISTER_SCHEDULE(two_bw, two_bw_entry())

}  // namespace pt
