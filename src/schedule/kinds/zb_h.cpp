// Zero-bubble schedules with one stage per rank (Qi et al., ICLR 2024), backward split into
// I (input gradient) and W (weight gradient). Worker of stage s with depth d = the 1F1B
// in-flight depth, per minibatch of n units: `warm` forwards, then I, W (unless deferred),
// F repeated, then the deferred W's. zb-h1: warm = d, the first d0 - d W's deferred
// (1F1B's peak memory, bubble (p-1)(F+I-W)); zb-h2: warm = 2d - 1, 2(d0 - d) deferred
// (peak 2p-1 units in flight instead of p). What H2 buys: its extra warm-up forwards fill
// the first worker's warm-up wait and the deferred W's fill every worker's drain, so no
// worker idles between its first and last action. It is not bubble-free under a flush: at
// unit costs one minibatch takes (p-1) + 3m under both, since the last worker cannot start
// before p-1 forwards have passed and H2 only moves the first worker's p-1 idle ticks to
// after its last W. It is faster when W costs less than I, and over several minibatches,
// where that idle tail overlaps the next minibatch's forwards (at unit costs p-1 ticks per
// minibatch after the first: 75 against 81 for 3 minibatches, p = 4, m = 8). With fewer
// microbatches than the H2 warm-up needs (m < 2p - 1) its order can lose to H1's; zb-h2
// then keeps H1's order, so it is never slower than zb-h1 at unit costs.
#include <algorithm>

#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

void emit_zb_block(std::vector<Action>& acts, int s, const std::vector<int64_t>& u, int64_t warm, int64_t defer) {
  const int64_t n = static_cast<int64_t>(u.size());
  int64_t nf = 0, ni = 0, nw = 0;
  auto at = [&](int64_t i) { return u[static_cast<size_t>(i)]; };
  for (; nf < std::min(warm, n); ++nf) acts.push_back(compute_action(Op::forward, s, at(nf)));
  while (ni < n) {
    acts.push_back(compute_action(Op::backward_input, s, at(ni++)));
    if (ni > defer) acts.push_back(compute_action(Op::backward_weight, s, at(nw++)));
    if (nf < n) acts.push_back(compute_action(Op::forward, s, at(nf++)));
  }
  while (nw < n) acts.push_back(compute_action(Op::backward_weight, s, at(nw++)));
}

void generate_pattern(Schedule& S, bool h2) {
  const Layout& L = S.layout;
  const int d0 = L.in_flight_depth(0);
  for (int s = 0; s < L.stages(); ++s)
    for (int r = 0; r < L.replicas_of(s); ++r) {
      const std::vector<int64_t> units = replica_units(S, s, r);
      const int d = L.in_flight_depth(s);
      const int64_t warm = h2 ? 2 * d - 1 : d, defer = h2 ? 2 * (d0 - d) : d0 - d;
      auto& acts = S.workers[static_cast<size_t>(L.rank_of(s, r))];
      for (int64_t g = 0; g < S.groups(s); ++g) {
        std::vector<int64_t> block;
        for (int64_t m : units)
          if (S.group_of(s, m) == g) block.push_back(m);
        emit_zb_block(acts, s, block, warm, defer);
      }
    }
}

void generate_zb(Schedule& S, bool h2) {
  generate_pattern(S, h2);
  if (!h2) return;
  Schedule h1 = S;
  for (auto& w : h1.workers) w.clear();
  generate_pattern(h1, false);
  if (unit_makespan(h1) < unit_makespan(S)) S.workers = std::move(h1.workers);
}

// In flight / versions (upper bounds: with few units zb-h2 may keep zb-h1's order), for
// depth d, stage 0's d0, r replicas, U units per minibatch:
//   zb-h1  min(max(d, d0), ceil(U/r)) / 1        zb-h2  min(2 max(d, d0) - 1, ceil(U/r)) / 1
const MemoryRule* zb_memory(bool h2) {
  static const MemoryRule h1m{[](int d, int d0, int r, int U) { return std::min(std::max(d, d0), (U + r - 1) / r); },
                              [](int) { return 1; }};
  static const MemoryRule h2m{[](int d, int d0, int r, int U) { return std::min(2 * std::max(d, d0) - 1, (U + r - 1) / r); },
                              [](int) { return 1; }};
  return h2 ? &h2m : &h1m;
}

ScheduleDef zb_entry(bool h2) {
  ScheduleDef d;
  d.name = h2 ? "zb-h2" : "zb-h1";
  d.doc = h2 ? "zero bubble H2: more warm-up forwards (2p-1 on stage 0), W's fill the drain; 2p-1 units of memory; "
               "ties zb-h1 on one flushed minibatch at unit costs, gains over several or when W costs less than I"
             : "zero bubble H1: 1F1B with the weight gradient W split off and deferred; 1F1B's peak memory";
  d.split_backward = true;
  d.memory = zb_memory(h2);
  d.generate = [h2](Schedule& S) { generate_zb(S, h2); };
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(zb_h1, zb_entry(false))
PT_REGISTER_SCHEDULE(zb_h2, zb_entry(true))

}  // namespace pt
