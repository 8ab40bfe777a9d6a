// Schedule validation (structure, routing, the backward halves, update and GRAD_NORM
// placement, the version rule, then a replay for deadlocks, unmatched messages and
// collectives) and the per-worker memory measures: units in flight, weight versions held,
// peak activations.
#include <algorithm>
#include <map>
#include <set>

#include "passes.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

std::string where(const Schedule& S, int w, size_t i) {
  const Action& a = S.workers[static_cast<size_t>(w)][i];
  std::string s = "rank " + std::to_string(w) + " (stage " + std::to_string(a.stage) + ", replica " +
                  std::to_string(S.layout.replica_of(w)) + ") action " + std::to_string(i) + " " + op_name(a.op) + " mb " +
                  std::to_string(a.mb);
  if (a.peer >= 0) s += " peer " + std::to_string(a.peer);
  return s;
}

// What one worker has done with one of its stages so far.
struct LaneState {
  std::set<int32_t> got_act, forwarded, got_grad, input_done, backwarded;  // input_done: B or I ran; backwarded: B or W
  std::vector<int32_t> input_order, weight_order;  // units in I order and in W order
  std::map<int32_t, int32_t> fwd_version;
  std::map<int64_t, int64_t> finished_in_group;
  std::set<int64_t> versions = {0};
  int64_t latest = 0, steps = 0;
};

class Validator {
 public:
  explicit Validator(const Schedule& S) : S_(S), L_(S.layout), K_(L_.stages()), U_(S.units()) {
    fwd_count_.assign(static_cast<size_t>(K_), std::vector<int>(static_cast<size_t>(U_), 0));
    bwd_count_ = fwd_count_;
    v0_.assign(static_cast<size_t>(U_), 0);
  }

  std::string run() {
    if (static_cast<int>(S_.workers.size()) != L_.ranks())
      return "schedule has " + std::to_string(S_.workers.size()) + " workers for " + std::to_string(L_.ranks()) + " ranks";
    for (int w = 0; w < L_.ranks(); ++w)
      if (std::string e = worker(w); !e.empty()) return e;
    for (int s = 0; s < K_; ++s)
      for (int64_t m = 0; m < U_; ++m) {
        const int f = fwd_count_[static_cast<size_t>(s)][static_cast<size_t>(m)], b = bwd_count_[static_cast<size_t>(s)][static_cast<size_t>(m)];
        if (f != 1) return "stage " + std::to_string(s) + " forwards microbatch " + std::to_string(m) + " " + std::to_string(f) + " times";
        if (S_.training() && b != 1)
          return "stage " + std::to_string(s) + " backwards microbatch " + std::to_string(m) + " " + std::to_string(b) + " times";
      }
    Replay rp = replay(S_, unit_costs(L_));
    return rp.ok ? "" : rp.error;
  }

 private:
  std::string worker(int w) {
    const std::vector<int> hosted = L_.stages_of_rank(w);
    std::map<int, LaneState>& lanes = lanes_;
    lanes.clear(), norms_ = 0;
    const auto& acts = S_.workers[static_cast<size_t>(w)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      if (std::find(hosted.begin(), hosted.end(), a.stage) == hosted.end())
        return where(S_, w, i) + ": stage " + std::to_string(a.stage) + " is not held by this rank";
      if (std::string e = routing(w, i); !e.empty()) return e;
      if (std::string e = action(w, i, lanes[a.stage]); !e.empty()) return e;
    }
    for (int s : hosted) {
      LaneState& l = lanes[s];
      const std::string who = "rank " + std::to_string(w) + " stage " + std::to_string(s);
      if (S_.training() && l.steps != S_.groups(s))
        return who + ": " + std::to_string(l.steps) + " optimizer steps, expected " + std::to_string(S_.groups(s));
      if (S_.training() && l.forwarded.size() != l.backwarded.size())
        return who + ": " + std::to_string(l.forwarded.size() - l.backwarded.size()) + " microbatches forwarded but never backwarded";
      if (l.weight_order != l.input_order)
        return who + ": weight gradients (W) run in another order than input gradients (I); gradient sums would differ";
    }
    if (S_.grad_norm && norms_ != S_.groups(hosted.front()))
      return "rank " + std::to_string(w) + ": " + std::to_string(norms_) + " GRAD_NORMs, expected one per update group (" +
             std::to_string(S_.groups(hosted.front())) + ")";
    return "";
  }

  // GRAD_NORM of group g: one per group in order, after the rank's every backward of g on
  // every stage it holds (their gradients are final), before any update of g (update()).
  std::string grad_norm(int w, size_t i) {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    auto at = [&](const std::string& msg) { return where(S_, w, i) + ": " + msg; };
    if (!S_.training() || !S_.grad_norm) return at("GRAD_NORM in a schedule without gradient clipping");
    if (a.mb != norms_) return at("GRAD_NORM of group " + std::to_string(a.mb) + ", expected group " + std::to_string(norms_));
    for (int s : L_.stages_of_rank(w)) {
      int64_t need = 0;
      for (int64_t m : replica_units(S_, s, L_.replica_of(w))) need += S_.group_of(s, m) == a.mb;
      const int64_t done = lanes_[s].finished_in_group[a.mb];
      if (done != need)
        return at("before " + std::to_string(need - done) + " backward(s) of stage " + std::to_string(s) + " in its group finished");
    }
    ++norms_;
    return "";
  }

  // Unit range, replica and peer of a communication or compute action.
  std::string routing(int w, size_t i) const {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    if (!is_comm(a.op) && !is_compute(a.op)) return "";
    if (a.mb < 0 || a.mb >= U_) return where(S_, w, i) + ": microbatch out of range 0.." + std::to_string(U_ - 1);
    if (L_.replica_for(a.stage, a.mb) != L_.replica_of(w))
      return where(S_, w, i) + ": microbatch " + std::to_string(a.mb) + " belongs to replica " +
             std::to_string(L_.replica_for(a.stage, a.mb)) + " of stage " + std::to_string(a.stage);
    if (!is_comm(a.op)) return "";
    const int other = (a.op == Op::send_act || a.op == Op::recv_grad) ? a.stage + 1 : a.stage - 1;
    if (other < 0 || other >= K_) return where(S_, w, i) + ": no stage " + std::to_string(other) + " to talk to";
    const int want = L_.rank_for(other, a.mb);
    return a.peer == want ? "" : where(S_, w, i) + ": peer should be rank " + std::to_string(want);
  }

  std::string action(int w, size_t i, LaneState& l) {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    const int s = a.stage;
    auto at = [&](const std::string& msg) { return where(S_, w, i) + ": " + msg; };
    switch (a.op) {
      case Op::recv_act: return l.got_act.insert(a.mb).second ? "" : at("activation received twice");
      case Op::send_act: return l.forwarded.count(a.mb) ? "" : at("sends an activation before its FORWARD");
      case Op::forward:
        if (s > 0 && !l.got_act.count(a.mb)) return at("FORWARD before its RECV_ACT");
        if (!l.forwarded.insert(a.mb).second) return at("forwarded twice");
        ++fwd_count_[static_cast<size_t>(s)][static_cast<size_t>(a.mb)];
        return version(w, i, l);
      case Op::recv_grad:
        if (!S_.training()) return at("gradient in an evaluation schedule");
        return l.got_grad.insert(a.mb).second ? "" : at("gradient received twice");
      case Op::backward:
      case Op::backward_input: return backward(w, i, l);
      case Op::backward_weight:
        if (!l.input_done.count(a.mb) || l.backwarded.count(a.mb) ||
            std::find(l.input_order.begin(), l.input_order.end(), a.mb) == l.input_order.end())
          return at("BACKWARD_WEIGHT before its BACKWARD_INPUT, or twice");
        l.weight_order.push_back(a.mb);
        return finish(w, i, l);
      case Op::send_grad: return l.input_done.count(a.mb) ? "" : at("sends a gradient before its BACKWARD");
      case Op::allreduce: return L_.replicas_of(s) > 1 ? "" : at("ALLREDUCE on an unreplicated stage");
      case Op::optimizer_step: return update(w, i, l);
      case Op::grad_norm: return grad_norm(w, i);
    }
    return "";
  }

  std::string backward(int w, size_t i, LaneState& l) {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    auto at = [&](const std::string& msg) { return where(S_, w, i) + ": " + msg; };
    if (!S_.training()) return at("BACKWARD in an evaluation schedule");
    if (!l.forwarded.count(a.mb)) return at("BACKWARD before its FORWARD on this worker");
    if (a.stage < K_ - 1 && !l.got_grad.count(a.mb)) return at("BACKWARD before its RECV_GRAD");
    if (!l.input_done.insert(a.mb).second) return at("backwarded twice");
    ++bwd_count_[static_cast<size_t>(a.stage)][static_cast<size_t>(a.mb)];
    if (a.op == Op::backward_input) {
      l.input_order.push_back(a.mb);
      return version(w, i, l);
    }
    if (std::string e = version(w, i, l); !e.empty()) return e;
    return finish(w, i, l);
  }

  // B or W: the unit's backward is complete (its update group may now update).
  std::string finish(int w, size_t i, LaneState& l) {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    const int64_t g = S_.group_of(a.stage, a.mb);
    if (g < l.steps) return where(S_, w, i) + ": runs after the update of its group " + std::to_string(g);
    l.backwarded.insert(a.mb);
    ++l.finished_in_group[g];
    return a.op == Op::backward_weight ? version(w, i, l) : "";
  }

  std::string update(int w, size_t i, LaneState& l) {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    auto at = [&](const std::string& msg) { return where(S_, w, i) + ": " + msg; };
    if (!S_.training()) return at("OPTIMIZER_STEP in an evaluation schedule");
    const int64_t want = l.latest + S_.version_stride(a.stage);
    if (a.version != want) return at("produces version " + std::to_string(a.version) + ", expected " + std::to_string(want));
    if (a.mb != l.steps) return at("updates group " + std::to_string(a.mb) + ", expected " + std::to_string(l.steps));
    if (S_.grad_norm && norms_ <= a.mb) return at("updates before the rank's GRAD_NORM of its group");
    int64_t need = 0;
    for (int64_t m : replica_units(S_, a.stage, L_.replica_of(w))) need += S_.group_of(a.stage, m) == a.mb;
    if (l.finished_in_group[a.mb] != need)
      return at("updates before " + std::to_string(need - l.finished_in_group[a.mb]) + " backward(s) of its group finished");
    l.latest = a.version;
    l.versions.insert(l.latest);
    ++l.steps;
    return "";
  }

  // The version a compute action reads exists here and follows the schedule's rule.
  std::string version(int w, size_t i, LaneState& l) {
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    auto at = [&](const std::string& msg) { return where(S_, w, i) + ": " + msg; };
    if (!l.versions.count(a.version) || a.version > l.latest)
      return at("reads weight version " + std::to_string(a.version) + ", which does not exist yet (latest " + std::to_string(l.latest) + ")");
    auto f = l.fwd_version.find(a.mb);
    const int32_t fv = f == l.fwd_version.end() ? -1 : f->second;
    const int32_t want = rule_version(S_, a.op, a.stage, a.mb, l.latest, fv, v0_[static_cast<size_t>(a.mb)]);
    if (a.op == Op::forward) {
      l.fwd_version[a.mb] = a.version;
      if (a.stage == 0) v0_[static_cast<size_t>(a.mb)] = a.version;
    }
    if (a.version == want) return "";
    const auto& words = S_.def->versions.violation;
    return at(words ? words(a.version, want, fv)
                    : "reads version " + std::to_string(a.version) + ", the rule gives " + std::to_string(want));
  }

  const Schedule& S_;
  const Layout& L_;
  const int K_;
  const int64_t U_;
  std::vector<std::vector<int>> fwd_count_, bwd_count_;
  std::vector<int32_t> v0_;
  std::map<int, LaneState> lanes_;  // the worker being checked: by stage
  int64_t norms_ = 0;               // its GRAD_NORMs so far
};

}  // namespace

std::string validate(const Schedule& S) { return Validator(S).run(); }

int max_in_flight(const Schedule& S, int rank, int stage) {
  int cur = 0, best = 0;
  for (const Action& a : S.workers[static_cast<size_t>(rank)]) {
    if (a.stage != stage) continue;
    if (a.op == Op::forward) best = std::max(best, ++cur);
    if (a.op == Op::backward || a.op == Op::backward_weight) --cur;
  }
  return best;
}

int max_between_i_and_w(const Schedule& S, int rank, int stage) {
  int cur = 0, best = 0;
  for (const Action& a : S.workers[static_cast<size_t>(rank)]) {
    if (a.stage != stage) continue;
    if (a.op == Op::backward_input) best = std::max(best, ++cur);
    if (a.op == Op::backward_weight) --cur;
  }
  return best;
}

std::vector<bool> backward_reuses_forward(const Schedule& S, int rank) {
  const auto& acts = S.workers[static_cast<size_t>(rank)];
  std::vector<bool> out(acts.size(), false);
  std::map<int, std::pair<Op, int32_t>> last;  // per stage: the last action that bound a recompute buffer
  for (size_t i = 0; i < acts.size(); ++i) {
    const Action& a = acts[i];
    if (a.op != Op::forward && !is_backward(a.op)) continue;
    const auto it = last.find(a.stage);
    out[i] = is_backward(a.op) && it != last.end() && it->second == std::make_pair(Op::forward, a.mb);
    last[a.stage] = {a.op, a.mb};
  }
  return out;
}

double peak_activations(const Schedule& S, int rank) {
  int cur = 0, best = 0;
  for (const Action& a : S.workers[static_cast<size_t>(rank)]) {
    if (a.op == Op::forward) best = std::max(best, ++cur);
    if (a.op == Op::backward || a.op == Op::backward_weight) --cur;
  }
  return static_cast<double>(best) / std::max(1, S.layout.chunks());
}

int max_versions_held(const Schedule& S, int rank, int stage) {
  const auto& acts = S.workers[static_cast<size_t>(rank)];
  std::map<int32_t, int> uses;
  for (const Action& a : acts)
    if (a.stage == stage && is_compute(a.op)) ++uses[a.version];
  int32_t latest = 0;
  std::set<int32_t> held = {0};
  size_t best = 1;
  for (const Action& a : acts) {
    if (a.stage != stage) continue;
    if (is_compute(a.op)) {
      if (--uses[a.version] == 0 && a.version != latest) held.erase(a.version);
    } else if (a.op == Op::optimizer_step) {
      if (uses[latest] == 0) held.erase(latest);  // updated in place
      latest = a.version;
      held.insert(latest);
      best = std::max(best, held.size());
    }
  }
  return static_cast<int>(best);
}

}  // namespace pt
