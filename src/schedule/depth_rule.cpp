// The depth rule, the generator behind the classic and PipeDream schedules (one stage per
// rank): a worker forwards its next unit while fewer than `depth` units are in flight, the
// weight version that forward reads exists, and (flush kinds) the unit belongs to the
// current update group; otherwise it backwards its oldest. The kinds differ only in depth
// (1F1B's in-flight depth, M for gpipe, 1 for model-parallel), the flush barrier and the
// version rule (passes.hpp), so version readiness is asked of the one rule.
#include <climits>

#include "passes.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

struct Worker {
  std::vector<int64_t> units;  // ascending
  std::vector<int64_t> left;   // units left per update group
  int64_t updates = 0, version = 0;
  size_t nf = 0, nb = 0;
  int inflight = 0;
};

// Advance past every update group whose units are all backwarded (its update follows).
void complete_groups(Worker& w, int64_t stride) {
  while (w.updates < static_cast<int64_t>(w.left.size()) && w.left[static_cast<size_t>(w.updates)] == 0) {
    w.version += stride;
    ++w.updates;
  }
}

void generate_worker(Schedule& S, int s, int r, int depth, std::vector<int32_t>& v0) {
  const int64_t stride = S.version_stride(s);
  auto& acts = S.workers[static_cast<size_t>(S.layout.rank_of(s, r))];
  Worker w;
  w.units = replica_units(S, s, r);
  w.left.assign(static_cast<size_t>(S.groups(s)), 0);
  for (int64_t m : w.units) ++w.left[static_cast<size_t>(S.group_of(s, m))];
  complete_groups(w, stride);
  while (w.nb < w.units.size()) {
    bool can_forward = w.nf < w.units.size() && w.inflight < depth;
    int32_t v = -1;
    if (can_forward) {
      const int64_t m = w.units[w.nf];
      v = rule_version(S, Op::forward, s, m, w.version, -1, v0[static_cast<size_t>(m)]);
      can_forward = (!S.def->flush || S.group_of(s, m) == w.updates) && v <= w.version;
    }
    if (can_forward) {
      const int64_t m = w.units[w.nf++];
      if (s == 0) v0[static_cast<size_t>(m)] = v;
      acts.push_back(compute_action(Op::forward, s, m));
      ++w.inflight;
    } else {
      PT_CHECK(w.inflight > 0, "depth rule stalled on stage " << s << " replica " << r);
      const int64_t m = w.units[w.nb++];
      acts.push_back(compute_action(Op::backward, s, m));
      --w.inflight;
      --w.left[static_cast<size_t>(S.group_of(s, m))];
      complete_groups(w, stride);
    }
  }
  PT_CHECK(w.updates == S.groups(s), "stage " << s << " replica " << r << " made " << w.updates << " of " << S.groups(s) << " updates");
}

}  // namespace

void generate_depth_rule(Schedule& S, int depth_override) {
  PT_CHECK(S.layout.placement == Placement::contiguous, S.def->name << " needs the contiguous placement");
  std::vector<int32_t> v0(static_cast<size_t>(S.units()), -1);  // version stage 0's forward read (vsync)
  for (int s = 0; s < S.layout.stages(); ++s)
    for (int r = 0; r < S.layout.replicas_of(s); ++r)
      generate_worker(S, s, r, depth_override > 0 ? depth_override : S.layout.in_flight_depth(s), v0);
}

}  // namespace pt
