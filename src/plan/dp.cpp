// PipeDream's dynamic program over the layer chain, with replication, hierarchical levels
// and a memory cap from the schedule's in-flight depth. Suffix formulation:
//   B[i][m] = min over the first stage (layers i..j-1, r replicas on ranks N-m..N-m+r-1) of
//             max(T(i, j, r), in-cut(i), out-cut(j), B[j][m - r])
// with B[L][0] = 0. The first stage of a suffix knows its rank offset (levels of its
// allreduce and cuts) and its depth ceil(m / r) (memory), so both are exact.
// Pruning keeps it exact: T is bounded below by the compute share, which grows with j
// (stop scanning j), and B[j][m'] >= C(j..L-1) / m' (perfect balance), which bounds j from
// below by a binary search on the prefix sums. docs/PLANNER.md has the complexity.
#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"

namespace pt {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();


int ceil_div(int a, int b) { return (a + b - 1) / b; }

// The chain's own per-layer bytes as the memory model's footprint source (no model at hand).
std::shared_ptr<const FootprintSource> chain_source(const ChainCosts& c) {
  if (c.memory) return c.memory;
  ChainBytes b;
  b.input = c.input_bytes, b.out = c.out, b.stash = c.stash, b.params = c.params, b.opt = c.opt_state;
  b.samples = static_cast<double>(std::max<int64_t>(1, c.unit_samples));
  b.bf16 = c.bf16;
  return chain_footprints(b);
}

// Prefix sums and the per-term formulas shared by the DP and evaluate_layout.
struct ChainModel {
  const ChainCosts& c;
  const ClusterModel& net;
  int L;
  std::vector<double> Cp, Pp;
  std::shared_ptr<const FootprintSource> src;
  ChainModel(const ChainCosts& cc, const ClusterModel& n) : c(cc), net(n), L(cc.layers()), src(chain_source(cc)) {
    Cp.assign(static_cast<size_t>(L) + 1, 0.0);
    Pp = Cp;
    for (int i = 0; i < L; ++i) {
      const size_t k = static_cast<size_t>(i);
      Cp[k + 1] = Cp[k] + c.compute[k];
      Pp[k + 1] = Pp[k] + c.params[k];
    }
  }
  double C(int i, int j) const { return Cp[static_cast<size_t>(j)] - Cp[static_cast<size_t>(i)]; }
  double P(int i, int j) const { return Pp[static_cast<size_t>(j)] - Pp[static_cast<size_t>(i)]; }
  // share of the compute one replica does per minibatch
  double share(int r) const {
    return c.amortized ? 1.0 / r : static_cast<double>(ceil_div(c.units, r)) / c.units;
  }
  double compute_term(int i, int j, int r) const {
    const double opt = c.optimizer_s_per_byte * P(i, j);
    return c.amortized ? (C(i, j) + opt) / r : C(i, j) * share(r) + opt;
  }
  double stage_time(int i, int j, int r, int level) const {
    const double ar = net.allreduce_seconds(level, r, P(i, j));
    const double a = compute_term(i, j, r), b = c.amortized ? ar / r : ar;
    return c.serial_allreduce ? a + b : std::max(a, b);
  }
  // one side of the cut before layer j (j in 1..L-1), that side's ranks r
  double cut_side(int j, int level, int r) const {
    return 2.0 * c.units * net.p2p_seconds(level, c.out[static_cast<size_t>(j) - 1]) / r;
  }
  StageFootprint footprint(int i, int j) const {
    // the chain's own bytes already hold the selective stash; the model's source applies the mode
    const Recompute mode = c.memory || c.recompute == Recompute::full ? c.recompute : Recompute::none;
    return src->stage(i, j, std::max<int64_t>(1, c.unit_samples), c.split_backward, mode);
  }
  // The memory model's total for a rank holding layers i..j-1 on r replicas at depth `depth`
  // (the last stage's: the reporter's)
  double memory(const StageFootprint& f, int r, int depth) const {
    const int n = rule_in_flight(c, depth, r);
    // full: one recompute buffer, and with a split backward at most one per unit in flight
    // between its I and its W (the replay's max_between_i_and_w; here its bound)
    const int rec = c.recompute == Recompute::full ? 1 + (c.split_backward ? n : 0) : 0;
    RankMemory m = stage_memory(f, n, rule_versions(c, depth), rec);
    RankRole role;
    role.reporter = f.end == L;
    role.asynchronous = !c.flush;
    if (r > 1) role.allreduce_bytes = replica_allreduce_bytes(f);
    add_rank_terms(m, {&f}, c.memory_shared, role);
    return static_cast<double>(m.total());
  }
  double memory(int i, int j, int r, int depth) const { return memory(footprint(i, j), r, depth); }
  // a lower bound of memory() that never decreases with j: without what crosses the cut
  // after j (message buffers and wire copies of the stage output, evaluation outputs) and as
  // if not the last stage; every other term only grows with j
  double memory_lb(StageFootprint f, int r, int depth) const {
    f.unit.grad_in_floats = f.unit.wire_grad_in = f.unit.wire_act_out = 0;
    f.eval.out = f.eval.labels = f.unit.labels = f.geo.eval_loss_floats = 0;
    f.end = std::min(f.end, L - 1);
    return memory(f, r, depth);
  }
};

}  // namespace

ChainCosts ChainCosts::from_profile(const Profile& p, const ScheduleDef& kind, int microbatches, int64_t batch_size,
                                    Recompute recompute) {
  ChainCosts c;
  const double pmb = p.microbatch > 0 ? static_cast<double>(p.microbatch) : 1.0;
  const double B = batch_size > 0 ? static_cast<double>(batch_size) : pmb;
  c.units = kind.units_per_minibatch(microbatches);
  c.amortized = kind.per_minibatch_units;
  const double unit = B / c.units;
  for (const LayerProfile& l : p.layers) {
    const bool sel = recompute == Recompute::selective;
    const double backward = sel ? l.selective_backward() : l.backward_s + (recompute == Recompute::full ? l.forward_s : 0.0);
    c.compute.push_back((l.forward_s + backward) * B / pmb);
    c.params.push_back(l.param_bytes);
    c.opt_state.push_back(l.optimizer_bytes);
    c.stash.push_back((sel ? l.selective_stash() : l.stash_bytes) * unit / pmb);
    c.out.push_back(l.output_bytes * unit / pmb);
  }
  c.input_bytes = p.input_bytes * unit / pmb;
  c.optimizer_s_per_byte = p.optimizer_s_per_byte;
  c.rule = kind.memory;
  c.bf16 = p.precision == Precision::bf16;
  c.unit_samples = std::max<int64_t>(1, std::llround(unit));
  c.split_backward = kind.split_backward;
  c.flush = kind.flush;
  c.recompute = recompute;
  return c;
}

// The entry's rule (schedule_registry.hpp); the DP does not know stage 0's replicas yet, so
// the zero-bubble rules take d0 as the deepest possible depth, the whole job. Without a rule
// (only the replay knows): d in flight, one version.
int rule_in_flight(const ChainCosts& c, int depth, int replicas) {
  return c.rule ? c.rule->in_flight(depth, std::max(depth, c.ranks), replicas, c.units) : depth;
}

int rule_versions(const ChainCosts& c, int depth) { return c.rule ? std::max(1, c.rule->versions(depth)) : 1; }

double stage_memory(const ChainCosts& c, int i, int j, int r, int depth) {
  static const ClusterModel none = ClusterModel::single(1.0);
  return ChainModel(c, none).memory(i, j, r, depth);
}

LayoutCost evaluate_layout(const ChainCosts& c, const ClusterModel& net, const Layout& l, double cap) {
  ChainModel md(c, net);
  LayoutCost out;
  const int K = l.stages();
  PT_CHECK(l.end_layer(K - 1) == md.L, "layout covers " << l.end_layer(K - 1) << " layers, chain has " << md.L);
  std::vector<int> off(static_cast<size_t>(K) + 1, 0);
  for (int s = 0; s < K; ++s) off[static_cast<size_t>(s) + 1] = off[static_cast<size_t>(s)] + l.replicas[static_cast<size_t>(s)];
  double obj = 0;
  for (int s = 0; s < K; ++s) {
    const int i = l.first_layer(s), j = l.end_layer(s), r = l.replicas[static_cast<size_t>(s)];
    const int o = off[static_cast<size_t>(s)];
    const double t = md.stage_time(i, j, r, net.level_of(o, o + r - 1));
    const double mem = md.memory(i, j, r, l.in_flight_depth(s));
    out.stage_time.push_back(t);
    out.stage_memory.push_back(mem);
    out.max_memory = std::max(out.max_memory, mem);
    if (cap > 0 && mem > cap * (1 + 1e-12)) out.fits = false;
    obj = std::max(obj, t);
    if (s + 1 < K) {
      const int o1 = off[static_cast<size_t>(s) + 1], r1 = l.replicas[static_cast<size_t>(s) + 1];
      const double a = md.cut_side(j, net.level_of(o, o1), r);
      const double b = md.cut_side(j, net.level_of(o1 - 1, o1 + r1 - 1), r1);
      out.cut_time.push_back(std::max(a, b));
      obj = std::max(obj, std::max(a, b));
    }
  }
  out.objective = out.fits ? obj : kInf;
  return out;
}

namespace {

// Per-(state, r) constants of the terms, hoisted out of the scan over j.
struct RC {
  int r, m2, depth;
  double sh, inv_r, in_t;
  double ar_a, ar_b;            // ring allreduce = ar_a P + ar_b (levels)
  int lvl_s;
  double co_a, co_b;            // out-cut = co_a out[j-1] + co_b
};

// The suffix DP of plan_dp: B[i][m] for every state, i from L-1 down, then the choices
// followed from B[0][N].
class SuffixDp {
 public:
  SuffixDp(const ChainCosts& c, const ClusterModel& net, int N, const DpOptions& o, DpResult& res)
      : c_(c), net_(net), md_(c, net), L_(md_.L), N_(N), res_(res) {
    rs_ = o.replicas;
    if (rs_ == ReplicaSet::automatic) rs_ = N <= o.exact_ranks_limit ? ReplicaSet::all : ReplicaSet::powers_of_two;
    cap_ = o.memory_cap > 0 ? o.memory_cap * (1 + 1e-12) : kInf;  // a cap met exactly fits despite rounding
    capped_ = o.memory_cap > 0;
    if (capped_ && c.memory && L_ <= kCacheLayers) {
      cache_.resize(static_cast<size_t>(L_) * W());
      cached_.assign(cache_.size(), 0);
    }
    // reused between calls (choose_plan runs several DPs): no fresh pages each time; the
    // choices are written for every state the reconstruction can reach, so only B is reset
    thread_local std::vector<double> best;
    thread_local std::vector<int32_t> choice_j, choice_r;
    const size_t cells = static_cast<size_t>(N + 1) * W();
    best.assign(cells, kInf);
    if (choice_j.size() < cells) choice_j.resize(cells), choice_r.resize(cells);
    best_ = best.data(), choice_j_ = choice_j.data(), choice_r_ = choice_r.data();
    best_[at(L_, 0)] = 0.0;
    rlist_.reserve(static_cast<size_t>(N));
    rcs_.reserve(static_cast<size_t>(N));
    total_ = md_.Cp[static_cast<size_t>(L_)];
    measured_ar_ = net.measured && !net.network.allreduce.empty();
    Cp_ = md_.Cp.data(), Pp_ = md_.Pp.data();
    outb_ = c.out.data();
    U2_ = 2.0 * c.units;
  }

  void solve() {
    for (int i = L_ - 1; i >= 0; --i) {
      const int max_m = rs_ == ReplicaSet::one ? std::min(N_, L_ - i) : N_;
      for (int m = 1; m <= max_m; ++m) state(i, m);
    }
  }

  // The layout from B[0][N], or res.ok = false when nothing fits.
  void reconstruct() {
    const double v = best_[at(0, N_)];
    if (!(v < kInf)) return;
    res_.ok = true;
    res_.objective = v;
    int i = 0, m = N_;
    while (i < L_) {
      const int j = choice_j_[at(i, m)], r = choice_r_[at(i, m)];
      PT_CHECK(j > i && r >= 1, "planner DP: broken choice at layer " << i << ", " << m << " ranks");
      res_.first.push_back(i);
      res_.replicas.push_back(r);
      i = j;
      m -= r;
    }
    PT_CHECK(m == 0, "planner DP: " << m << " ranks left over");
  }

 private:
  size_t W() const { return static_cast<size_t>(L_) + 1; }  // m-major: a scan over j reads consecutive entries
  size_t at(int i, int m) const { return static_cast<size_t>(m) * W() + static_cast<size_t>(i); }

  // B[i][m]: the best first stage of layers i..L-1 on the last m ranks.
  void state(int i, int m) {
    ++res_.states;
    U_ = kInf, bj_ = -1, br_ = -1;
    const int off = N_ - m;
    replica_choices(m, off);
    stage_constants(i, m, off);
    // pass 1: the balanced split of each r seeds a good incumbent
    for (const RC& k : rcs_) {
      if (k.m2 == 0) {
        try_j(k, i, L_);
        continue;
      }
      // first j with C(i, j) share >= C(j, L) / m2 (left side grows, right side shrinks)
      int lo = i + 1, hi = L_ - 1;
      const double per = c_.amortized ? k.inv_r : k.sh;
      while (lo < hi) {
        const int mid = (lo + hi) / 2;
        if ((Cp_[mid] - Cp_[i]) * per >= (total_ - Cp_[mid]) / k.m2) hi = mid;
        else lo = mid + 1;
      }
      if (lo < L_) try_j(k, i, lo);
      if (lo - 1 > i) try_j(k, i, lo - 1);
    }
    // pass 2: every j that can still win
    for (const RC& k : rcs_) scan(k, i);
    best_[at(i, m)] = U_;
    choice_j_[at(i, m)] = bj_;
    choice_r_[at(i, m)] = br_;
  }

  // Replica counts for a stage starting at rank offset `off` with m ranks left.
  void replica_choices(int m, int off) {
    rlist_.clear();
    if (rs_ == ReplicaSet::all) {
      for (int r = 1; r <= m; ++r) rlist_.push_back(r);
    } else if (rs_ == ReplicaSet::powers_of_two) {
      for (int r = 1; r <= m && off % r == 0; r *= 2) rlist_.push_back(r);  // aligned to their size
    } else {
      rlist_.push_back(1);
    }
  }

  void level_params(int lvl, double* bw, double* lat) const {
    const auto& lv = net_.levels[static_cast<size_t>(std::clamp<int>(lvl, 0, static_cast<int>(net_.levels.size()) - 1))];
    *bw = lv.bandwidth;
    *lat = lv.latency;
  }

  // The RC of every replica count whose one-layer stage fits the memory cap.
  void stage_constants(int i, int m, int off) {
    rcs_.clear();
    for (int r : rlist_) {
      RC k;
      k.r = r;
      k.m2 = m - r;
      k.depth = ceil_div(m, r);
      k.sh = md_.share(r);
      k.inv_r = 1.0 / r;
      k.in_t = i > 0 ? md_.cut_side(i, net_.level_of(off - 1, off + r - 1), r) : 0.0;
      k.lvl_s = net_.level_of(off, off + r - 1);
      double bw, lat;
      level_params(k.lvl_s, &bw, &lat);
      k.ar_a = r > 1 ? 2.0 * (r - 1) / r / bw : 0.0;
      k.ar_b = r > 1 ? 2.0 * (r - 1) * lat : 0.0;
      if (k.m2 > 0) {
        level_params(net_.level_of(off, off + r), &bw, &lat);
        k.co_a = U2_ / (r * bw);
        k.co_b = U2_ * lat / r;
      } else {
        k.co_a = k.co_b = 0.0;
      }
      // memory (but the cut's own buffers) only grows with j: a stage of the one layer i must fit
      if (capped_ && md_.memory_lb(footprint(i, i + 1), r, k.depth) > cap_) continue;
      rcs_.push_back(k);
    }
  }

  // Pass 2 for one replica count: every j the lower bounds leave.
  void scan(const RC& k, int i) {
    if (k.m2 == 0 || k.in_t >= U_) return;
    // B[j][m2] >= C(j..L-1)/m2: only j with C(j..L-1) < m2 U can win
    int jlo = i + 1;
    if (U_ < kInf) {
      const double need = total_ - k.m2 * U_ * kSlack;  // Cp[j] > need
      jlo = std::max(jlo, static_cast<int>(std::upper_bound(md_.Cp.begin(), md_.Cp.end(), need) - md_.Cp.begin()));
    }
    const double per = c_.amortized ? k.inv_r : k.sh;
    for (int j = jlo; j < L_; ++j) {
      // compute-only lower bound of T grows with j: once it reaches U, stop
      if ((Cp_[j] - Cp_[i]) * per >= U_) break;
      if (capped_ && md_.memory_lb(footprint(i, j), k.r, k.depth) > cap_) break;  // memory without the cut's buffers
      try_j(k, i, j);
    }
  }

  // The stage time of layers i..j-1 on k.r replicas.
  double stage_t(const RC& k, int i, int j) const {
    const double P = Pp_[j] - Pp_[i], C = Cp_[j] - Cp_[i];
    const double ar = k.r < 2 ? 0.0 : measured_ar_ ? net_.allreduce_seconds(k.lvl_s, k.r, P) : k.ar_a * P + k.ar_b;
    const double opt = c_.optimizer_s_per_byte * P;
    const double a = c_.amortized ? (C + opt) * k.inv_r : C * k.sh + opt;
    const double b = c_.amortized ? ar * k.inv_r : ar;
    return c_.serial_allreduce ? a + b : std::max(a, b);
  }

  // The memory model's footprint of layers i..j-1, cached for a model's (exact, O(layers)) source.
  const StageFootprint& footprint(int i, int j) {
    if (!cache_.empty()) {
      const size_t at = static_cast<size_t>(i) * W() + static_cast<size_t>(j);
      if (!cached_[at]) cache_[at] = md_.footprint(i, j), cached_[at] = 1;
      return cache_[at];
    }
    scratch_ = md_.footprint(i, j);
    return scratch_;
  }

  // The candidate (i..j-1 on k.r replicas); updates U.
  void try_j(const RC& k, int i, int j) {
    ++res_.evaluations;
    const double sub = best_[at(j, k.m2)];
    if (sub >= U_) return;
    const double co = j < L_ ? k.co_a * outb_[j - 1] + k.co_b : 0.0;
    if (co >= U_) return;
    const double t = stage_t(k, i, j);
    if (t >= U_) return;
    if (capped_ && md_.memory(footprint(i, j), k.r, k.depth) > cap_) return;
    const double v = std::max(std::max(t, k.in_t), std::max(co, sub));
    if (v < U_) U_ = v, bj_ = j, br_ = k.r;
  }

  static constexpr double kSlack = 1.0 + 1e-12;  // guards the balance bound against rounding
  static constexpr int kCacheLayers = 128;       // footprints cached per (i, j) up to this many layers

  const ChainCosts& c_;
  const ClusterModel& net_;
  ChainModel md_;
  const int L_, N_;
  DpResult& res_;
  ReplicaSet rs_;
  double cap_;
  bool capped_ = false;
  std::vector<StageFootprint> cache_;
  std::vector<char> cached_;
  StageFootprint scratch_;
  double* best_;
  int32_t *choice_j_, *choice_r_;
  std::vector<int> rlist_;
  std::vector<RC> rcs_;
  double total_;
  bool measured_ar_;
  const double *Cp_, *Pp_, *outb_;
  double U2_;
  double U_ = kInf;  // the state's incumbent, its j and r
  int bj_ = -1, br_ = -1;
};

}  // namespace

DpResult plan_dp(const ChainCosts& c, const ClusterModel& net, int N, const DpOptions& o) {
  DpResult res;
  if (c.layers() == 0 || N <= 0) return res;
  SuffixDp dp(c, net, N, o, res);
  dp.solve();
  dp.reconstruct();
  return res;
}

}  // namespace pt
