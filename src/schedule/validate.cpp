// Schedule validation (structure, routing, version rules, then a replay for deadlocks and
// unmatched messages), weight-version liveness, and the rank x time grid.
#include <algorithm>
#include <map>
#include <set>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule.hpp"

namespace pt {
namespace {

std::string where(const Schedule& S, int w, size_t i) {
  const Action& a = S.workers[static_cast<size_t>(w)][i];
  std::string s = "rank " + std::to_string(w) + " (stage " + std::to_string(S.layout.stage_of(w)) + ", replica " +
                  std::to_string(S.layout.replica_of(w)) + ") action " + std::to_string(i) + " " + op_name(a.op) +
                  " mb " + std::to_string(a.mb);
  if (a.peer >= 0) s += " peer " + std::to_string(a.peer);
  return s;
}

}  // namespace

std::string validate(const Schedule& S) {
  const Layout& L = S.layout;
  const int K = L.stages();
  const bool training = S.kind != ScheduleKind::eval;
  if (static_cast<int>(S.workers.size()) != L.ranks())
    return "schedule has " + std::to_string(S.workers.size()) + " workers for " + std::to_string(L.ranks()) + " ranks";
  const int64_t U = S.units();
  // forwards/backwards of each unit per stage
  std::vector<std::vector<int>> fwd_count(static_cast<size_t>(K), std::vector<int>(static_cast<size_t>(U), 0));
  std::vector<std::vector<int>> bwd_count = fwd_count;
  std::vector<std::vector<int32_t>> fwd_version(static_cast<size_t>(K), std::vector<int32_t>(static_cast<size_t>(U), -1));

  for (int w = 0; w < L.ranks(); ++w) {
    const int s = L.stage_of(w), r = L.replica_of(w);
    const auto& acts = S.workers[static_cast<size_t>(w)];
    std::set<int32_t> got_act, forwarded, got_grad, backwarded;
    int64_t version = 0, steps = 0;
    std::set<int64_t> versions = {0};
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      const bool comm = a.op == Op::send_act || a.op == Op::recv_act || a.op == Op::send_grad || a.op == Op::recv_grad;
      if (comm || is_compute(a.op)) {
        if (a.mb < 0 || a.mb >= U) return where(S, w, i) + ": microbatch out of range 0.." + std::to_string(U - 1);
        if (L.replica_for(s, a.mb) != r)
          return where(S, w, i) + ": microbatch " + std::to_string(a.mb) + " belongs to replica " +
                 std::to_string(L.replica_for(s, a.mb)) + " of stage " + std::to_string(s);
      }
      auto expect_peer = [&](int stage) -> std::string {
        if (stage < 0 || stage >= K) return where(S, w, i) + ": no stage " + std::to_string(stage) + " to talk to";
        const int want = L.rank_of(stage, L.replica_for(stage, a.mb));
        if (a.peer != want) return where(S, w, i) + ": peer should be rank " + std::to_string(want);
        return "";
      };
      std::string e;
      switch (a.op) {
        case Op::recv_act:
          if (!(e = expect_peer(s - 1)).empty()) return e;
          if (!got_act.insert(a.mb).second) return where(S, w, i) + ": activation received twice";
          break;
        case Op::send_act:
          if (!(e = expect_peer(s + 1)).empty()) return e;
          if (!forwarded.count(a.mb)) return where(S, w, i) + ": sends an activation before its FORWARD";
          break;
        case Op::forward:
          if (s > 0 && !got_act.count(a.mb)) return where(S, w, i) + ": FORWARD before its RECV_ACT";
          if (!forwarded.insert(a.mb).second) return where(S, w, i) + ": forwarded twice";
          ++fwd_count[static_cast<size_t>(s)][static_cast<size_t>(a.mb)];
          if (!versions.count(a.version) || a.version > version)
            return where(S, w, i) + ": reads weight version " + std::to_string(a.version) + ", which does not exist yet (latest " +
                   std::to_string(version) + ")";
          fwd_version[static_cast<size_t>(s)][static_cast<size_t>(a.mb)] = a.version;
          break;
        case Op::recv_grad:
          if (!training) return where(S, w, i) + ": gradient in an evaluation schedule";
          if (!(e = expect_peer(s + 1)).empty()) return e;
          if (!got_grad.insert(a.mb).second) return where(S, w, i) + ": gradient received twice";
          break;
        case Op::backward:
          if (!training) return where(S, w, i) + ": BACKWARD in an evaluation schedule";
          if (!forwarded.count(a.mb)) return where(S, w, i) + ": BACKWARD before its FORWARD on this worker";
          if (s < K - 1 && !got_grad.count(a.mb)) return where(S, w, i) + ": BACKWARD before its RECV_GRAD";
          if (!backwarded.insert(a.mb).second) return where(S, w, i) + ": backwarded twice";
          ++bwd_count[static_cast<size_t>(s)][static_cast<size_t>(a.mb)];
          if (!versions.count(a.version) || a.version > version)
            return where(S, w, i) + ": reads weight version " + std::to_string(a.version) + ", which does not exist";
          break;
        case Op::send_grad:
          if (!(e = expect_peer(s - 1)).empty()) return e;
          if (!backwarded.count(a.mb)) return where(S, w, i) + ": sends a gradient before its BACKWARD";
          break;
        case Op::allreduce:
          if (L.replicas[static_cast<size_t>(s)] < 2) return where(S, w, i) + ": ALLREDUCE on an unreplicated stage";
          break;
        case Op::optimizer_step:
          if (!training) return where(S, w, i) + ": OPTIMIZER_STEP in an evaluation schedule";
          if (a.version != version + S.version_stride(s))
            return where(S, w, i) + ": produces version " + std::to_string(a.version) + ", expected " +
                   std::to_string(version + S.version_stride(s));
          if (a.mb != steps) return where(S, w, i) + ": updates group " + std::to_string(a.mb) + ", expected " + std::to_string(steps);
          version = a.version;
          versions.insert(version);
          ++steps;
          break;
      }
    }
    if (training && steps != S.groups(s))
      return "rank " + std::to_string(w) + ": " + std::to_string(steps) + " optimizer steps, expected " + std::to_string(S.groups(s));
    if (training && forwarded.size() != backwarded.size())
      return "rank " + std::to_string(w) + ": " + std::to_string(forwarded.size() - backwarded.size()) +
             " microbatches forwarded but never backwarded";
  }
  for (int s = 0; s < K; ++s)
    for (int64_t m = 0; m < U; ++m) {
      if (fwd_count[static_cast<size_t>(s)][static_cast<size_t>(m)] != 1)
        return "stage " + std::to_string(s) + " forwards microbatch " + std::to_string(m) + " " +
               std::to_string(fwd_count[static_cast<size_t>(s)][static_cast<size_t>(m)]) + " times";
      if (training && bwd_count[static_cast<size_t>(s)][static_cast<size_t>(m)] != 1)
        return "stage " + std::to_string(s) + " backwards microbatch " + std::to_string(m) + " " +
               std::to_string(bwd_count[static_cast<size_t>(s)][static_cast<size_t>(m)]) + " times";
    }

  // Version rules of the kind.
  for (int w = 0; w < L.ranks() && training; ++w) {
    const int s = L.stage_of(w);
    const auto& acts = S.workers[static_cast<size_t>(w)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      if (!is_compute(a.op)) continue;
      const int32_t fv = fwd_version[static_cast<size_t>(s)][static_cast<size_t>(a.mb)];
      const int64_t g = S.group_of(s, a.mb);
      switch (S.kind) {
        case ScheduleKind::pipedream:
          if (a.version != fv) return where(S, w, i) + ": stashing violated: backward reads version " + std::to_string(a.version) + ", forward read " + std::to_string(fv);
          break;
        case ScheduleKind::pipedream_vsync: {
          const int64_t stride = S.version_stride(s);
          const int64_t want = stride * (fwd_version[0][static_cast<size_t>(a.mb)] / stride);
          if (a.version != want)
            return where(S, w, i) + ": vertical sync violated: reads version " + std::to_string(a.version) + ", stage 0 chose " +
                   std::to_string(fwd_version[0][static_cast<size_t>(a.mb)]) + " (this stage's version " + std::to_string(want) + ")";
          break;
        }
        case ScheduleKind::two_bw:
          if (a.version != std::max<int64_t>(0, g - 1))
            return where(S, w, i) + ": 2BW reads version " + std::to_string(a.version) + " for minibatch " + std::to_string(g) +
                   ", the rule W(t-1) gives " + std::to_string(std::max<int64_t>(0, g - 1));
          break;
        case ScheduleKind::pipedream_nostash:
          break;
        default:  // flush: every compute action of step g reads version g
          if (a.version != g) return where(S, w, i) + ": flush schedule reads version " + std::to_string(a.version) + " in step " + std::to_string(g);
      }
    }
  }

  Replay rp = replay(S, unit_costs());
  if (!rp.ok) return rp.error;
  return "";
}

int max_in_flight(const Schedule& S, int rank) {
  int cur = 0, best = 0;
  for (const Action& a : S.workers[static_cast<size_t>(rank)]) {
    if (a.op == Op::forward) best = std::max(best, ++cur);
    if (a.op == Op::backward) --cur;
  }
  return best;
}

int max_versions_held(const Schedule& S, int rank) {
  const auto& acts = S.workers[static_cast<size_t>(rank)];
  std::map<int32_t, int> uses;
  for (const Action& a : acts)
    if (is_compute(a.op)) ++uses[a.version];
  int32_t latest = 0;
  std::set<int32_t> held = {0};
  size_t best = 1;
  for (const Action& a : acts) {
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

std::string Schedule::grid() const {
  Replay rp = replay(*this, unit_costs());
  std::ostringstream o;
  if (!rp.ok) {
    o << "schedule does not replay: " << rp.error << "\n";
    return o.str();
  }
  const int T = static_cast<int>(rp.makespan + 0.5);
  const int width = 4, max_cols = 160;
  o << schedule_name(kind) << ": " << layout.str() << ", " << steps << (steps == 1 ? " minibatch" : " minibatches");
  if (microbatches > 1) o << " x " << microbatches << " microbatches";
  o << "\nunit costs: F = 1, B = 2; '.' idle; U optimizer step\n";
  o << "time        ";
  for (int t = 0; t < std::min(T, max_cols); t += 5) o << std::left << std::string(std::to_string(t)).append(5 * width - std::to_string(t).size(), ' ');
  o << "\n";
  for (size_t w = 0; w < workers.size(); ++w) {
    std::vector<std::string> cells(static_cast<size_t>(T + 1), ".");
    for (auto& e : rp.events[w]) {
      const Action& a = workers[w][static_cast<size_t>(e.index)];
      std::string label;
      if (a.op == Op::forward) label = "F" + std::to_string(a.mb);
      else if (a.op == Op::backward) label = "B" + std::to_string(a.mb);
      else if (a.op == Op::optimizer_step) label = "U";
      else continue;
      int t0 = static_cast<int>(e.start + 0.5), t1 = std::max(t0 + 1, static_cast<int>(e.end + 0.5));
      if (a.op == Op::optimizer_step) {
        if (t0 > 0 && t0 - 1 < static_cast<int>(cells.size())) cells[static_cast<size_t>(t0 - 1)] += "U";
        continue;
      }
      for (int t = t0; t < t1 && t < static_cast<int>(cells.size()); ++t) cells[static_cast<size_t>(t)] = label;
    }
    char head[32];
    std::snprintf(head, sizeof head, "r%-2zu s%d/%d    ", w, layout.stage_of(static_cast<int>(w)), layout.replica_of(static_cast<int>(w)));
    o << head;
    for (int t = 0; t < std::min(T, max_cols); ++t) {
      std::string c = cells[static_cast<size_t>(t)];
      if (c.size() > static_cast<size_t>(width - 1)) c = c.substr(0, static_cast<size_t>(width - 1));
      o << c << std::string(static_cast<size_t>(width) - c.size(), ' ');
    }
    if (T > max_cols) o << "... (" << T << " units)";
    o << "\n";
  }
  return o.str();
}

}  // namespace pt
