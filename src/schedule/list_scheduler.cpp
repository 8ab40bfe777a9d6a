// The list scheduler (schedule_registry.hpp): a unit-cost simulation of every worker at once. An
// idle worker starts, among the actions whose inputs have arrived, the one that can start
// first, breaking ties by priority: I (or B) first, shallowest stage first; then F while the
// rank holds fewer than cap(rank) chunk activations, deepest stage first; then the oldest W.
// Units of a stage run in order, and (flush) a stage starts forwarding update group g+1
// only after its last backward of group g. Ties between workers go to the lower rank.
#include <climits>
#include <deque>
#include <map>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

struct Lane {  // one stage on one worker
  std::vector<int64_t> units, left;
  size_t nf = 0, ni = 0;
  int64_t groups_done = 0;
};

struct Candidate {
  Op op;
  int stage;
  int64_t mb, start;
  int prio, sub;
  bool operator<(const Candidate& o) const {
    return std::tie(start, prio, sub, mb) < std::tie(o.start, o.prio, o.sub, o.mb);
  }
};

class ListScheduler {
 public:
  ListScheduler(Schedule& S, const std::function<int(int)>& cap) : S_(S), L_(S.layout), cap_(cap) {
    const size_t U = static_cast<size_t>(S.units()), K = static_cast<size_t>(L_.stages());
    fdone_.assign(K, std::vector<int64_t>(U, -1));
    idone_ = fdone_;
    clock_.assign(static_cast<size_t>(L_.ranks()), 0);
    held_.assign(clock_.size(), 0);
    pending_w_.resize(clock_.size());
    for (int w = 0; w < L_.ranks(); ++w)
      for (int s : L_.stages_of_rank(w)) {
        Lane& l = lanes_[{w, s}];
        l.units = replica_units(S, s, L_.replica_of(w));
        l.left.assign(static_cast<size_t>(S.groups(s)), 0);
        for (int64_t m : l.units) ++l.left[static_cast<size_t>(S.group_of(s, m))];
        skip_finished_groups(l);
        remaining_ += static_cast<int64_t>(l.units.size()) * (S.def->split_backward ? 3 : 2);
      }
  }

  void run() {
    while (remaining_ > 0) {
      int best_w = -1;
      Candidate best{};
      for (int w = 0; w < L_.ranks(); ++w) {
        Candidate c{};
        if (pick(w, &c) && (best_w < 0 || c.start < best.start)) best = c, best_w = w;
      }
      PT_CHECK(best_w >= 0, S_.def->name << ": the list scheduler stalled (memory cap too small for this layout)");
      apply(best_w, best);
    }
  }

 private:
  bool pick(int w, Candidate* out) {
    std::vector<Candidate> c;
    const int64_t t = clock_[static_cast<size_t>(w)];
    const Op bwd = S_.def->split_backward ? Op::backward_input : Op::backward;
    // a worker's updates of group g follow its last backward work of g on every stage it
    // holds (insert_updates), so no stage forwards group g+1 before all of them finished g
    int64_t worker_done = INT64_MAX;
    for (int s : L_.stages_of_rank(w)) worker_done = std::min(worker_done, lanes_.at({w, s}).groups_done);
    for (int s : L_.stages_of_rank(w)) {
      Lane& l = lanes_.at({w, s});
      if (l.nf < l.units.size() && held_[static_cast<size_t>(w)] < cap_(w)) {
        const int64_t m = l.units[l.nf];
        const int64_t dep = s == 0 ? 0 : fdone_[static_cast<size_t>(s - 1)][static_cast<size_t>(m)];
        if (dep >= 0 && (!S_.def->flush || S_.group_of(s, m) == worker_done))
          c.push_back({Op::forward, s, m, std::max(t, dep), 1, -s});
      }
      if (l.ni < l.nf) {
        const int64_t m = l.units[l.ni];
        const int64_t up = s == L_.stages() - 1 ? 0 : idone_[static_cast<size_t>(s + 1)][static_cast<size_t>(m)];
        if (up >= 0) c.push_back({bwd, s, m, std::max({t, up, fdone_[static_cast<size_t>(s)][static_cast<size_t>(m)]}), 0, s});
      }
    }
    auto& pw = pending_w_[static_cast<size_t>(w)];
    if (!pw.empty()) c.push_back({Op::backward_weight, pw.front().first, pw.front().second,
                                  std::max(t, idone_[static_cast<size_t>(pw.front().first)][static_cast<size_t>(pw.front().second)]), 2, 0});
    if (c.empty()) return false;
    *out = *std::min_element(c.begin(), c.end());
    return true;
  }

  void apply(int w, const Candidate& c) {
    const int64_t cost = c.op == Op::backward ? 2 : 1;
    const int64_t end = c.start + cost;
    clock_[static_cast<size_t>(w)] = end;
    S_.workers[static_cast<size_t>(w)].push_back(compute_action(c.op, c.stage, c.mb));
    --remaining_;
    Lane& l = lanes_.at({w, c.stage});
    if (c.op == Op::forward) {
      fdone_[static_cast<size_t>(c.stage)][static_cast<size_t>(c.mb)] = end;
      ++l.nf, ++held_[static_cast<size_t>(w)];
      return;
    }
    if (c.op != Op::backward_weight) {
      idone_[static_cast<size_t>(c.stage)][static_cast<size_t>(c.mb)] = end;
      ++l.ni;
      if (c.op == Op::backward_input) {
        pending_w_[static_cast<size_t>(w)].push_back({c.stage, c.mb});
        return;
      }
    } else {
      pending_w_[static_cast<size_t>(w)].pop_front();
    }
    --held_[static_cast<size_t>(w)];
    --l.left[static_cast<size_t>(S_.group_of(c.stage, c.mb))];
    skip_finished_groups(l);
  }

  static void skip_finished_groups(Lane& l) {
    while (l.groups_done < static_cast<int64_t>(l.left.size()) && l.left[static_cast<size_t>(l.groups_done)] == 0) ++l.groups_done;
  }

  Schedule& S_;
  const Layout& L_;
  std::function<int(int)> cap_;
  std::map<std::pair<int, int>, Lane> lanes_;
  std::vector<std::vector<int64_t>> fdone_, idone_;  // finish tick per (stage, unit), -1 not yet
  std::vector<int64_t> clock_;
  std::vector<int> held_;
  std::vector<std::deque<std::pair<int, int64_t>>> pending_w_;
  int64_t remaining_ = 0;
};

}  // namespace

void generate_list_scheduled(Schedule& S, const std::function<int(int rank)>& cap) {
  ListScheduler(S, cap).run();
}

}  // namespace pt
