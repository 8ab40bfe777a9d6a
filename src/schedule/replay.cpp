// The replay engine: walks every worker's action list at once, matching each receive with
// its send, each allreduce among a stage's replicas and each GRAD_NORM among all workers
// (a collective: the k-th GRAD_NORM of every worker, after its pending allreduces), timing
// actions with a cost model. A state where no worker can move is a deadlock, reported with
// what each one waits for.
#include <algorithm>
#include <map>
#include <sstream>

#include "passes.hpp"
#include "pipetrain/error.hpp"

namespace pt {

CostModel unit_costs(const Layout& layout) {
  CostModel c;
  const double v = std::max(1, layout.chunks());
  c.compute = [v](int, const Action& a) {
    switch (a.op) {
      case Op::forward:
      case Op::backward_input:
      case Op::backward_weight: return 1.0 / v;
      case Op::backward: return 2.0 / v;
      default: return 0.0;
    }
  };
  c.transfer = [](int, int, const Action&) { return 0.0; };
  c.allreduce = [](int) { return 0.0; };
  return c;
}

namespace {

std::string worker_name(const Layout& l, int rank) {
  const std::vector<int> st = l.stages_of_rank(rank);
  const std::string where = st.size() == 1 ? "stage " + std::to_string(st[0]) : "group " + std::to_string(l.group_of_rank(rank));
  return "rank " + std::to_string(rank) + " (" + where + ", replica " + std::to_string(l.replica_of(rank)) + ")";
}

class Replayer {
 public:
  Replayer(const Schedule& S, const CostModel& c) : S_(S), c_(c), R_(static_cast<int>(S.workers.size())) {
    out_.events.resize(static_cast<size_t>(R_));
    for (int w = 0; w < R_; ++w) out_.events[static_cast<size_t>(w)].reserve(S.workers[static_cast<size_t>(w)].size());
    pc_.assign(static_cast<size_t>(R_), 0);
    clock_.assign(static_cast<size_t>(R_), 0.0);
  }

  Replay run() {
    for (bool progress = true; progress && out_.ok;) {
      progress = false;
      for (int w = 0; w < R_ && out_.ok; ++w)
        while (pc_[static_cast<size_t>(w)] < S_.workers[static_cast<size_t>(w)].size() && out_.ok && step(w)) progress = true;
    }
    if (out_.ok) finish();
    return out_;
  }

 private:
  struct Reduce {
    int arrived = 0;
    double last = 0.0;
    int32_t group = -1;
  };

  // Run worker w's next action if it can; false when it is blocked.
  bool step(int w) {
    size_t& i = pc_[static_cast<size_t>(w)];
    double& t = clock_[static_cast<size_t>(w)];
    const Action& a = S_.workers[static_cast<size_t>(w)][i];
    double start = t, end = t;
    if (a.op == Op::send_act || a.op == Op::send_grad) {
      if (!post(w, i, a)) return false;
    } else if (a.op == Op::recv_act || a.op == Op::recv_grad) {
      auto it = posted_.find(message_key(w, a));
      if (it == posted_.end()) return false;
      end = std::max(t, it->second.first);
      posted_.erase(it);
    } else if (a.op == Op::allreduce) {
      if (!arrive(w, i, a, t)) return false;
    } else if (a.op == Op::grad_norm) {
      if (!grad_norm(w, i, a, t, &start)) return false;
      end = start + c_.compute(w, a);
    } else if (a.op == Op::optimizer_step && pending_.count({w, a.stage})) {
      double rend;
      if (!reduce_done(w, a.stage, &rend)) return false;
      start = std::max(t, rend);
      end = start + c_.compute(w, a);
    } else {
      end = t + c_.compute(w, a);
    }
    out_.events[static_cast<size_t>(w)].push_back({static_cast<int32_t>(i), start, end});
    if (a.op != Op::allreduce) t = end;
    ++i;
    return true;
  }

  bool post(int w, size_t i, const Action& a) {
    const MessageKey key = message_key(w, a);
    if (posted_.count(key)) {
      fail_with(worker_name(S_.layout, w) + " action " + std::to_string(i) + ": " + op_name(a.op) + " mb " +
                std::to_string(a.mb) + " to rank " + std::to_string(a.peer) + " is sent twice");
      return false;
    }
    posted_[key] = {clock_[static_cast<size_t>(w)] + c_.transfer(w, a.peer, a), i};
    return true;
  }

  bool arrive(int w, size_t i, const Action& a, double t) {
    const int k = reduce_count_[{w, a.stage}]++;
    Reduce& rd = reduces_[{a.stage, k}];
    if (rd.group >= 0 && rd.group != a.mb) {
      fail_with(worker_name(S_.layout, w) + " action " + std::to_string(i) + ": ALLREDUCE " + std::to_string(k) + " is for group " +
                std::to_string(a.mb) + " but a replica reduces group " + std::to_string(rd.group));
      return false;
    }
    rd.group = a.mb;
    ++rd.arrived;
    rd.last = std::max(rd.last, t);
    pending_[{w, a.stage}] = {k, i};
    return true;
  }

  bool reduce_done(int w, int stage, double* end) {
    const auto [k, event] = pending_.at({w, stage});
    const Reduce& rd = reduces_[{stage, k}];
    if (rd.arrived < S_.layout.replicas_of(stage)) return false;
    *end = rd.last + c_.allreduce(stage);
    out_.events[static_cast<size_t>(w)][event].end = *end;  // events are in action order
    pending_.erase({w, stage});
    return true;
  }

  // GRAD_NORM: once the worker's pending allreduces are done it arrives at the collective
  // (its k-th); it proceeds when every worker has arrived, from the last arrival.
  bool grad_norm(int w, size_t i, const Action& a, double t, double* start) {
    NormWait& nw = norm_wait_[w];
    if (nw.k < 0) {
      nw.ready = std::max(nw.ready, t);
      for (auto it = pending_.lower_bound({w, -1}); it != pending_.end() && it->first.first == w; it = pending_.lower_bound({w, -1})) {
        double rend;
        if (!reduce_done(w, it->first.second, &rend)) return false;
        nw.ready = std::max(nw.ready, rend);
      }
      nw.k = norm_count_[w]++;
      Reduce& rd = norms_[nw.k];
      if (rd.group >= 0 && rd.group != a.mb) {
        fail_with(worker_name(S_.layout, w) + " action " + std::to_string(i) + ": GRAD_NORM " + std::to_string(nw.k) +
                  " is for group " + std::to_string(a.mb) + " but another rank's is for group " + std::to_string(rd.group));
        return false;
      }
      rd.group = a.mb;
      ++rd.arrived;
      rd.last = std::max(rd.last, nw.ready);
    }
    const Reduce& rd = norms_[nw.k];
    if (rd.arrived < R_) return false;
    *start = rd.last;
    nw = NormWait{};
    return true;
  }

  void fail_with(const std::string& e) {
    out_.ok = false;
    out_.error = e;
  }

  void finish() {
    std::ostringstream err;
    for (int w = 0; w < R_; ++w) {
      const auto& acts = S_.workers[static_cast<size_t>(w)];
      const size_t i = pc_[static_cast<size_t>(w)];
      if (i >= acts.size()) continue;
      const Action& a = acts[i];
      err << "  " << worker_name(S_.layout, w) << " blocked at action " << i << ": " << op_name(a.op) << " mb " << a.mb;
      if (a.peer >= 0) err << " from rank " << a.peer;
      if (a.op == Op::optimizer_step) err << " (waiting for its replicas' ALLREDUCE)";
      if (a.op == Op::grad_norm) err << " (waiting for every rank's GRAD_NORM of group " << a.mb << ")";
      err << "\n";
    }
    if (!err.str().empty()) return fail_with("deadlock: no worker can proceed:\n" + err.str());
    for (auto& [key, v] : posted_)
      fail_with(out_.error + worker_name(S_.layout, std::get<0>(key)) + " action " + std::to_string(v.second) + ": " +
                (std::get<2>(key) ? "SEND_GRAD" : "SEND_ACT") + " mb " + std::to_string(std::get<4>(key)) + " to rank " +
                std::to_string(std::get<1>(key)) + " is never received\n");
    for (int w = 0; w < R_; ++w) {
      out_.makespan = std::max(out_.makespan, clock_[static_cast<size_t>(w)]);
      for (auto& e : out_.events[static_cast<size_t>(w)]) out_.makespan = std::max(out_.makespan, e.end);
    }
  }

  const Schedule& S_;
  const CostModel& c_;
  const int R_;
  Replay out_;
  std::vector<size_t> pc_;
  std::vector<double> clock_;
  std::map<MessageKey, std::pair<double, size_t>> posted_;  // arrival time, index of the send
  std::map<std::pair<int, int>, Reduce> reduces_;           // (stage, k)
  std::map<std::pair<int, int>, int> reduce_count_;         // (worker, stage) -> allreduces so far
  std::map<std::pair<int, int>, std::pair<int, size_t>> pending_;  // (worker, stage) -> (k, action index)
  struct NormWait {
    int k = -1;        // the collective the worker arrived at, -1 before its arrival
    double ready = 0;  // when its allreduces were done
  };
  std::map<int, NormWait> norm_wait_;  // by worker
  std::map<int, int> norm_count_;      // worker -> GRAD_NORMs arrived at so far
  std::map<int, Reduce> norms_;        // k -> arrivals
};

}  // namespace

Replay replay(const Schedule& S, const CostModel& costs) { return Replayer(S, costs).run(); }

}  // namespace pt
