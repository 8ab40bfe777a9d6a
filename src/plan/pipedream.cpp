// PipeDream's cost model and dynamic program (optimizer_graph_hierarchical.py of
// msr-fiddle/pipedream), reimplemented from its formulas over pipetrain's layer chain.
// Contract: plan_pipedream gives the partition PipeDream's optimizer gives for the same
// chain, options and bandwidths (split points, replication per level), its objective
// ("time per stage in pipeline") and its data-parallel estimate; ties between equal
// objectives go to the smaller split layer. Everything, constants and quirks included, is
// as in PipeDream (docs/PLANNER.md "PipeDream's cost model"); only "None" is +infinity.
#include <algorithm>
#include <cmath>
#include <limits>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"

namespace pt {
namespace {

constexpr double kNone = std::numeric_limits<double>::infinity();  // PipeDream's None

// The same on every rank (the inputs are): a collective error, printed once.
[[noreturn]] void bad(const std::string& msg) {
  fail(Exit::bad_input, std::string(kPipeDreamCostModel) + " cost model: " + msg, true);
}

// One entry A[i][j][m] of a level's table: the best time for layers i..j on m+1 machines,
// its last split (prefix i..k on rest+1 machines, last stage k+1..j on `last` machines).
struct Cell {
  double t = kNone;
  int k = -1, rest = -1, last = 0;
};

// Prefix sums of the chain: the per-segment compute, activation and parameter tables.
struct Prefix {
  std::vector<double> c, a, p;
  explicit Prefix(const PipeDreamChain& ch) : c{0}, a{0}, p{0} {
    for (int l = 0; l < ch.layers(); ++l) {
      c.push_back(c.back() + ch.compute[static_cast<size_t>(l)]);
      a.push_back(a.back() + ch.activation[static_cast<size_t>(l)]);
      p.push_back(p.back() + ch.params[static_cast<size_t>(l)]);
    }
  }
  static double seg(const std::vector<double>& v, int i, int j) {
    return v[static_cast<size_t>(j) + 1] - v[static_cast<size_t>(i)];
  }
};

// One level of the hierarchy: N machines per component at bandwidth bw; `T` the time of
// segment i..j on one machine of this level (level 0: its compute; above: the level
// below's best on a whole component, kNone where it had none).
struct Level {
  const PipeDreamChain& ch;
  const Prefix& pre;
  const PipeDreamOptions& o;
  int n = 0, N = 1, below = 1;  // layers, machines, machines per machine (the level below's N)
  double bw = 1;
  bool final_level = true;
  std::vector<double> T;  // n x n, row i = first layer
  std::vector<Cell> A;    // rows x n x N
  Level(const PipeDreamChain& c, const Prefix& p, const PipeDreamOptions& opt) : ch(c), pre(p), o(opt) {}
  int rows() const { return final_level ? 1 : n + 1; }
  double t(int i, int j) const { return T[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)]; }
  Cell& at(int i, int j, int m) {
    return A[(static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)) * static_cast<size_t>(N) +
             static_cast<size_t>(m)];
  }
  // ceil(x / d) of PipeDream's stash count, x >= 0 machines after the stage
  static int ceil_div(int x, int d) { return (x + d - 1) / d; }
  bool too_big(int i, int j, int after, int r) const {
    const double stash = ceil_div(after, r) * (Prefix::seg(pre.a, i, j) + Prefix::seg(pre.p, i, j));
    return o.memory_size > 0 && stash > o.memory_size;
  }
};

// First loop of compute_partitioning: segment i..j as one stage replicated m+1 times.
void single_stages(Level& L) {
  for (int i = 0; i < std::min(L.rows(), L.n); ++i)
    for (int j = i; j < L.n; ++j)
      for (int m = 0; m < (L.o.straight_pipeline ? 1 : L.N); ++m) {
        if (L.too_big(i, j, L.N - (m + 1), m + 1)) continue;
        double dp = (4.0 * m * Prefix::seg(L.pre.p, i, j)) / (L.bw * (m + 1));
        dp /= L.below;
        if (L.t(i, j) == kNone) continue;
        L.at(i, j, m) = {(L.t(i, j) + dp) / (m + 1), -1, -1, m + 1};
      }
}

// The body of the second loop: the best way to end segment i..j (m+1 machines) with a last
// stage k+1..j on m' machines after the prefix i..k on the other m+1-m'.
Cell best_split(Level& L, int i, int j, int m) {
  Cell best = L.at(i, j, m);
  if (L.o.use_fewer_machines && m > 0 && L.at(i, j, m - 1).t < best.t) best = L.at(i, j, m - 1);
  const double ratio = L.o.activation_compression_ratio;
  for (int k = i; k < j; ++k)
    for (int mp = 1; mp < (L.o.straight_pipeline ? 2 : m + 1); ++mp) {
      double in_t = (2.0 * L.ch.output[static_cast<size_t>(k)]) / (L.bw * mp);
      double out_t = j < L.n - 1 ? (2.0 * L.ch.output[static_cast<size_t>(j)]) / (L.bw * mp) : kNone;
      double last = L.t(k + 1, j);
      if (last == kNone) continue;
      const double P = Prefix::seg(L.pre.p, k + 1, j);
      if (L.too_big(k + 1, j, L.N - (m + 1), mp)) continue;
      last = (last + (4.0 * (mp - 1) * P) / (L.bw * mp)) / mp;  // no "/ below" here (as PipeDream)
      const Cell& prefix = L.at(i, k, m - mp);
      if (prefix.t == kNone) continue;
      double t = std::max(prefix.t, last);
      if (ratio > 0) {
        in_t /= ratio;
        t = std::max(t, in_t);
        if (out_t != kNone) t = std::max(t, out_t / ratio);
      }
      if (best.t == kNone || best.t > t) best = {t, k, m - mp, mp};
    }
  return best;
}

void solve_level(Level& L) {
  L.A.assign(static_cast<size_t>(L.rows()) * static_cast<size_t>(L.n) * static_cast<size_t>(L.N), Cell{});
  single_stages(L);
  for (int i = 0; i < std::min(L.rows(), L.n); ++i)
    for (int m = 1; m < L.N; ++m)
      for (int j = i + 1; j < L.n; ++j) L.at(i, j, m) = best_split(L, i, j, m);
}

// analyze_partitioning: the stages of segment start..end-1 on all N machines of the level.
std::vector<PipeDreamStage> stages_of(Level& L, int start, int end) {
  std::vector<PipeDreamStage> out;
  Cell c = L.at(start, end - 1, L.N - 1);
  if (c.t == kNone) return out;
  int stop = end;
  while (c.k >= 0) {
    out.push_back({c.k + 1, stop, c.last, Prefix::seg(L.pre.c, c.k + 1, stop - 1)});
    stop = c.k + 1;
    c = L.at(start, c.k, c.rest);
  }
  out.push_back({start, stop, c.last, Prefix::seg(L.pre.c, start, stop - 1)});
  std::reverse(out.begin(), out.end());
  return out;
}

// PipeDream's data-parallel estimate: all layers on every machine, level by level.
double data_parallel_time(const Prefix& pre, const PipeDreamOptions& o) {
  double t = pre.c.back();
  int below = 1;
  for (size_t l = 0; l < o.machines.size(); ++l) {
    const int n = o.machines[l];
    const double comm = ((4.0 * (n - 1) * pre.p.back()) / (o.bandwidths[l] * n)) / below;
    t = (t + comm) / n;
    below = n;
  }
  return t;
}

void check_inputs(const PipeDreamChain& c, const PipeDreamOptions& o) {
  const size_t n = c.compute.size();
  if (n == 0 || c.activation.size() != n || c.output.size() != n || c.params.size() != n)
    bad("the chain needs the same number (> 0) of compute, activation, output and parameter entries");
  if (o.machines.empty() || o.machines.size() != o.bandwidths.size())
    bad("one machine count per bandwidth level, at least one level");
  double work = 0, cells = 0;
  for (size_t l = 0; l < o.machines.size(); ++l) {
    const double N = o.machines[l], rows = l + 1 == o.machines.size() ? 1.0 : static_cast<double>(n) + 1;
    if (N < 1 || !(o.bandwidths[l] > 0))
      bad(PT_MSG("level " << l << " needs >= 1 machine and a bandwidth > 0, got " << N << " and " << o.bandwidths[l]));
    work += rows * static_cast<double>(n) * static_cast<double>(n) * N * N / 2;
    cells += rows * static_cast<double>(n) * N;
  }
  if (work > 4e10 || cells > 2e8)
    bad(PT_MSG(n << " layers on " << o.machines.back()
                 << " machines is beyond PipeDream's O(layers^2 machines^2) program per level "
                    "(O(layers^3 machines^2) below the top); use --cost-model pipetrain"));
}

}  // namespace

PipeDreamPlan plan_pipedream(const PipeDreamChain& c, const PipeDreamOptions& o) {
  check_inputs(c, o);
  const Prefix pre(c);
  const int n = c.layers(), nl = static_cast<int>(o.machines.size());
  std::vector<Level> lv;
  std::vector<double> T(static_cast<size_t>(n) * static_cast<size_t>(n), kNone);
  for (int i = 0; i < n; ++i)
    for (int j = i; j < n; ++j)
      T[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)] = Prefix::seg(pre.c, i, j);
  for (int l = 0; l < nl; ++l) {
    Level L(c, pre, o);
    L.n = n;
    L.N = o.machines[static_cast<size_t>(l)];
    L.below = l == 0 ? 1 : o.machines[static_cast<size_t>(l) - 1];
    L.bw = o.bandwidths[static_cast<size_t>(l)];
    L.final_level = l + 1 == nl;
    L.T = T;
    solve_level(L);
    for (int i = 0; i < n && !L.final_level; ++i)
      for (int j = 0; j < n; ++j)
        T[static_cast<size_t>(i) * static_cast<size_t>(n) + static_cast<size_t>(j)] = L.at(i, j, L.N - 1).t;
    lv.push_back(std::move(L));
  }
  PipeDreamPlan plan;
  plan.single_machine_time = pre.c.back();
  plan.data_parallel_time = data_parallel_time(pre, o);
  plan.time_per_minibatch = lv.back().at(0, n - 1, lv.back().N - 1).t;
  if (plan.time_per_minibatch == kNone) {
    plan.error = PT_MSG("no partition fits PipeDream's memory constraint of " << o.memory_size << " bytes per machine");
    return plan;
  }
  // from the outermost level in: each level refines every stage of the level above
  plan.levels.resize(static_cast<size_t>(nl));
  std::vector<PipeDreamStage> outer = {{0, n, 1, pre.c.back()}};
  int machines = 1;
  for (int l = nl - 1; l >= 0; --l) {
    std::vector<PipeDreamStage> refined;
    for (const PipeDreamStage& s : outer)
      for (PipeDreamStage t : stages_of(lv[static_cast<size_t>(l)], s.first, s.end)) {
        plan.levels[static_cast<size_t>(l)].push_back(t);
        t.replicas *= s.replicas;
        refined.push_back(t);
      }
    machines *= o.machines[static_cast<size_t>(l)];
    outer = refined;
  }
  std::vector<int> first, reps;
  int used = 0;
  for (const PipeDreamStage& s : outer) first.push_back(s.first), reps.push_back(s.replicas), used += s.replicas;
  plan.layout = Layout::make(first, n, reps);
  plan.unused_machines = machines - used;
  plan.ok = true;
  return plan;
}

PipeDreamChain PipeDreamChain::from_profile(const Profile& p, int64_t batch_size) {
  const double scale =
      batch_size > 0 && p.microbatch > 0 ? static_cast<double>(batch_size) / static_cast<double>(p.microbatch) : 1.0;
  PipeDreamChain c;
  for (const LayerProfile& l : p.layers) {
    c.compute.push_back((l.forward_s + l.backward_s) * scale);
    c.activation.push_back(l.stash_bytes * scale);
    c.output.push_back(l.output_bytes * scale);
    c.params.push_back(l.param_bytes);
  }
  return c;
}

PipeDreamOptions PipeDreamOptions::from_cluster(const ClusterModel& net, int ranks) {
  if (ranks < 1) bad(PT_MSG("--ranks must be >= 1, got " << ranks));
  if (net.levels.empty()) bad("the cluster has no bandwidth level");
  PipeDreamOptions o;
  int64_t below = 1;
  for (size_t k = 0; k < net.levels.size(); ++k) {
    const ClusterModel::Level& lv = net.levels[k];
    const bool last = lv.ranks >= ranks || k + 1 == net.levels.size();
    const int64_t size = last ? ranks : lv.ranks;
    if (size % below != 0)
      bad(PT_MSG("level " << k << " holds " << size << " ranks, not a multiple of the " << below
                          << " of the level below (PipeDream's levels multiply)"));
    o.machines.push_back(static_cast<int>(size / below));
    o.bandwidths.push_back(lv.bandwidth);
    below = size;
    if (last) break;
  }
  return o;
}

}  // namespace pt
