// make_schedule: a registered generator's compute actions, then the common passes: update
// insertion, version assignment (the one version rule) and communication lowering for any
// placement. Also the Schedule's group arithmetic and the evaluation schedule.
#include <array>
#include <climits>
#include <map>

#include "passes.hpp"
#include "pipetrain/error.hpp"

namespace pt {

int64_t Schedule::group_of(int stage, int64_t mb) const { return mb / microbatches / version_stride(stage); }

int64_t Schedule::groups(int stage) const { return training() ? steps / version_stride(stage) : 0; }

int64_t Schedule::version_stride(int stage) const { return def->version_stride(layout, stage); }
bool Schedule::training() const { return def->training; }
std::string Schedule::name() const { return def ? def->name : "?"; }

int32_t rule_version(const Schedule& S, Op op, int s, int64_t m, int64_t latest, int32_t fwd, int32_t v0) {
  return S.def->versions.read(VersionQuery{S, op, s, m, latest, fwd, v0});
}

namespace {

// Per (worker, stage): units left in each update group, and the updates emitted so far.
struct GroupCounter {
  std::vector<int64_t> left;
  int64_t done = 0;
};

std::map<int, GroupCounter> group_counters(const Schedule& S, int rank) {
  std::map<int, GroupCounter> out;
  const int replica = S.layout.replica_of(rank);
  for (int s : S.layout.stages_of_rank(rank)) {
    GroupCounter& c = out[s];
    c.left.assign(static_cast<size_t>(S.groups(s)), 0);
    for (int64_t m : replica_units(S, s, replica)) ++c.left[static_cast<size_t>(S.group_of(s, m))];
  }
  return out;
}

}  // namespace

// One worker's updates. With one stage: ALLREDUCE and OPTIMIZER_STEP of each group right
// after its last B or W. With several stages (looped, V; flush schedules): each stage's
// ALLREDUCE starts as soon as its group is done, but the worker's OPTIMIZER_STEPs of group
// g come together after its last backward work of g on any stage, so that no update waits
// (for a replica or a tied gradient) while the worker still owes another stage's backward.
// With S.grad_norm the worker's GRAD_NORM of g comes right before its first OPTIMIZER_STEP
// of g (after the ALLREDUCEs of g): the rank's last backward work of g is done there.
class UpdateInserter {
 public:
  UpdateInserter(const Schedule& S, int w)
      : S_(S), counters_(group_counters(S, w)), multi_(counters_.size() > 1), first_(static_cast<int16_t>(counters_.begin()->first)) {}

  std::vector<Action> run(const std::vector<Action>& acts) {
    for (auto& [s, c] : counters_) complete(s);
    for (const Action& a : acts) {
      out_.push_back(a);
      if (a.op != Op::backward && a.op != Op::backward_weight) continue;
      --counters_[a.stage].left[static_cast<size_t>(S_.group_of(a.stage, a.mb))];
      complete(a.stage);
    }
    return std::move(out_);
  }

 private:
  void complete(int s) {
    GroupCounter& c = counters_[s];
    while (c.done < static_cast<int64_t>(c.left.size()) && c.left[static_cast<size_t>(c.done)] == 0) {
      const int32_t g = static_cast<int32_t>(c.done++);
      if (S_.layout.replicas_of(s) > 1) out_.push_back({Op::allreduce, static_cast<int16_t>(s), g, -1, -1});
      if (!multi_) norm(g), out_.push_back({Op::optimizer_step, static_cast<int16_t>(s), g, -1, -1});
    }
    while (multi_ && all_done(stepped_)) {
      norm(static_cast<int32_t>(stepped_));
      for (auto& [st, cc] : counters_) out_.push_back({Op::optimizer_step, static_cast<int16_t>(st), static_cast<int32_t>(stepped_), -1, -1});
      ++stepped_;
    }
  }
  void norm(int32_t g) {
    if (S_.grad_norm) out_.push_back({Op::grad_norm, first_, g, -1, -1});
  }
  bool all_done(int64_t g) const {
    for (auto& [st, cc] : counters_)
      if (cc.done <= g) return false;
    return true;
  }

  const Schedule& S_;
  std::map<int, GroupCounter> counters_;
  bool multi_;
  int16_t first_;  // the worker's first stage: GRAD_NORM's stage field
  int64_t stepped_ = 0;
  std::vector<Action> out_;
};

void insert_updates(Schedule& S) {
  if (!S.training()) return;
  for (int w = 0; w < S.layout.ranks(); ++w)
    S.workers[static_cast<size_t>(w)] = UpdateInserter(S, w).run(S.workers[static_cast<size_t>(w)]);
}

void assign_versions(Schedule& S) {
  const int64_t U = S.units();
  std::vector<int32_t> v0(static_cast<size_t>(U), 0);  // stage 0's forward versions (group 0 ranks come first)
  for (int w = 0; w < S.layout.ranks(); ++w) {
    std::map<int, int64_t> latest;
    std::map<int, std::map<int32_t, int32_t>> fwd;
    for (Action& a : S.workers[static_cast<size_t>(w)]) {
      if (a.op == Op::optimizer_step) {
        latest[a.stage] += S.version_stride(a.stage);
        a.version = static_cast<int32_t>(latest[a.stage]);
      } else if (is_compute(a.op)) {
        auto f = fwd[a.stage].find(a.mb);
        a.version = rule_version(S, a.op, a.stage, a.mb, latest[a.stage], f == fwd[a.stage].end() ? -1 : f->second,
                                 v0[static_cast<size_t>(a.mb)]);
        if (a.op == Op::forward) {
          fwd[a.stage][a.mb] = a.version;
          if (a.stage == 0) v0[static_cast<size_t>(a.mb)] = a.version;
        }
      }
    }
  }
}

void lower_comm(Schedule& S) {
  const Layout& L = S.layout;
  const int K = L.stages();
  for (auto& acts : S.workers) {
    std::vector<Action> out;
    out.reserve(acts.size() * 2);
    for (const Action& a : acts) {
      const int s = a.stage;
      auto msg = [&](Op op, int peer_stage) {
        out.push_back({op, a.stage, a.mb, -1, static_cast<int32_t>(L.rank_for(peer_stage, a.mb))});
      };
      if (a.op == Op::forward && s > 0) msg(Op::recv_act, s - 1);
      if (is_backward(a.op) && s < K - 1) msg(Op::recv_grad, s + 1);
      out.push_back(a);
      if (a.op == Op::forward && s < K - 1) msg(Op::send_act, s + 1);
      if (is_backward(a.op) && s > 0) msg(Op::send_grad, s - 1);
    }
    acts = std::move(out);
  }
}

int message_boundary(const Action& a) {
  switch (a.op) {
    case Op::send_act: return a.stage;
    case Op::recv_act: return a.stage - 1;
    case Op::send_grad: return a.stage - 1;
    case Op::recv_grad: return a.stage;
    default: return -1;
  }
}

MessageKey message_key(int rank, const Action& a) {
  const bool send = a.op == Op::send_act || a.op == Op::send_grad;
  const bool grad = a.op == Op::send_grad || a.op == Op::recv_grad;
  return {send ? rank : a.peer, send ? a.peer : rank, grad ? 1 : 0, message_boundary(a), a.mb};
}

Schedule make_schedule(const ScheduleDef& def, const Layout& layout, int64_t steps, int microbatches, bool grad_norm) {
  Schedule S;
  S.def = &def;
  S.layout = layout;
  S.steps = steps;
  S.microbatches = def.units_per_minibatch(microbatches);
  S.grad_norm = grad_norm && def.flush && def.training;
  PT_CHECK(layout.placement == def.placement, def.name << " runs on the " << placement_name(def.placement)
                                                       << " placement, the layout is " << placement_name(layout.placement));
  PT_CHECK(S.units() < INT32_MAX, "schedule too long: " << S.units() << " units");
  const std::string why = def.problem(layout, S.microbatches);
  PT_CHECK(why.empty(), def.name << ": " << why);
  PT_CHECK(steps % def.boundary_stride(layout) == 0, def.name << " needs the minibatch count (" << steps
                                                                << ") to be a multiple of every stage's update stride (replicas "
                                                                << layout.replication() << ")");
  S.workers.resize(static_cast<size_t>(layout.ranks()));
  def.generate(S);
  insert_updates(S);
  assign_versions(S);
  lower_comm(S);
  return S;
}

double unit_makespan(const Schedule& compute_only) {
  Schedule S = compute_only;
  S.grad_norm = false;  // a generator's choice never depends on clipping
  insert_updates(S);
  assign_versions(S);
  lower_comm(S);
  const Replay rp = replay(S, unit_costs(S.layout));
  return rp.ok ? rp.makespan : 1e300;
}

Schedule make_schedule(const std::string& name, const Layout& layout, int64_t steps, int microbatches, bool grad_norm) {
  return make_schedule(schedule_def(name), layout, steps, microbatches, grad_norm);
}

namespace {

// Evaluation: every unit forwarded once through every stage, each worker in unit order
// (the stages it holds ascending per unit). Nothing is updated.
void generate_eval(Schedule& S) {
  for (int w = 0; w < S.layout.ranks(); ++w) {
    const int q = S.layout.replica_of(w);
    for (int64_t m = 0; m < S.units(); ++m)
      for (int s : S.layout.stages_of_rank(w))
        if (S.layout.replica_for(s, m) == q) S.workers[static_cast<size_t>(w)].push_back(compute_action(Op::forward, s, m));
  }
}

ScheduleDef make_eval_def(Placement p) {
  ScheduleDef d;
  d.name = "eval";
  d.doc = "forward-only pass over the test set";
  d.deck_choice = d.planner = d.training = false;
  d.placement = p;
  d.versions = VersionRule{};
  d.versions.read = [](const VersionQuery&) { return 0; };  // the first: nothing is updated
  d.generate = generate_eval;
  return d;
}

// One entry per placement, built once (thread-safe: tests run ranks as threads).
const ScheduleDef& eval_def(Placement p) {
  static const std::array<ScheduleDef, 3> defs = {make_eval_def(Placement::contiguous), make_eval_def(Placement::looped),
                                                   make_eval_def(Placement::v)};
  return defs[static_cast<size_t>(p)];
}

}  // namespace

Schedule make_eval_schedule(const Layout& layout, int64_t units) {
  return make_schedule(eval_def(layout.placement), layout, units, 1);
}

}  // namespace pt
