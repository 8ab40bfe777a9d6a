// choose_plan: the DP per candidate schedule and microbatch count, each result replayed by
// the simulator; the fastest plan that fits memory wins. Recomputation is chosen jointly:
// when the cap decided (a faster plan did not fit, or none did), every schedule, split,
// replication and M is planned again under selective and full recomputation. Baselines: bsp
// (one stage, every rank a replica) and the straight pipeline (one replica per stage).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <numeric>
#include <set>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"

namespace pt {
namespace {


// Divisors of B up to 4N (at least 8); at most 8 of them, keeping 1, the powers of two and
// the largest. Large jobs (more than `exact` ranks) try only the three largest powers of
// two: small M leaves most of a deep pipeline idle there.
std::vector<int> auto_microbatches(int64_t B, int ranks, int exact) {
  const int64_t limit = std::min<int64_t>(B, std::max<int64_t>(8, 4 * static_cast<int64_t>(ranks)));
  std::vector<int> d;
  for (int64_t m = 1; m <= limit; ++m)
    if (B % m == 0) d.push_back(static_cast<int>(m));
  if (ranks > exact) {
    std::vector<int> p;
    for (int m : d)
      if ((m & (m - 1)) == 0) p.push_back(m);
    while (p.size() > 3) p.erase(p.begin());
    return p;
  }
  if (d.size() <= 8) return d;
  std::vector<int> keep;
  for (int m : d)
    if ((m & (m - 1)) == 0) keep.push_back(m);
  if (std::find(keep.begin(), keep.end(), d.back()) == keep.end()) keep.push_back(d.back());
  while (keep.size() > 8) keep.erase(keep.begin() + 1);  // drop the small ones first (keep 1)
  return keep;
}

PlanCandidate run_candidate(const Profile& p, const ClusterModel& net, const std::string& label, const ScheduleDef& kind,
                            int M, int64_t B, const Layout& layout, double dp_obj, const PlanOptions& o) {
  PlanCandidate c;
  c.label = label;
  c.schedule = kind.name;
  c.microbatches = kind.units_per_minibatch(M);
  c.batch_size = B;
  c.layout = layout;
  c.dp_objective = dp_obj;
  if (o.veto) c.note = o.veto(kind, layout);
  if (!c.note.empty()) {
    c.fits = false;
    return c;
  }
  SimConfig cfg;
  cfg.def = &kind;
  cfg.layout = layout;
  cfg.microbatches = c.microbatches;
  cfg.batch_size = B;
  cfg.keep_schedule = false;
  cfg.max_actions = o.sim_budget;
  cfg.memory = o.memory, cfg.memory_shared = o.memory_shared;
  cfg.recompute.assign(static_cast<size_t>(layout.stages()), o.recompute);
  cfg.tensor = o.tensor;
  c.recompute = o.recompute;
  c.sim = simulate(p, net, cfg);
  if (!c.sim.ok) {
    c.fits = false;
    c.note = c.sim.error;
  } else {
    c.fits = o.memory_cap <= 0 || c.sim.max_memory <= o.memory_cap;
    if (!c.fits) c.note = "exceeds the memory cap";
  }
  return c;
}

// The time a candidate is judged by: its simulated time per sample, divided by (1 - margin)
// when its update averages more than one minibatch (statistical efficiency, docs/PLANNER.md).
// One score per candidate keeps the comparison transitive across any mix of update sizes.
double judged_time(const PlanCandidate& c, double margin) {
  const bool grows = c.samples_per_update() > c.batch_size;
  return grows && margin > 0 ? c.sim.time_per_sample / (1.0 - margin) : c.sim.time_per_sample;
}

// a preferred to b: fits, and faster (judged_time) by more than 0.5%, or as fast (within 0.5%)
// with clearly less traffic on the network (PipeDream's second aim)
bool better(const PlanCandidate& a, const PlanCandidate& b, double margin) {
  if (!a.fits || !a.sim.ok) return false;
  if (!b.fits || !b.sim.ok) return true;
  const double ta = judged_time(a, margin), tb = judged_time(b, margin);
  if (ta < tb * (1 - 5e-3)) return true;
  if (ta > tb * (1 + 5e-3)) return false;
  return a.sim.network_bytes_per_sample < b.sim.network_bytes_per_sample * 0.99 ||
         (a.sim.network_bytes_per_sample <= b.sim.network_bytes_per_sample * 1.01 && ta < tb * (1 - 1e-9));
}

// The fastest eligible candidate by predicted time alone; when the margin chose another, why.
std::string margin_note(const Plan& plan, const PlanCandidate& best, double margin) {
  const PlanCandidate* fastest = &best;
  std::vector<const PlanCandidate*> all;
  for (const PlanCandidate& c : plan.candidates) all.push_back(&c);
  if (plan.has_bsp) all.push_back(&plan.bsp);
  if (plan.has_straight) all.push_back(&plan.straight);
  for (const PlanCandidate* c : all)
    if (c->fits && c->sim.ok && c->batch_size == best.batch_size && best.batch_size % c->microbatches == 0 &&
        better(*c, *fastest, 0.0))
      fastest = c;
  const auto grows = [](const PlanCandidate& c) { return c.samples_per_update() > c.batch_size; };
  if (fastest == &best || !grows(*fastest) || grows(best)) return "";
  char b[400];
  std::snprintf(b, sizeof b,
                "chose %s (%lld samples per update) over %s %s, predicted %.1f%% faster but averaging %lld samples "
                "per update: a larger update must be faster by more than %.0f%% (batch_growth_margin)",
                best.schedule.c_str(), static_cast<long long>(best.samples_per_update()), fastest->schedule.c_str(),
                fastest->layout.replication().c_str(), 100.0 * (best.sim.time_per_sample / fastest->sim.time_per_sample - 1.0),
                static_cast<long long>(fastest->samples_per_update()), 100.0 * margin);
  return b;
}

// Local search from a simulated candidate: move one stage boundary by 1, 2, 4 or 8 layers,
// or one replica between neighbouring stages; take the first move the simulator finds
// faster (and that fits), until none is or o.refine_steps simulations were spent. The DP's
// model (slowest stage) misses pipeline dynamics the replay sees: warm-up, replicas
// waiting for each other at their allreduce, transfers on the critical path.
PlanCandidate refine(const Profile& p, const ClusterModel& net, const PlanCandidate& start, const PlanOptions& o) {
  PlanCandidate cur = start;
  const ScheduleDef& kind = schedule_def(start.schedule);
  int spent = 0;
  for (bool improved = true; improved && spent < o.refine_steps;) {
    improved = false;
    const Layout& l = cur.layout;
    const int K = l.stages(), Lyr = l.end_layer(K - 1);
    std::vector<Layout> moves;
    for (int s = 1; s < K; ++s)
      for (int d : {1, -1, 2, -2, 4, -4, 8, -8}) {
        std::vector<int> first(l.first.begin(), l.first.end() - 1);
        first[static_cast<size_t>(s)] += d;
        if (first[static_cast<size_t>(s)] <= first[static_cast<size_t>(s) - 1] ||
            first[static_cast<size_t>(s)] >= (s + 1 < K ? first[static_cast<size_t>(s) + 1] : Lyr))
          continue;
        moves.push_back(Layout::make(first, Lyr, l.replicas));
      }
    for (int s = 0; s + 1 < K; ++s)
      for (int d : {1, -1}) {
        std::vector<int> reps = l.replicas;
        reps[static_cast<size_t>(s)] += d;
        reps[static_cast<size_t>(s) + 1] -= d;
        if (reps[static_cast<size_t>(s)] < 1 || reps[static_cast<size_t>(s) + 1] < 1) continue;
        moves.push_back(Layout::make(std::vector<int>(l.first.begin(), l.first.end() - 1), Lyr, reps));
      }
    for (const Layout& m : moves) {
      if (spent >= o.refine_steps) break;
      ++spent;
      PlanCandidate c = run_candidate(p, net, start.label + " refined", kind, start.microbatches, start.batch_size, m,
                                      start.dp_objective, o);
      if (better(c, cur, o.batch_growth_margin)) {
        c.note = "local search from the DP's layout";
        cur = c;
        improved = true;
        break;
      }
    }
  }
  return cur;
}

// Cut the chain into K contiguous non-empty stages of near-equal compute: stage k ends at
// the first layer where the prefix sum reaches (k+1)/K of the total, leaving a layer for
// each later stage.
std::vector<int> balanced_split(const Profile& p, int K) {
  const int L = static_cast<int>(p.layers.size());
  std::vector<double> pre(static_cast<size_t>(L) + 1, 0.0);
  for (int i = 0; i < L; ++i)
    pre[static_cast<size_t>(i) + 1] = pre[static_cast<size_t>(i)] + p.layers[static_cast<size_t>(i)].forward_s + p.layers[static_cast<size_t>(i)].backward_s;
  std::vector<int> first = {0};
  for (int k = 1; k < K; ++k) {
    const double target = pre.back() * k / K;
    int b = first.back() + 1;
    while (b < L - (K - k) && pre[static_cast<size_t>(b)] < target) ++b;
    first.push_back(b);
  }
  return first;
}

// Several stages per rank (looped, V placements) have no DP here: for every rank-group count
// p dividing N (r = N / p replicas each) the chain is cut into p x 2 stages of near-equal
// compute (two chunks per rank), and every microbatch count the schedule accepts is replayed.
std::vector<PlanCandidate> chunked_candidates(const Profile& p, const ClusterModel& net, const ScheduleDef& kind, int N, int64_t B,
                                              const std::vector<int>& Ms, const PlanOptions& o) {
  std::vector<PlanCandidate> out;
  const int L = static_cast<int>(p.layers.size());
  for (int groups = 2; groups <= N; ++groups) {
    if (N % groups != 0 || 2 * groups > L) continue;
    const Layout layout = Layout::make(balanced_split(p, 2 * groups), L, std::vector<int>(static_cast<size_t>(groups), N / groups),
                                       kind.placement);
    for (int M : Ms) {
      if (B % M != 0 || !kind.problem(layout, M).empty()) continue;
      out.push_back(run_candidate(p, net, "plan (balanced chunks)", kind, M, B, layout, 0.0, o));
    }
  }
  return out;
}

// One choose_plan call: the DP per candidate schedule and microbatch count (results shared
// between kinds whose chain model is the same), each layout replayed by the simulator, then
// the baselines; keeps the best candidate so far.
class Chooser {
 public:
  Chooser(const Profile& p, const ClusterModel& net, int N, const PlanOptions& o, Plan& plan)
      : p_(p), net_(net), N_(N), B_(plan.batch_size), L_(plan.layers), o_(o), plan_(plan) {
    dpo_.memory_cap = o.memory_cap;
    dpo_.replicas = o.replicas;
    Ms_ = o.microbatches.empty() ? auto_microbatches(B_, N, dpo_.exact_ranks_limit) : o.microbatches;
    large_ = N > dpo_.exact_ranks_limit;
    serial_too_ = o.serial_variant && !large_;
  }

  // Every candidate of one schedule: balanced chunks (several stages per rank), else the DP
  // per microbatch count and the simulator's refinement.
  void schedule_candidates(const std::string& name) {
    const ScheduleDef& kind = schedule_def(name);
    if (kind.placement != Placement::contiguous) {
      for (PlanCandidate& c : chunked_candidates(p_, net_, kind, N_, B_, Ms_, o_)) {
        consider(c);
        plan_.candidates.push_back(std::move(c));
      }
      return;
    }
    std::vector<int> ms = kind.per_minibatch_units ? std::vector<int>{1} : Ms_;
    // large jobs: from the most microbatches down, stop at the first that fits (fewer
    // microbatches only add bubble; they are tried when memory rules the larger out)
    if (large_) std::sort(ms.rbegin(), ms.rend());
    std::vector<std::pair<double, int>> kind_ms;
    PlanCandidate kind_best;
    for (int M : ms) {
      if (M < 1 || B_ % M != 0) continue;
      if (large_ && !kind_ms.empty()) break;
      microbatch_candidates(kind, name, M, kind_ms, kind_best);
    }
    // small jobs: refine this schedule's best layout with the simulator itself
    if (!large_ && o_.refine_steps > 0 && !kind_best.schedule.empty()) {
      PlanCandidate r = refine(p_, net_, kind_best, o_);
      if (better(r, kind_best, o_.batch_growth_margin)) {
        plan_.candidates.push_back(r);
        if (better(r, best_, o_.batch_growth_margin)) best_ = r;
      }
    }
    std::sort(kind_ms.begin(), kind_ms.end());
    std::vector<int> order;
    for (auto& km : kind_ms)
      if (std::find(order.begin(), order.end(), km.second) == order.end()) order.push_back(km.second);
    for (int M : ms)  // then the rest
      if (B_ % M == 0 && std::find(order.begin(), order.end(), M) == order.end()) order.push_back(M);
    ms_per_kind_.push_back({&kind, order});
  }

  // bsp (one stage, every rank a replica, one microbatch per replica) and the straight
  // pipeline; either wins when it beats every candidate.
  void baselines() {
    const int64_t bb = o_.bsp_batch > 0 ? o_.bsp_batch : B_;
    Layout dpl = Layout::make({0}, L_, {N_});
    const ScheduleDef& dp = flagged_schedule(&ScheduleDef::data_parallel);
    plan_.bsp = run_candidate(p_, net_, dp.name, dp, N_, bb, dpl, 0.0, o_);
    plan_.has_bsp = plan_.bsp.sim.ok;
    if (L_ >= N_ && N_ > 1) {
      const PlanCandidate sb = straight_baseline();
      if (!sb.schedule.empty() && sb.sim.ok) {
        plan_.straight = sb;
        plan_.has_straight = true;
      }
    }
    for (const PlanCandidate* c : {&plan_.bsp, &plan_.straight})
      if (c->sim.ok && c->batch_size == B_ && B_ % c->microbatches == 0 && better(*c, best_, o_.batch_growth_margin))
        best_ = *c, have_ = true;
  }

  bool have() const { return have_; }
  void recompute(Recompute r) { o_.recompute = r; }
  const PlanCandidate& best() const { return best_; }

 private:
  // The DP of one chain model, or a cached result that is also optimal for it. A result is
  // reused for another memory rule when its rule never needs more memory (the rule's
  // `least`: fewest in flight, one version) and its layout fits the other rule too: the
  // optimum over the larger feasible set is then feasible, hence optimal, for the smaller.
  // The DP's chain for one schedule and microbatch count, with the memory model's sources.
  ChainCosts chain_costs(const ScheduleDef& kind, int M) const {
    ChainCosts cc = ChainCosts::from_profile(p_, kind, M, B_, o_.recompute);
    cc.memory = o_.memory, cc.memory_shared = o_.memory_shared;
    return cc;
  }

  DpResult run_dp(const ChainCosts& cc, const DpOptions& opt) {
    const bool rule_matters = opt.memory_cap > 0;  // without a cap the memory rule does not matter
    for (const Cached& k : cache_) {
      if (k.amortized != cc.amortized || k.serial != cc.serial_allreduce || k.units != cc.units ||
          k.recompute != cc.recompute || opt.replicas != dpo_.replicas)
        continue;
      if (!rule_matters || (k.rule == cc.rule && k.split == cc.split_backward)) return k.dp;
      if (k.rule && k.rule->least && !cc.amortized && k.dp.ok && evaluate_layout(cc, net_, k.dp.layout(L_), opt.memory_cap).fits)
        return k.dp;
    }
    DpResult r = plan_dp(cc, net_, N_, opt);
    plan_.dp_evaluations += r.evaluations;
    if (opt.replicas == dpo_.replicas)
      cache_.push_back({cc.amortized, cc.serial_allreduce, cc.split_backward, cc.units, cc.rule, cc.recompute, r});
    return r;
  }

  // The best so far: the first candidate, then any better one (`have` once one fits).
  void consider(const PlanCandidate& c) {
    if (!have_ || better(c, best_, o_.batch_growth_margin)) best_ = c, have_ = c.fits && c.sim.ok;
  }

  // One schedule at M microbatches: the DP (and its serial-allreduce variant), each new
  // layout simulated; fitting ones recorded in kind_ms and kind_best.
  void microbatch_candidates(const ScheduleDef& kind, const std::string& name, int M,
                             std::vector<std::pair<double, int>>& kind_ms, PlanCandidate& kind_best) {
    std::vector<Layout> tried;
    for (int variant = 0; variant < (serial_too_ ? 2 : 1); ++variant) {
      ChainCosts cc = chain_costs(kind, M);
      cc.serial_allreduce = variant == 1;
      cc.ranks = N_;
      const DpResult dp = run_dp(cc, dpo_);
      PlanCandidate c;
      c.label = variant ? "plan (serial)" : "plan";
      c.schedule = name;
      c.microbatches = kind.units_per_minibatch(M);
      c.batch_size = B_;
      c.fits = false;
      if (!dp.ok) {
        c.note = "no split fits the memory cap";
        c.sim.ok = false;  // not simulated
        c.no_split_fits = true;
        if (variant == 0) plan_.candidates.push_back(c);
        continue;
      }
      const Layout layout = dp.layout(L_);
      bool seen = false;
      for (const Layout& t : tried) seen = seen || (t.first == layout.first && t.replicas == layout.replicas);
      if (seen) continue;
      tried.push_back(layout);
      if (const std::string why = kind.problem(layout, c.microbatches); !why.empty()) {
        c.layout = layout;
        c.dp_objective = dp.objective;
        c.note = why;
        plan_.candidates.push_back(c);
        continue;
      }
      c = run_candidate(p_, net_, c.label, kind, M, B_, layout, dp.objective, o_);
      plan_.candidates.push_back(c);
      if (c.fits && c.sim.ok) kind_ms.push_back({c.sim.time_per_sample, M});
      if (c.fits && c.sim.ok && (kind_best.schedule.empty() || better(c, kind_best, o_.batch_growth_margin))) kind_best = c;
      consider(c);
    }
  }

  // The straight pipeline: N stages of one replica, each kind at its best M that replays.
  PlanCandidate straight_baseline() {
    DpOptions so = dpo_;
    so.replicas = ReplicaSet::one;
    PlanCandidate sb;
    bool sh = false;
    if (large_ && have_)  // large jobs: the chosen plan's schedule first, others only if it fails
      std::stable_sort(ms_per_kind_.begin(), ms_per_kind_.end(), [&](const auto& a, const auto& b) {
        return a.first->name == best_.schedule && b.first->name != best_.schedule;
      });
    for (auto& [kdef, order0] : ms_per_kind_) {
      const ScheduleDef& kind = *kdef;
      if (large_ && sh) break;
      std::vector<int> order = order0;  // then smaller powers of two, for a replay within budget
      // (smaller only: a microbatch count the planner was not offered, the deck's or
      // --microbatches', is never tried)
      const int64_t below = order0.empty() ? B_ : *std::min_element(order0.begin(), order0.end()) - 1;
      for (int64_t M = 1; M <= below; M *= 2)
        if (B_ % M == 0 && std::find(order.begin(), order.end(), M) == order.end() && !kind.per_minibatch_units)
          order.push_back(static_cast<int>(M));
      std::stable_sort(order.begin() + static_cast<long>(order0.size()), order.end(), std::greater<int>());
      for (int M : order) {
        PlanCandidate c;
        if (!straight_candidate(kind, M, so, c)) continue;
        if (!order0.empty() && M != order0.front() && c.note.empty()) c.note = "M limited by the replay budget";
        if (!sh || better(c, sb, o_.batch_growth_margin)) sb = c, sh = c.fits;
        break;
      }
    }
    return sb;
  }

  // The straight pipeline of one kind at M: false when the replay would exceed the budget,
  // no split fits, the kind refuses the layout or the replay fails (try the next M).
  bool straight_candidate(const ScheduleDef& kind, int M, const DpOptions& so, PlanCandidate& c) {
    // the replay of N stages costs about (minibatches x M x N x 6) actions at least
    const int64_t min_steps = !kind.flush ? (kind.per_minibatch_units ? 2 * N_ + 1 : 3) : 2;
    if (o_.sim_budget > 0 && min_steps * M * static_cast<int64_t>(N_) * 6 > o_.sim_budget) return false;
    ChainCosts cc = chain_costs(kind, M);
    cc.ranks = N_;
    const DpResult dp = plan_dp(cc, net_, N_, so);
    plan_.dp_evaluations += dp.evaluations;
    if (!dp.ok) return false;
    const Layout layout = dp.layout(L_);
    if (!kind.problem(layout, M).empty()) return false;
    c = run_candidate(p_, net_, "straight", kind, M, B_, layout, dp.objective, o_);
    return c.sim.ok;  // too large to replay: try the next M
  }

  struct Cached {
    bool amortized, serial, split;
    int units;
    const MemoryRule* rule;
    Recompute recompute;
    DpResult dp;
  };

  const Profile& p_;
  const ClusterModel& net_;
  const int N_;
  const int64_t B_;
  const int L_;
  PlanOptions o_;  // a copy: o_.recompute is the mode being planned
  Plan& plan_;
  DpOptions dpo_;
  std::vector<int> Ms_;
  bool large_ = false, serial_too_ = false;
  std::vector<Cached> cache_;
  PlanCandidate best_;
  bool have_ = false;
  std::vector<std::pair<const ScheduleDef*, std::vector<int>>> ms_per_kind_;  // for the straight baseline: M by preference
};

}  // namespace

// Whether the memory cap decided the choice so far: nothing fits, a schedule and microbatch
// count found no split under the cap (its best time unknown, so possibly faster), or a
// simulated candidate faster than the best was refused for memory.
bool memory_decided(const Plan& plan, const Chooser& chooser) {
  if (!chooser.have()) return true;
  for (const PlanCandidate& c : plan.candidates) {
    if (c.no_split_fits) return true;
    if (c.sim.ok && !c.fits && c.sim.time_per_sample < chooser.best().sim.time_per_sample) return true;
  }
  return false;
}

// The modes planned, for the "nothing fits" message.
std::string recompute_tried(const PlanOptions& o) {
  if (o.recompute_modes.size() > 1) return " (with parallel.recompute none, selective and full)";
  return o.recompute_modes.front() == Recompute::none ? " (recomputation not allowed: parallel.recompute = \"none\" is set)"
                                                       : std::string(" (parallel.recompute = \"") + enum_name(o.recompute_modes.front()) + "\")";
}

// When recomputation was chosen: the fastest plan without it, and whether it fits.
std::string recompute_note(const Plan& plan, const PlanCandidate& best) {
  if (best.recompute == Recompute::none) return "";
  const PlanCandidate* fastest = nullptr;  // the fastest simulated plan without recomputation
  for (const PlanCandidate& c : plan.candidates)
    if (c.recompute == Recompute::none && c.sim.ok && c.sim.time_per_sample > 0 && (!fastest || c.sim.time_per_sample < fastest->sim.time_per_sample)) fastest = &c;
  std::string s = std::string("parallel.recompute = \"") + enum_name(best.recompute) + "\": ";
  if (!fastest) {
    char cap[160];
    std::snprintf(cap, sizeof cap, "no plan without recomputation fits the memory cap of %.2f GB per rank", plan.memory_cap / 1e9);
    return s + cap;
  }
  char buf[256];
  if (fastest->fits)
    std::snprintf(buf, sizeof buf, "predicted faster than every plan without recomputation (the fastest: %s, M=%d, %.3g s/sample)",
                  fastest->schedule.c_str(), fastest->microbatches, fastest->sim.time_per_sample);
  else
    std::snprintf(buf, sizeof buf,
                  "the fastest plan without recomputation (%s, M=%d, %.3g s/sample) needs %.2f GB on its fullest rank, over "
                  "the cap of %.2f GB; the fastest plan that fits recomputes",
                  fastest->schedule.c_str(), fastest->microbatches, fastest->sim.time_per_sample, fastest->sim.max_memory / 1e9,
                  plan.memory_cap / 1e9);
  return s + buf;
}

std::string join_notes(const std::string& a, const std::string& b) { return a.empty() ? b : b.empty() ? a : a + "; " + b; }

Plan choose_plan(const Profile& p, const ClusterModel& net, int N, int64_t batch, const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  Plan plan;
  plan.ranks = N;
  plan.layers = static_cast<int>(p.layers.size());
  plan.batch_size = batch > 0 ? batch : std::max<int64_t>(1, p.microbatch);
  plan.memory_cap = o.memory_cap;
  plan.profile_source = p.source;
  plan.cluster = net.describe();
  if (N < 1) {
    plan.error = "need at least one rank";
    return plan;
  }
  Chooser chooser(p, net, N, o, plan);
  // the first mode (none unless the deck chose one), then the others only when memory decided:
  // nothing fit, or a faster plan was refused for the cap
  for (size_t i = 0; i < o.recompute_modes.size(); ++i) {
    if (i > 0 && (o.memory_cap <= 0 || !memory_decided(plan, chooser))) break;
    chooser.recompute(o.recompute_modes[i]);
    for (const std::string& name : o.schedules) chooser.schedule_candidates(name);
  }
  chooser.recompute(o.recompute_modes.front());
  if (o.baselines) chooser.baselines();
  plan.plan_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!chooser.have()) {
    char cap[96];
    std::snprintf(cap, sizeof cap, "%.0f bytes (%.2f GB)", o.memory_cap, o.memory_cap / 1e9);
    plan.error = std::string("no plan fits: every candidate schedule exceeds the memory cap of ") + cap +
                 " per rank or could not be simulated" + recompute_tried(o);
    return plan;
  }
  const PlanCandidate& best = chooser.best();
  plan.ok = true;
  plan.schedule = best.schedule;
  plan.microbatches = best.microbatches;
  plan.layout = best.layout;
  plan.dp_objective = best.dp_objective;
  plan.sim = best.sim;
  plan.fits = best.fits;
  plan.recompute = best.recompute;
  plan.choice_note = join_notes(recompute_note(plan, best), margin_note(plan, best, o.batch_growth_margin));
  return plan;
}

Plan choose_tensor_plan(const std::vector<TensorCandidate>& candidates, const ClusterModel& net, int N, int64_t batch,
                        PlanOptions o) {
  Plan best;
  std::string tried, errors;
  for (const TensorCandidate& c : candidates) {
    if (c.t < 1 || N % c.t != 0) continue;
    o.tensor = c.t, o.memory = c.memory, o.memory_shared = c.memory_shared;
    Plan p = choose_plan(c.profile, net, N / c.t, batch, o);
    p.tensor = c.t, p.ranks = N;
    char b[160];
    if (p.ok) std::snprintf(b, sizeof b, "t = %d: %.4g ms per sample", c.t, p.sim.time_per_sample * 1e3);
    else std::snprintf(b, sizeof b, "t = %d: no plan", c.t);
    tried += (tried.empty() ? "" : ", ") + std::string(b);
    if (!p.ok) errors += "\n  t = " + std::to_string(c.t) + ": " + p.error;
    if (p.ok && (!best.ok || p.sim.time_per_sample < best.sim.time_per_sample)) best = std::move(p);
  }
  if (!best.ok) {
    best.ranks = N;
    best.error = "no tensor-parallel degree gives a plan:" + errors;
    return best;
  }
  best.choice_note = join_notes(best.choice_note, "parallel.tensor = " + std::to_string(best.tensor) + " (" + tried + ")");
  return best;
}

int64_t PlanCandidate::samples_per_update() const {
  if (schedule.empty()) return batch_size;
  const ScheduleDef& kind = schedule_def(schedule);
  int64_t stride = 1;
  for (int s = 0; s < layout.stages(); ++s) stride = std::max(stride, kind.version_stride(layout, s));
  return batch_size * stride;
}

std::vector<int> Plan::split() const {
  if (layout.first.size() < 2) return {};
  return std::vector<int>(layout.first.begin() + 1, layout.first.end() - 1);
}

double Plan::speedup_vs_bsp() const {
  if (!has_bsp || !ok || sim.time_per_sample <= 0) return NAN;
  return bsp.sim.time_per_sample / sim.time_per_sample;
}

double Plan::comm_reduction_vs_bsp() const {
  if (!has_bsp || !ok || bsp.sim.network_bytes_per_sample <= 0) return NAN;
  return 1.0 - sim.network_bytes_per_sample / bsp.sim.network_bytes_per_sample;
}

}  // namespace pt
