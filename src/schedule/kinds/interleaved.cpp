// interleaved-1f1b (Megatron-LM): the looped placement, rank group g holding stages g,
// g+p, ..., g+(v-1)p; each worker runs its units in blocks of p through chunk 0, then chunk
// 1, ..., with (p-g-1)*2 + (v-1)*p warm-up forwards, then one forward one backward, then the
// cool-down backwards (chunks in reverse). Bubble (p-1)/(v m) of the ideal at unit costs.
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

void generate_interleaved(Schedule& S) {
  const Layout& L = S.layout;
  const int p = L.groups(), v = L.chunks();
  for (int w = 0; w < L.ranks(); ++w) {
    const int g = L.group_of_rank(w), q = L.replica_of(w);
    const std::vector<int64_t> units = replica_units(S, g, q);
    const int64_t n = static_cast<int64_t>(units.size()) / S.steps;  // per minibatch
    auto& acts = S.workers[static_cast<size_t>(w)];
    for (int64_t t = 0; t < S.steps; ++t) {
      auto op = [&](Op kind, int64_t k) {
        const int64_t c = (k / p) % v, chunk = kind == Op::forward ? c : v - 1 - c;
        const int64_t local = (k / (static_cast<int64_t>(p) * v)) * p + k % p;
        acts.push_back(compute_action(kind, static_cast<int>(chunk * p + g), units[static_cast<size_t>(t * n + local)]));
      };
      const int64_t total = n * v, warm = std::min<int64_t>(total, (p - g - 1) * 2 + static_cast<int64_t>(v - 1) * p);
      int64_t kf = 0, kb = 0;
      while (kf < warm) op(Op::forward, kf++);
      while (kf < total) op(Op::forward, kf++), op(Op::backward, kb++);
      while (kb < total) op(Op::backward, kb++);
    }
  }
}

std::string check_interleaved(const Layout& l, int M) {
  for (int g = 1; g < l.groups(); ++g)
    if (l.replicas[static_cast<size_t>(g)] != l.replicas[0])
      return "interleaved-1f1b needs the same replica count in every rank group (each replica runs its own interleaved "
             "pipeline), got " + l.replication();
  for (int g = 0; g < l.groups(); ++g) {
    const int r = l.replicas[static_cast<size_t>(g)];
    if (M % r != 0 || (M / r) % l.groups() != 0)
      return "interleaved-1f1b runs each worker's microbatches in blocks of p = " + std::to_string(l.groups()) +
             ": M / replicas must be a multiple of p, got M = " + std::to_string(M) + " with " + std::to_string(r) +
             " replicas in rank group " + std::to_string(g);
  }
  return "";
}

ScheduleDef interleaved_entry() {
  ScheduleDef d;
  d.name = "interleaved-1f1b";
  d.doc = "Megatron-LM's interleaved 1F1B: v model chunks per rank (looped placement), bubble (p-1)/(v m)";
  d.placement = Placement::looped;
  // memory unset: with several stages per rank only the generated schedule's replay knows
  d.generate = generate_interleaved;
  d.check = check_interleaved;
  return d;
}

}  // namespace

PT_REGISTER_SCHEDULE(interleaved_1f1b, interleaved_entry())

}  // namespace pt
