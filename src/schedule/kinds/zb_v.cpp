// zb-v (Qi et al., "Pipeline parallelism with controllable memory"): two chunks per rank in
// a V (rank r holds stages r and 2p-1-r), backward split into I and W, ordered by the list
// scheduler: I first (shallow stage first), then F (deep stage first) while the rank holds
// fewer than 2 ceil(ranks / r0) chunk activations (1F1B's peak), W in the remaining gaps.
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

ScheduleDef zb_v_entry() {
  ScheduleDef d;
  d.name = "zb-v";
  d.doc = "zero bubble V: 2 chunks per rank in a V, I/W split; near-zero bubble at 1F1B's activation memory";
  d.placement = Placement::v;
  d.split_backward = true;
  // memory unset: with several stages per rank only the generated schedule's replay knows
  d.check = [](const Layout& l, int M) -> std::string {
    for (int g = 0; g < l.groups(); ++g)
      if (l.replicas[static_cast<size_t>(g)] != l.replicas[0] || M % l.replicas[0] != 0)
        return "zb-v needs the same replica count r in every rank group and M a multiple of r, got replicas " +
               l.replication() + " and M = " + std::to_string(M);
    return "";
  };
  d.generate = [](Schedule& S) {
    const int r0 = S.layout.replicas[0];
    const int cap = 2 * ((S.layout.ranks() + r0 - 1) / r0);
    generate_list_scheduled(S, [cap](int) { return cap; });
  };
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(zb_v, zb_v_entry())

}  // namespace pt
