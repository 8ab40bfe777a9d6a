// Schedule IR: every generator is deadlock-free and well-formed over a grid of stages,
// microbatches and replica counts; broken schedules are rejected naming worker and action;
// in-flight depth and weight-version counts follow the formulas.
#include <gtest/gtest.h>

#include <numeric>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule.hpp"

namespace pt {
namespace {

const ScheduleKind kAll[] = {ScheduleKind::gpipe,          ScheduleKind::one_f_one_b,     ScheduleKind::model_parallel,
                             ScheduleKind::pipedream,      ScheduleKind::pipedream_vsync, ScheduleKind::pipedream_nostash,
                             ScheduleKind::two_bw};

Layout straight(int K, const std::vector<int>& reps) {
  std::vector<int> first;
  for (int s = 0; s < K; ++s) first.push_back(s);
  return Layout::make(first, K, reps);
}

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

}  // namespace

TEST(Schedule, AllKindsValidOverGrid) {
  int checked = 0;
  for (int K = 1; K <= 8; ++K)
    for (const auto& reps : patterns(K))
      for (int M = 1; M <= 32; ++M)
        for (ScheduleKind kind : kAll) {
          if (kind == ScheduleKind::two_bw && M < K) continue;  // 2bw requires M >= K
          const bool per_minibatch = kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync ||
                                     kind == ScheduleKind::pipedream_nostash;
          if (per_minibatch && M > 1) continue;  // one unit per minibatch: M is not used
          const int64_t steps = per_minibatch ? 3 * lcm_of(reps) : 3;
          Schedule s = make_schedule(kind, straight(K, reps), steps, M);
          const std::string err = validate(s);
          ASSERT_EQ(err, "") << schedule_name(kind) << " K=" << K << " M=" << M << " replicas "
                             << straight(K, reps).replication();
          ++checked;
        }
  for (int R = 1; R <= 6; ++R)
    for (int M = 1; M <= 32; ++M) {
      Schedule s = make_schedule(ScheduleKind::bsp, straight(1, {R}), 3, M);
      ASSERT_EQ(validate(s), "") << "bsp R=" << R << " M=" << M;
      ++checked;
    }
  EXPECT_GT(checked, 5000);
}

TEST(Schedule, EvalScheduleValid) {
  for (int K = 1; K <= 6; ++K)
    for (const auto& reps : patterns(K)) {
      Schedule s = make_eval_schedule(straight(K, reps), 17);
      ASSERT_EQ(validate(s), "");
    }
}

TEST(Schedule, RejectsMissingReceive) {
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, straight(3, {1, 1, 1}), 1, 4);
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
  // Swap stage 1's first receive of a gradient before its first forward: a cycle.
  Schedule s = make_schedule(ScheduleKind::one_f_one_b, straight(2, {1, 1}), 1, 2);
  auto& w0 = s.workers[0];
  // stage 0 waits for the gradient of mb 0 before sending the activation of mb 0
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
  Schedule s = make_schedule(ScheduleKind::gpipe, straight(2, {1, 1}), 1, 2);
  s.workers[0].push_back({Op::send_act, 1, -1, 1});  // a duplicate send
  EXPECT_NE(validate(s), "");
  Schedule t = make_schedule(ScheduleKind::gpipe, straight(2, {2, 1}), 1, 4);
  // microbatch 1 belongs to replica 1 of stage 0; give its forward to replica 0
  for (auto& a : t.workers[0])
    if (a.op == Op::forward && a.mb == 0) a.mb = 1;
  const std::string err = validate(t);
  EXPECT_NE(err.find("belongs to replica 1"), std::string::npos) << err;
}

TEST(Schedule, RejectsVersionRuleViolations) {
  Schedule s = make_schedule(ScheduleKind::pipedream, straight(3, {1, 1, 1}), 8, 1);
  for (auto& a : s.workers[0])
    if (a.op == Op::backward && a.mb == 5) a.version += 1;
  EXPECT_NE(validate(s).find("stashing violated"), std::string::npos);
  Schedule v = make_schedule(ScheduleKind::pipedream_vsync, straight(3, {1, 1, 1}), 8, 1);
  for (auto& a : v.workers[2])
    if (a.op == Op::forward && a.mb == 6) a.version += 1;
  EXPECT_NE(validate(v), "");
  Schedule f = make_schedule(ScheduleKind::one_f_one_b, straight(2, {1, 1}), 3, 2);
  for (auto& a : f.workers[1])
    if (a.op == Op::forward && a.mb == 3) a.version = 0;
  EXPECT_NE(validate(f).find("flush schedule reads version"), std::string::npos);
}

TEST(Schedule, InFlightDepth) {
  for (int K = 1; K <= 8; ++K) {
    const int M = 16;
    Schedule one = make_schedule(ScheduleKind::one_f_one_b, straight(K, std::vector<int>(static_cast<size_t>(K), 1)), 2, M);
    Schedule gp = make_schedule(ScheduleKind::gpipe, straight(K, std::vector<int>(static_cast<size_t>(K), 1)), 2, M);
    Schedule mp = make_schedule(ScheduleKind::model_parallel, straight(K, std::vector<int>(static_cast<size_t>(K), 1)), 2, M);
    for (int s = 0; s < K; ++s) {
      EXPECT_EQ(max_in_flight(one, s), std::min(M, K - s)) << "1f1b K=" << K << " stage " << s;
      EXPECT_EQ(max_in_flight(gp, s), M);
      EXPECT_EQ(max_in_flight(mp, s), 1);
    }
  }
  // NOAM: 2-1-1 keeps ceil(4/2) = 2 per input replica
  Schedule r = make_schedule(ScheduleKind::pipedream, straight(3, {2, 1, 1}), 20, 1);
  EXPECT_EQ(max_in_flight(r, 0), 2);
  EXPECT_EQ(max_in_flight(r, 2), 2);
  EXPECT_EQ(max_in_flight(r, 3), 1);
}

TEST(Schedule, WeightVersionsFollowFormulas) {
  for (int K = 1; K <= 6; ++K) {
    std::vector<int> ones(static_cast<size_t>(K), 1);
    Schedule pd = make_schedule(ScheduleKind::pipedream, straight(K, ones), 40, 1);
    Schedule bw = make_schedule(ScheduleKind::two_bw, straight(K, ones), 6, std::max(K, 2));
    Schedule fl = make_schedule(ScheduleKind::one_f_one_b, straight(K, ones), 6, 4);
    Schedule ns = make_schedule(ScheduleKind::pipedream_nostash, straight(K, ones), 40, 1);
    for (int s = 0; s < K; ++s) {
      EXPECT_EQ(max_versions_held(pd, s), K - s) << "pipedream K=" << K << " stage " << s;
      EXPECT_EQ(max_versions_held(bw, s), 2) << "2bw K=" << K << " stage " << s;
      EXPECT_EQ(max_versions_held(fl, s), 1);
      EXPECT_EQ(max_versions_held(ns, s), 1);
    }
  }
}

TEST(Schedule, PipedreamVersionsMatchPaperFormula) {
  // straight pipeline: stage s reads version max(0, m - K + 1 + s) for minibatch m
  const int K = 4;
  Schedule pd = make_schedule(ScheduleKind::pipedream, straight(K, {1, 1, 1, 1}), 30, 1);
  for (int s = 0; s < K; ++s)
    for (const Action& a : pd.workers[static_cast<size_t>(s)])
      if (is_compute(a.op)) EXPECT_EQ(a.version, std::max(0, a.mb - K + 1 + s)) << "stage " << s << " mb " << a.mb;
  Schedule vs = make_schedule(ScheduleKind::pipedream_vsync, straight(K, {1, 1, 1, 1}), 30, 1);
  for (int s = 0; s < K; ++s)
    for (const Action& a : vs.workers[static_cast<size_t>(s)])
      if (is_compute(a.op)) EXPECT_EQ(a.version, std::max(0, a.mb - K + 1)) << "vsync stage " << s << " mb " << a.mb;
}

TEST(Schedule, LayoutErrorsNameTheNumbers) {
  Deck d = parse_deck_text(
      "[model]\n[[model.layers]]\ntype='flatten'\n[[model.layers]]\ntype='linear'\nout=10\n"
      "[[model.layers]]\ntype='softmax_cross_entropy'\n[parallel]\nsplit=[1,2]\nreplicas=[2,1,1]\n",
      "deck.toml", {});
  try {
    Layout::from_deck(d, 3, 3);
    FAIL() << "expected a layout error";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("places 4 ranks"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("the job has 3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("deck.toml:11:"), std::string::npos) << e.what();
  }
  Layout ok = Layout::from_deck(d, 3, 4);
  EXPECT_EQ(ok.replication(), "2-1-1");
  EXPECT_EQ(ok.rank_of(1, 0), 2);
  EXPECT_EQ(ok.stage_of(3), 2);
}

}  // namespace pt

namespace pt {

// Every update boundary of every schedule has a consistent cut: no orphan message, and the
// two halves (with crossing messages re-sent at the start of the second) both replay.
TEST(Schedule, ConsistentCutsAtEveryBoundary) {
  int cuts = 0, crossing = 0;
  for (int K = 1; K <= 6; ++K)
    for (const auto& reps : patterns(K))
      for (ScheduleKind kind : kAll) {
        const bool per_minibatch = kind == ScheduleKind::pipedream || kind == ScheduleKind::pipedream_vsync ||
                                   kind == ScheduleKind::pipedream_nostash;
        const int M = per_minibatch ? 1 : std::max(K, 3);
        const int64_t L = per_minibatch ? lcm_of(reps) : 1;
        Schedule s = make_schedule(kind, straight(K, reps), 4 * L, M);
        for (int64_t v = 0; v <= 4 * L; v += L) {
          Cut cut;
          try {
            cut = consistent_cut(s, v);
          } catch (const Error& e) {
            FAIL() << schedule_name(kind) << " K=" << K << " reps " << straight(K, reps).replication() << " v=" << v
                   << ": " << e.what();
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
          Replay rb = replay(before, unit_costs()), ra = replay(after, unit_costs());
          ASSERT_TRUE(rb.ok) << schedule_name(kind) << " K=" << K << " v=" << v << ": " << rb.error;
          ASSERT_TRUE(ra.ok) << schedule_name(kind) << " K=" << K << " v=" << v << ": " << ra.error;
          ++cuts;
        }
      }
  EXPECT_GT(cuts, 500);
  EXPECT_GT(crossing, 0);  // asynchronous schedules do have messages in flight at a cut
}

}  // namespace pt
