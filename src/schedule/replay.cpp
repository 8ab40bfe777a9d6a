// The replay engine: walks every worker's action list at once, matching each receive with
// its send and each allreduce among a stage's replicas, timing actions with a cost model.
// A state where no worker can move is a deadlock, reported with what each one waits for.
#include <algorithm>
#include <map>
#include <sstream>
#include <tuple>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule.hpp"

namespace pt {

CostModel unit_costs() {
  CostModel c;
  c.compute = [](int, const Action& a) {
    return a.op == Op::forward ? 1.0 : a.op == Op::backward ? 2.0 : 0.0;
  };
  c.transfer = [](int, int, const Action&) { return 0.0; };
  c.allreduce = [](int) { return 0.0; };
  return c;
}

namespace {

std::string worker_name(const Layout& l, int rank) {
  return "rank " + std::to_string(rank) + " (stage " + std::to_string(l.stage_of(rank)) + ", replica " +
         std::to_string(l.replica_of(rank)) + ")";
}

}  // namespace

Replay replay(const Schedule& S, const CostModel& costs) {
  const int R = static_cast<int>(S.workers.size());
  Replay out;
  out.events.resize(static_cast<size_t>(R));
  for (int w = 0; w < R; ++w) out.events[static_cast<size_t>(w)].reserve(S.workers[static_cast<size_t>(w)].size());
  std::vector<size_t> pc(static_cast<size_t>(R), 0);
  std::vector<double> clock(static_cast<size_t>(R), 0.0);
  // messages in flight: (src, dst, is_grad, mb) -> (arrival time, index of the send)
  std::map<std::tuple<int, int, int, int32_t>, std::pair<double, size_t>> posted;
  // allreduce k of a stage: arrivals and completion
  struct Reduce {
    int arrived = 0;
    double last = 0.0;
    int32_t group = -1;
  };
  std::map<std::pair<int, int>, Reduce> reduces;
  std::vector<int> reduce_count(static_cast<size_t>(R), 0);
  std::vector<int> pending_reduce(static_cast<size_t>(R), -1);  // k of this worker's unfinished allreduce
  std::vector<size_t> pending_event(static_cast<size_t>(R), 0);

  auto reduce_done = [&](int stage, int k, double* end) {
    const Reduce& rd = reduces[{stage, k}];
    if (rd.arrived < S.layout.replicas[static_cast<size_t>(stage)]) return false;
    *end = rd.last + costs.allreduce(stage);
    return true;
  };

  bool progress = true;
  while (progress) {
    progress = false;
    for (int w = 0; w < R; ++w) {
      const auto& acts = S.workers[static_cast<size_t>(w)];
      const int stage = S.layout.stage_of(w);
      size_t& i = pc[static_cast<size_t>(w)];
      double& t = clock[static_cast<size_t>(w)];
      while (i < acts.size()) {
        const Action& a = acts[i];
        double start = t, end = t;
        if (a.op == Op::send_act || a.op == Op::send_grad) {
          auto key = std::make_tuple(w, a.peer, a.op == Op::send_grad ? 1 : 0, a.mb);
          if (posted.count(key)) {
            out.ok = false;
            out.error = worker_name(S.layout, w) + " action " + std::to_string(i) + ": " + op_name(a.op) + " mb " +
                        std::to_string(a.mb) + " to rank " + std::to_string(a.peer) + " is sent twice";
            return out;
          }
          posted[key] = {t + costs.transfer(w, a.peer, a), i};
        } else if (a.op == Op::recv_act || a.op == Op::recv_grad) {
          auto key = std::make_tuple(a.peer, w, a.op == Op::recv_grad ? 1 : 0, a.mb);
          auto it = posted.find(key);
          if (it == posted.end()) break;  // blocked
          end = std::max(t, it->second.first);
          posted.erase(it);
        } else if (a.op == Op::allreduce) {
          const int k = reduce_count[static_cast<size_t>(w)]++;
          Reduce& rd = reduces[{stage, k}];
          if (rd.group >= 0 && rd.group != a.mb) {
            out.ok = false;
            out.error = worker_name(S.layout, w) + " action " + std::to_string(i) + ": ALLREDUCE " + std::to_string(k) +
                        " is for group " + std::to_string(a.mb) + " but a replica reduces group " + std::to_string(rd.group);
            return out;
          }
          rd.group = a.mb;
          ++rd.arrived;
          rd.last = std::max(rd.last, t);
          pending_reduce[static_cast<size_t>(w)] = k;
          pending_event[static_cast<size_t>(w)] = i;
        } else if (a.op == Op::optimizer_step && pending_reduce[static_cast<size_t>(w)] >= 0) {
          double rend;
          if (!reduce_done(stage, pending_reduce[static_cast<size_t>(w)], &rend)) break;  // blocked
          out.events[static_cast<size_t>(w)][pending_event[static_cast<size_t>(w)]].end = rend;
          pending_reduce[static_cast<size_t>(w)] = -1;
          start = std::max(t, rend);
          end = start + costs.compute(w, a);
        } else {
          end = t + costs.compute(w, a);
        }
        out.events[static_cast<size_t>(w)].push_back({static_cast<int32_t>(i), start, end});
        if (a.op != Op::allreduce) t = end;
        ++i;
        progress = true;
      }
    }
  }
  std::ostringstream err;
  for (int w = 0; w < R; ++w) {
    const auto& acts = S.workers[static_cast<size_t>(w)];
    const size_t i = pc[static_cast<size_t>(w)];
    if (i < acts.size()) {
      const Action& a = acts[i];
      err << "  " << worker_name(S.layout, w) << " blocked at action " << i << ": " << op_name(a.op) << " mb " << a.mb;
      if (a.peer >= 0) err << " from rank " << a.peer;
      if (a.op == Op::optimizer_step) err << " (waiting for its replicas' ALLREDUCE)";
      err << "\n";
    }
  }
  if (!err.str().empty()) {
    out.ok = false;
    out.error = "deadlock: no worker can proceed:\n" + err.str();
    return out;
  }
  for (auto& [key, v] : posted) {
    out.ok = false;
    out.error += worker_name(S.layout, std::get<0>(key)) + " action " + std::to_string(v.second) + ": " +
                 (std::get<2>(key) ? "SEND_GRAD" : "SEND_ACT") + " mb " + std::to_string(std::get<3>(key)) + " to rank " +
                 std::to_string(std::get<1>(key)) + " is never received\n";
  }
  for (int w = 0; w < R; ++w) out.makespan = std::max(out.makespan, clock[static_cast<size_t>(w)]);
  for (int w = 0; w < R; ++w)
    for (auto& e : out.events[static_cast<size_t>(w)]) out.makespan = std::max(out.makespan, e.end);
  return out;
}

}  // namespace pt
