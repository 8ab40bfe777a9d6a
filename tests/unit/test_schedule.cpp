// Schedule IR: every registered generator is deadlock-free and well-formed over a grid of
// stages, placements, microbatches and replica counts; the unit-cost makespans and peak
// activations are the published ones; golden files pin each generator's action lists;
// broken schedules are rejected naming worker and action; in-flight depth and weight
// versions follow the formulas; every update boundary has a consistent cut.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <numeric>
#include <sstream>

#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

// K stages of one layer each on groups of `reps` (contiguous: K = reps.size()).
Layout chain(int K, const std::vector<int>& reps, Placement pl = Placement::contiguous) {
  std::vector<int> first;
  for (int s = 0; s < K; ++s) first.push_back(s);
  return Layout::make(first, K, reps, pl);
}
Layout straight(int K, const std::vector<int>& reps) { return chain(K, reps); }
std::vector<int> ones(int n) { return std::vector<int>(static_cast<size_t>(n), 1); }

// Replica patterns per K: all 1, all 2, all 3, and two uneven cycles (2-1-3..., 1-3-2...).
std::vector<std::vector<int>> patterns(int K) {
  std::vector<std::vector<int>> out;
  for (int r : {1, 2, 3}) out.push_back(std::vector<int>(static_cast<size_t>(K), r));
  for (auto cyc : {std::vector<int>{2, 1, 3}, std::vector<int>{1, 3, 2}}) {
    std::vector<int> p;
    for (int s = 0; s < K; ++s) p.push_back(cyc[static_cast<size_t>(s) % 3]);
    out.push_back(p);
  }
  return out;
}

int64_t lcm_of(const std::vector<int>& v) {
  int64_t l = 1;
  for (int x : v) l = std::lcm(l, static_cast<int64_t>(x));
  return l;
}

// Steps for a schedule on a layout: pipedream-family units must fill every replica group.
int64_t steps_for(const ScheduleDef& d, const Layout& l, int64_t n) { return d.per_minibatch_units ? n * lcm_of(l.replicas) : n; }

// Layouts a schedule can run on, for p rank groups with replicas `reps`.
std::vector<Layout> layouts_for(const ScheduleDef& d, const std::vector<int>& reps) {
  const int p = static_cast<int>(reps.size());
  if (d.placement == Placement::v) return {chain(2 * p, reps, Placement::v)};
  if (d.placement == Placement::looped) return {chain(2 * p, reps, Placement::looped), chain(3 * p, reps, Placement::looped)};
  return {chain(p, reps)};
}

double makespan(const Schedule& s) {
  const Replay rp = replay(s, unit_costs(s.layout));
  EXPECT_TRUE(rp.ok) << rp.error;
  return rp.makespan;
}

double max_peak(const Schedule& s) {
  double m = 0;
  for (int r = 0; r < s.layout.ranks(); ++r) m = std::max(m, peak_activations(s, r));
  return m;
}

}  // namespace

TEST(Schedule, RegistryListsEverySchedule) {
  const std::vector<std::string> names = schedule_names();
  for (const char* n : {"1f1b", "gpipe", "model-parallel", "bsp", "pipedream", "pipedream-vsync", "pipedream-nostash", "2bw",
                        "interleaved-1f1b", "zb-h1", "zb-h2", "zb-v"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  EXPECT_EQ(find_schedule("eval"), nullptr);  // internal, not a deck choice
  try {
    schedule_def("zb-h3");
    FAIL() << "expected an unknown-schedule error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("did you mean"), std::string::npos) << e.what();
  }
}

TEST(Schedule, AllKindsValidOverGrid) {
  int checked = 0;
  for (const ScheduleDef* d : schedule_defs())
    for (int p = 1; p <= 5; ++p)
      for (const auto& reps : patterns(p))
        for (const Layout& l : layouts_for(*d, reps))
          for (int M = 1; M <= 24; ++M) {
            if (d->name == "bsp" && p > 1) continue;
            if (d->per_minibatch_units && M > 1) continue;
            if (d->check && !d->check(l, M).empty()) continue;
            Schedule s = make_schedule(*d, l, steps_for(*d, l, 3), M);
            ASSERT_EQ(validate(s), "") << d->name << " " << l.str() << " M=" << M << " reps " << l.replication();
            ++checked;
          }
  EXPECT_GT(checked, 4000);
}

TEST(Schedule, EvalScheduleValid) {
  for (int K = 1; K <= 6; ++K)
    for (const auto& reps : patterns(K)) ASSERT_EQ(validate(make_eval_schedule(straight(K, reps), 17)), "");
  for (int p = 1; p <= 4; ++p) {
    ASSERT_EQ(validate(make_eval_schedule(chain(2 * p, ones(p), Placement::v), 9)), "");
    ASSERT_EQ(validate(make_eval_schedule(chain(3 * p, {std::vector<int>(static_cast<size_t>(p), 2)}, Placement::looped), 9)), "");
  }
}

// The numbers of the issue: p = 4 ranks, M = 8, unit costs F = I = W = 1 per rank.
TEST(Schedule, UnitCostMakespansAndMemory) {
  const Schedule one = make_schedule("1f1b", straight(4, ones(4)), 1, 8);
  const Schedule h1 = make_schedule("zb-h1", straight(4, ones(4)), 1, 8);
  const Schedule h2 = make_schedule("zb-h2", straight(4, ones(4)), 1, 8);
  const Schedule zv = make_schedule("zb-v", chain(8, ones(4), Placement::v), 1, 8);
  const Schedule il = make_schedule("interleaved-1f1b", chain(8, ones(4), Placement::looped), 1, 8);
  EXPECT_DOUBLE_EQ(makespan(one), 33.0);                 // (m + p - 1) * 3
  EXPECT_DOUBLE_EQ(makespan(h1), 27.0);                  // (p - 1) F + m (F + I + W): the lower bound
  EXPECT_LE(makespan(h2), makespan(h1));
  EXPECT_LE(makespan(zv), 27.0);
  EXPECT_GE(makespan(zv), 25.5);                         // its lower bound
  EXPECT_DOUBLE_EQ((makespan(il) - 24.0) / 24.0, 3.0 / (2 * 8));  // (p - 1) / (v m)
  EXPECT_DOUBLE_EQ(max_peak(h1), max_peak(one));         // ZB-H1: 1F1B's peak activation memory
  EXPECT_DOUBLE_EQ(max_peak(zv), max_peak(one));         // ZB-V: the same, over two half-size chunks
  EXPECT_DOUBLE_EQ(max_peak(h2), 2 * 4 - 1);             // ZB-H2: 2p - 1 units
}

TEST(Schedule, ZeroBubbleHitsItsBoundOverSizes) {
  for (int p = 2; p <= 8; ++p)
    for (int m : {p, 2 * p, 3 * p + 1}) {
      const double bound = (p - 1) + 3.0 * m;
      EXPECT_DOUBLE_EQ(makespan(make_schedule("zb-h1", straight(p, ones(p)), 1, m)), bound) << "p=" << p << " m=" << m;
      EXPECT_LE(makespan(make_schedule("zb-h2", straight(p, ones(p)), 1, m)), bound) << "p=" << p << " m=" << m;
      EXPECT_LT(makespan(make_schedule("zb-v", chain(2 * p, ones(p), Placement::v), 1, m)), 3.0 * (m + p - 1));
    }
}

// Golden files pin every generator's output (tests/golden/schedules/NAME.txt; regenerate
// with PT_WRITE_GOLDEN=1 after an intended change and review the diff).
TEST(Schedule, GoldenActionLists) {
  for (const ScheduleDef* d : schedule_defs()) {
    const std::vector<int> reps = d->name == "bsp" ? std::vector<int>{2} : ones(4);
    const Layout l = layouts_for(*d, reps).front();
    const int M = d->per_minibatch_units ? 1 : 8;
    const Schedule s = make_schedule(*d, l, d->per_minibatch_units ? 8 : 2, M);
    const std::string text = "# " + d->name + ": " + l.str() + ", M = " + std::to_string(M) + ", " + std::to_string(s.steps) +
                             " minibatches\n" + s.actions();
    const std::string path = "tests/golden/schedules/" + d->name + ".txt";
    if (std::getenv("PT_WRITE_GOLDEN")) {
      std::ofstream(path) << text;
      continue;
    }
    std::ifstream in(path);
    ASSERT_TRUE(in.good()) << path << " missing: run the tests from the repository root, or PT_WRITE_GOLDEN=1";
    std::stringstream want;
    want << in.rdbuf();
    EXPECT_EQ(text, want.str()) << d->name << " differs from " << path;
  }
}

TEST(Schedule, SplitBackwardHalves) {
  const Schedule h1 = make_schedule("zb-h1", straight(3, {1, 2, 1}), 2, 6);
  int inputs = 0, weights = 0, fused = 0;
  for (const auto& w : h1.workers)
    for (const Action& a : w) inputs += a.op == Op::backward_input, weights += a.op == Op::backward_weight, fused += a.op == Op::backward;
  EXPECT_EQ(inputs, 3 * 12);
  EXPECT_EQ(weights, inputs);
  EXPECT_EQ(fused, 0);
  // a W before its I is rejected; so is W order differing from I order
  Schedule bad = h1;
  auto& w0 = bad.workers[0];
  auto i0 = std::find_if(w0.begin(), w0.end(), [](const Action& a) { return a.op == Op::backward_input; });
  auto wi = std::find_if(w0.begin(), w0.end(), [&](const Action& a) { return a.op == Op::backward_weight && a.mb == i0->mb; });
  std::iter_swap(i0, wi);
  EXPECT_NE(validate(bad), "");
}

TEST(Schedule, RejectsMissingReceive) {
  Schedule s = make_schedule("1f1b", straight(3, {1, 1, 1}), 1, 4);
  auto& w1 = s.workers[1];
  for (size_t i = 0; i < w1.size(); ++i)
    if (w1[i].op == Op::recv_act && w1[i].mb == 2) {
      w1.erase(w1.begin() + static_cast<long>(i));
      break;
    }
  const std::string err = validate(s);
  EXPECT_NE(err.find("rank 1"), std::string::npos) << err;
  EXPECT_NE(err.find("FORWARD before its RECV_ACT"), std::string::npos) << err;
}

TEST(Schedule, RejectsDeadlockNamingWorkers) {
  // stage 0 waits for the gradient of mb 0 before sending the activation of mb 0: a cycle
  Schedule s = make_schedule("1f1b", straight(2, {1, 1}), 1, 2);
  auto& w0 = s.workers[0];
  auto fwd = std::find_if(w0.begin(), w0.end(), [](const Action& a) { return a.op == Op::send_act && a.mb == 0; });
  auto rg = std::find_if(w0.begin(), w0.end(), [](const Action& a) { return a.op == Op::recv_grad && a.mb == 0; });
  ASSERT_TRUE(fwd != w0.end() && rg != w0.end());
  Action moved = *rg;
  w0.erase(rg);
  w0.insert(fwd, moved);
  const std::string err = validate(s);
  EXPECT_NE(err.find("deadlock"), std::string::npos) << err;
  EXPECT_NE(err.find("rank 0 (stage 0, replica 0) blocked at action"), std::string::npos) << err;
  EXPECT_NE(err.find("RECV_GRAD mb 0 from rank 1"), std::string::npos) << err;
}

TEST(Schedule, RejectsUnreceivedSendAndWrongReplica) {
  Schedule s = make_schedule("gpipe", straight(2, {1, 1}), 1, 2);
  s.workers[0].push_back({Op::send_act, 0, 1, -1, 1});  // a duplicate send
  EXPECT_NE(validate(s), "");
  Schedule t = make_schedule("gpipe", straight(2, {2, 1}), 1, 4);
  // microbatch 1 belongs to replica 1 of stage 0; give its forward to replica 0
  for (auto& a : t.workers[0])
    if (a.op == Op::forward && a.mb == 0) a.mb = 1;
  const std::string err = validate(t);
  EXPECT_NE(err.find("belongs to replica 1"), std::string::npos) << err;
}

TEST(Schedule, RejectsVersionRuleViolations) {
  Schedule s = make_schedule("pipedream", straight(3, {1, 1, 1}), 8, 1);
  for (auto& a : s.workers[0])
    if (a.op == Op::backward && a.mb == 5) a.version += 1;
  EXPECT_NE(validate(s).find("stashing violated"), std::string::npos);
  Schedule v = make_schedule("pipedream-vsync", straight(3, {1, 1, 1}), 8, 1);
  for (auto& a : v.workers[2])
    if (a.op == Op::forward && a.mb == 6) a.version += 1;
  EXPECT_NE(validate(v), "");
  Schedule f = make_schedule("1f1b", straight(2, {1, 1}), 3, 2);
  for (auto& a : f.workers[1])
    if (a.op == Op::forward && a.mb == 3) a.version = 0;
  EXPECT_NE(validate(f).find("flush schedule reads version"), std::string::npos);
}

TEST(Schedule, InFlightDepth) {
  for (int K = 1; K <= 8; ++K) {
    const int M = 16;
    Schedule one = make_schedule("1f1b", straight(K, ones(K)), 2, M);
    Schedule gp = make_schedule("gpipe", straight(K, ones(K)), 2, M);
    Schedule mp = make_schedule("model-parallel", straight(K, ones(K)), 2, M);
    for (int s = 0; s < K; ++s) {
      EXPECT_EQ(max_in_flight(one, s, s), std::min(M, K - s)) << "1f1b K=" << K << " stage " << s;
      EXPECT_EQ(max_in_flight(gp, s, s), M);
      EXPECT_EQ(max_in_flight(mp, s, s), 1);
    }
  }
  // NOAM: 2-1-1 keeps ceil(4/2) = 2 per input replica
  Schedule r = make_schedule("pipedream", straight(3, {2, 1, 1}), 20, 1);
  EXPECT_EQ(max_in_flight(r, 0, 0), 2);
  EXPECT_EQ(max_in_flight(r, 2, 1), 2);
  EXPECT_EQ(max_in_flight(r, 3, 2), 1);
}

// summary.json's formulas (registry memory rules) equal the generators' values.
TEST(Schedule, MemoryRulesMatchTheGenerators) {
  for (const ScheduleDef* d : schedule_defs())
    for (int K = 1; K <= 5; ++K)
      for (const auto& reps : patterns(K))
        for (int M : {1, 2, 4, 8, 12}) {
          const Layout l = layouts_for(*d, reps).front();
          if (!d->memory || (d->name == "bsp" && K > 1) || (d->per_minibatch_units && M > 1)) continue;
          if (d->check && !d->check(l, M).empty()) continue;
          const Schedule s = make_schedule(*d, l, steps_for(*d, l, 4 * K), M);
          for (int st = 0; st < l.stages(); ++st) {
            const int r0 = l.rank_of(st, 0);
            const int want = d->in_flight_formula(l, st, M), got = max_in_flight(s, r0, st);
            if (d->name == "2bw" || d->split_backward) EXPECT_LE(got, want) << d->name;  // upper bounds
            else EXPECT_EQ(got, want) << d->name << " " << l.replication() << " M=" << M << " stage " << st;
            if (d->name == "pipedream-vsync") continue;  // stage 0 decides: no closed form
            else EXPECT_EQ(max_versions_held(s, r0, st), d->versions_formula(l, st)) << d->name << " stage " << st;
          }
        }
}

TEST(Schedule, PipedreamVersionsMatchPaperFormula) {
  // straight pipeline: stage s reads version max(0, m - K + 1 + s) for minibatch m
  const int K = 4;
  Schedule pd = make_schedule("pipedream", straight(K, ones(K)), 30, 1);
  for (int s = 0; s < K; ++s)
    for (const Action& a : pd.workers[static_cast<size_t>(s)])
      if (is_compute(a.op)) { EXPECT_EQ(a.version, std::max(0, a.mb - K + 1 + s)) << "stage " << s << " mb " << a.mb; }
  Schedule vs = make_schedule("pipedream-vsync", straight(K, ones(K)), 30, 1);
  for (int s = 0; s < K; ++s)
    for (const Action& a : vs.workers[static_cast<size_t>(s)])
      if (is_compute(a.op)) { EXPECT_EQ(a.version, std::max(0, a.mb - K + 1)) << "vsync stage " << s << " mb " << a.mb; }
}

TEST(Schedule, LayoutErrorsNameTheNumbers) {
  Deck d = parse_deck_text(
      "[model]\n[[model.layers]]\ntype='flatten'\n[[model.layers]]\ntype='linear'\nout=10\n"
      "[[model.layers]]\ntype='softmax_cross_entropy'\n[parallel]\nsplit=[1,2]\nreplicas=[2,1,1]\n",
      "deck.toml", {});
  try {
    Layout::from_deck(d, 3, 3, schedule_def(d.parallel.schedule));
    FAIL() << "expected a layout error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("places 4 ranks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the job has 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deck.toml:11:"), std::string::npos) << e.what();
  }
  Layout ok = Layout::from_deck(d, 3, 4, schedule_def(d.parallel.schedule));
  EXPECT_EQ(ok.replication(), "2-1-1");
  EXPECT_EQ(ok.rank_of(1, 0), 2);
  EXPECT_EQ(ok.stage_of(3), 2);
}

TEST(Schedule, PlacementsMapStagesToRanks) {
  const Layout v = chain(8, ones(4), Placement::v), lp = chain(8, {1, 2, 1, 1}, Placement::looped);
  EXPECT_EQ(v.stages_of_rank(0), (std::vector<int>{0, 7}));
  EXPECT_EQ(v.stages_of_rank(3), (std::vector<int>{3, 4}));
  EXPECT_EQ(lp.stages_of_rank(2), (std::vector<int>{1, 5}));  // group 1, replica 1
  EXPECT_EQ(lp.rank_of(5, 1), 2);
  EXPECT_EQ(lp.replicas_of(5), 2);
  Deck d = parse_deck_text("[model]\n[[model.layers]]\ntype='flatten'\n[[model.layers]]\ntype='linear'\nout=10\n"
                           "[[model.layers]]\ntype='softmax_cross_entropy'\n[parallel]\nsplit=[1,2]\nschedule='zb-v'\n",
                           "deck.toml", {});
  try {
    Layout::from_deck(d, 3, 2, schedule_def(d.parallel.schedule));  // 3 stages cannot form a V on 2 ranks
    FAIL() << "expected a placement error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("V needs exactly 2 stages per group"), std::string::npos) << e.what();
  }
}

// Every update boundary of every schedule has a consistent cut: no orphan message, and the
// two halves (with crossing messages re-sent at the start of the second) both replay.
TEST(Schedule, ConsistentCutsAtEveryBoundary) {
  int cuts = 0, crossing = 0;
  for (const ScheduleDef* d : schedule_defs())
    for (int K = 1; K <= 5; ++K)
      for (const auto& reps : patterns(K)) {
        const Layout l = layouts_for(*d, reps).front();
        const int M = d->per_minibatch_units ? 1 : (d->placement == Placement::looped ? 2 * K * 3 * 2 : std::max(K, 3));
        if ((d->name == "bsp" && K > 1) || (d->check && !d->check(l, M).empty())) continue;
        const int64_t L = d->per_minibatch_units ? lcm_of(reps) : 1;
        for (bool norm : {false, true}) {  // with GRAD_NORM (train.clip_grad_norm) too
        if (norm && !d->flush) continue;
        Schedule s = make_schedule(*d, l, 4 * L, M, norm);
        for (int64_t v = 0; v <= 4 * L; v += L) {
          Cut cut;
          try {
            cut = consistent_cut(s, v);
          } catch (const Error& e) {
            FAIL() << d->name << " " << l.str() << " v=" << v << ": " << e.what();
          }
          Schedule before = s, after = s;
          for (size_t w = 0; w < s.workers.size(); ++w) {
            const size_t p = cut.position[w];
            before.workers[w].clear();
            for (size_t i = 0; i < p; ++i)  // crossing sends are not received before the cut
              if (std::find(cut.crossing[w].begin(), cut.crossing[w].end(), i) == cut.crossing[w].end())
                before.workers[w].push_back(s.workers[w][i]);
            after.workers[w].assign(s.workers[w].begin() + static_cast<long>(p), s.workers[w].end());
            std::vector<Action> resend;
            for (size_t i : cut.crossing[w]) resend.push_back(s.workers[w][i]);
            after.workers[w].insert(after.workers[w].begin(), resend.begin(), resend.end());
            crossing += static_cast<int>(resend.size());
          }
          Replay rb = replay(before, unit_costs(l)), ra = replay(after, unit_costs(l));
          ASSERT_TRUE(rb.ok) << d->name << " " << l.str() << " v=" << v << ": " << rb.error;
          ASSERT_TRUE(ra.ok) << d->name << " " << l.str() << " v=" << v << ": " << ra.error;
          ++cuts;
        }
        }
      }
  EXPECT_GT(cuts, 1200);
  EXPECT_GT(crossing, 0);  // asynchronous schedules do have messages in flight at a cut
}

}  // namespace pt

namespace pt {
namespace {

// The IR without its GRAD_NORMs.
std::vector<std::vector<Action>> without_norms(const Schedule& s) {
  std::vector<std::vector<Action>> out(s.workers.size());
  for (size_t w = 0; w < s.workers.size(); ++w)
    for (const Action& a : s.workers[w])
      if (a.op != Op::grad_norm) out[w].push_back(a);
  return out;
}

bool same_actions(const std::vector<Action>& a, const std::vector<Action>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].op != b[i].op || a[i].stage != b[i].stage || a[i].mb != b[i].mb || a[i].version != b[i].version || a[i].peer != b[i].peer)
      return false;
  return true;
}

}  // namespace

// train.clip_grad_norm: every flush schedule's IR with GRAD_NORM is valid (the replay treats
// it as a collective of all ranks: deadlock-free), has one per rank and group, and is the IR
// without clipping plus those actions; asynchronous schedules get none.
TEST(Schedule, GradNormInEveryFlushScheduleOverGrid) {
  int checked = 0;
  for (const ScheduleDef* d : schedule_defs())
    for (int p = 1; p <= 4; ++p)
      for (const auto& reps : patterns(p))
        for (const Layout& l : layouts_for(*d, reps))
          for (int M : {1, 2, 3, 4, 6, 8, 12}) {
            if ((d->name == "bsp" && p > 1) || (d->per_minibatch_units && M > 1)) continue;
            if (d->check && !d->check(l, M).empty()) continue;
            const int64_t steps = steps_for(*d, l, 3);
            const Schedule plain = make_schedule(*d, l, steps, M), s = make_schedule(*d, l, steps, M, true);
            const std::string what = d->name + " " + l.str() + " M=" + std::to_string(M);
            ASSERT_EQ(s.grad_norm, d->flush) << what;
            ASSERT_EQ(validate(s), "") << what;
            const auto stripped = without_norms(s);
            for (size_t w = 0; w < s.workers.size(); ++w) {
              ASSERT_TRUE(same_actions(stripped[w], plain.workers[w])) << what << ": rank " << w << " differs beyond GRAD_NORM";
              const int64_t norms = static_cast<int64_t>(s.workers[w].size() - stripped[w].size());
              ASSERT_EQ(norms, d->flush ? steps : 0) << what << ": rank " << w;
            }
            ++checked;
          }
  EXPECT_GT(checked, 1000);
}

TEST(Schedule, RejectsMisplacedGradNorm) {
  const Schedule s = make_schedule("1f1b", straight(2, {1, 1}), 2, 4, true);
  ASSERT_EQ(validate(s), "");
  EXPECT_EQ(action_text(s.workers[1][std::find_if(s.workers[1].begin(), s.workers[1].end(), [](const Action& a) {
                          return a.op == Op::grad_norm;
                        }) - s.workers[1].begin()]),
            "1N0");
  auto norm_at = [](const std::vector<Action>& acts) {
    return static_cast<size_t>(std::find_if(acts.begin(), acts.end(), [](const Action& a) { return a.op == Op::grad_norm; }) - acts.begin());
  };
  {  // after its update
    Schedule t = s;
    auto& acts = t.workers[0];
    const size_t i = norm_at(acts);
    ASSERT_EQ(acts[i + 1].op, Op::optimizer_step);
    std::swap(acts[i], acts[i + 1]);
    EXPECT_NE(validate(t).find("updates before the rank's GRAD_NORM of its group"), std::string::npos) << validate(t);
  }
  {  // missing on one rank
    Schedule t = s;
    t.workers[1].erase(t.workers[1].begin() + static_cast<long>(norm_at(t.workers[1])));
    EXPECT_NE(validate(t).find("updates before the rank's GRAD_NORM"), std::string::npos) << validate(t);
  }
  {  // before the rank's backward work of its group is done
    Schedule t = s;
    auto& acts = t.workers[1];
    const size_t i = norm_at(acts);
    const Action n = acts[i];
    acts.erase(acts.begin() + static_cast<long>(i));
    acts.insert(acts.begin(), n);
    EXPECT_NE(validate(t).find("GRAD_NORM mb 0: before 4 backward(s) of stage 1 in its group finished"), std::string::npos) << validate(t);
    // the replay alone: rank 1 waits in the collective for rank 0, which waits for rank 1's gradients
    const Replay rp = replay(t, unit_costs(t.layout));
    EXPECT_FALSE(rp.ok);
    EXPECT_NE(rp.error.find("waiting for every rank's GRAD_NORM of group 0"), std::string::npos) << rp.error;
  }
  {  // in a schedule without clipping
    Schedule t = s;
    t.grad_norm = false;
    EXPECT_NE(validate(t).find("GRAD_NORM in a schedule without gradient clipping"), std::string::npos) << validate(t);
  }
}

}  // namespace pt
