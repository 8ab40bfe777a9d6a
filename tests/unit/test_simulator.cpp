// Simulator: the replay with profiled costs reproduces the hand-computed pipeline formulas
// (gpipe and 1f1b bubble (K-1)/(M+K-1) with equal stages, pipedream's bubble-free steady
// state), the ring allreduce and level costs, the memory formulas, the Chrome trace, and
// reads a measured run for --compare.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <utility>
#include <unistd.h>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/sim.hpp"

namespace pt {
namespace {

// K equal layers: forward f, backward 2f (seconds per sample), no bytes, no optimizer.
Profile equal_layers(int K, double f = 1.0) {
  Profile p;
  p.microbatch = 1;
  for (int i = 0; i < K; ++i) {
    LayerProfile l;
    l.index = i;
    l.forward_s = f;
    l.backward_s = 2 * f;
    p.layers.push_back(l);
  }
  return p;
}

Layout one_layer_stages(int K, std::vector<int> reps = {}) {
  std::vector<int> first;
  for (int s = 0; s < K; ++s) first.push_back(s);
  if (reps.empty()) reps.assign(static_cast<size_t>(K), 1);
  return Layout::make(first, K, reps);
}

SimResult run(const Profile& p, const std::string& k, const Layout& l, int M, int64_t B, const ClusterModel& net) {
  SimConfig c;
  c.def = &schedule_def(k);
  c.layout = l;
  c.microbatches = M;
  c.batch_size = B;
  return simulate(p, net, c);
}

}  // namespace

TEST(Simulator, FlushBubbleFormulaIsExact) {
  const ClusterModel net = ClusterModel::single(1e9);
  int checked = 0;
  for (int K = 1; K <= 6; ++K)
    for (int M = 1; M <= 12; ++M)
      for (std::string k : {"gpipe", "1f1b"}) {
        // unit = one sample (batch M, M microbatches): F = 1 s, B = 2 s per stage
        const SimResult r = run(equal_layers(K), k, one_layer_stages(K), M, M, net);
        ASSERT_TRUE(r.ok) << r.error;
        const double want = static_cast<double>(K - 1) / (M + K - 1);
        EXPECT_NEAR(r.bubble, want, 1e-12) << k << " K=" << K << " M=" << M;
        EXPECT_NEAR(r.time_per_minibatch, 3.0 * (M + K - 1), 1e-9) << k << " K=" << K << " M=" << M;
        EXPECT_NEAR(r.time_per_sample, 3.0 * (M + K - 1) / M, 1e-9);
        ++checked;
      }
  EXPECT_EQ(checked, 6 * 12 * 2);
}

// The zero-bubble paper's setting (Qi et al. 2023, Table 5: p = 8, m = 24/32/64): at equal
// costs the simulator's replay of 1F1B shows the bubble (p - 1)/(m + p - 1) = 0.2258, 0.1795,
// 0.0986. The paper's own 0.2431, 0.1985, 0.1240 come from its profiled F, B, W and
// point-to-point times on its 1.5B model, which lengthen the warm-up and drain that equal,
// free-communication costs leave at (p - 1)(F + B).
TEST(Simulator, OneFOneBBubbleAtEightStagesOfTheZeroBubblePaper) {
  const ClusterModel net = ClusterModel::single(1e9);
  const std::pair<int, double> cases[] = {{24, 0.2258}, {32, 0.1795}, {64, 0.0986}};
  for (const auto& [m, printed] : cases) {
    const SimResult r = run(equal_layers(8), "1f1b", one_layer_stages(8), m, m, net);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.bubble, 7.0 / (m + 7), 1e-12) << "m=" << m;
    EXPECT_NEAR(r.bubble, printed, 5e-5) << "m=" << m;
    std::printf("  1f1b p=8 m=%d: bubble %.4f\n", m, r.bubble);
  }
}

TEST(Simulator, PipedreamSteadyStateHasNoBubble) {
  const ClusterModel net = ClusterModel::single(1e9);
  for (int K = 1; K <= 6; ++K) {
    // one unit = the minibatch of 1 sample: every stage F + B = 3 s per minibatch
    const SimResult r = run(equal_layers(K), "pipedream", one_layer_stages(K), 1, 1, net);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_NEAR(r.bubble, 0.0, 1e-12) << "K=" << K;
    EXPECT_NEAR(r.time_per_minibatch, 3.0, 1e-9) << "K=" << K;
    EXPECT_GE(r.warmup, 1);
    EXPECT_GT(r.makespan, r.window_end);  // drain excluded from the window
    // NOAM: stage s keeps K - s minibatches in flight and as many weight versions
    for (int s = 0; s < K; ++s) {
      EXPECT_EQ(r.memory[static_cast<size_t>(s)].in_flight, K - s);
      EXPECT_EQ(r.memory[static_cast<size_t>(s)].versions, K - s);
    }
  }
  // a replicated stage: 2-1 with the first stage twice as slow keeps both busy
  Profile p = equal_layers(2);
  p.layers[0].forward_s = 2;
  p.layers[0].backward_s = 4;
  const SimResult r = run(p, "pipedream", one_layer_stages(2, {2, 1}), 1, 1, net);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.time_per_minibatch, 3.0, 1e-9);
  EXPECT_NEAR(r.bubble, 0.0, 1e-12);
}

TEST(Simulator, TwoBwMatchesOneFOneBWithoutFlush) {
  // 2bw does not flush: its steady state per minibatch is M units of F + B on every stage
  const ClusterModel net = ClusterModel::single(1e9);
  const int K = 4, M = 8;
  const SimResult r = run(equal_layers(K), "2bw", one_layer_stages(K), M, M, net);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NEAR(r.time_per_minibatch, 3.0 * M, 1e-9);
  EXPECT_NEAR(r.bubble, 0.0, 1e-12);
  for (const RankMemory& m : r.memory) EXPECT_EQ(m.versions, 2);
}

TEST(Simulator, RingAllreduceAndLevels) {
  // one stage of r replicas (bsp): per minibatch compute/r then a ring allreduce
  Profile p = equal_layers(1);
  p.layers[0].param_bytes = 4e6;
  const double bw = 1e9, lat = 1e-5;
  for (int r = 1; r <= 5; ++r) {
    const ClusterModel net = ClusterModel::single(bw, lat);
    const SimResult s = run(p, "bsp", one_layer_stages(1, {r}), r, r, net);
    ASSERT_TRUE(s.ok) << s.error;
    const double ar = r > 1 ? 2.0 * (r - 1) / r * 4e6 / bw + 2.0 * (r - 1) * lat : 0.0;
    EXPECT_NEAR(s.time_per_minibatch, 3.0 + ar, 1e-9) << "r=" << r;
    EXPECT_NEAR(net.allreduce_seconds(0, r, 4e6), ar, 1e-15);
    // payload per sample as summary.json counts it: every replica reduces the stage's parameters
    EXPECT_NEAR(s.bytes_allreduce_per_sample, r > 1 ? 4e6 : 0.0, 1e-6);
  }
  // two levels: 2 ranks per server at 10 GB/s, 1 GB/s between servers
  const ClusterModel two = ClusterModel::from_levels({{2, 1e10, 0.0}, {8, 1e9, 1e-6}});
  EXPECT_EQ(two.level_of(0, 0), -1);
  EXPECT_EQ(two.level_of(0, 1), 0);
  EXPECT_EQ(two.level_of(2, 3), 0);
  EXPECT_EQ(two.level_of(1, 2), 1);
  EXPECT_EQ(two.level_of(0, 7), 1);
  EXPECT_EQ(two.level_of(3, 12), 1);  // beyond the outermost size: still the outermost level
  EXPECT_DOUBLE_EQ(two.p2p_seconds(0, 1e6), 1e-4);
  EXPECT_DOUBLE_EQ(two.p2p_seconds(1, 1e6), 1e-3 + 1e-6);
  EXPECT_DOUBLE_EQ(two.p2p_seconds(-1, 1e6), 0.0);
  // a transfer across servers delays the next stage: 2 stages, activation 1 MB
  Profile q = equal_layers(2);
  q.layers[0].output_bytes = 1e6;
  const SimResult near = run(q, "gpipe", one_layer_stages(2), 1, 1, two);
  ASSERT_TRUE(near.ok);
  // ranks 0 and 1 share a server: forward 1 + 1e-4 + 1, backward 2 + 1e-4 + 2
  EXPECT_NEAR(near.time_per_minibatch, 6.0 + 2e-4, 1e-9);
}

TEST(Simulator, MemoryMatchesThePlannerFormula) {
  Profile p;
  p.microbatch = 4;
  p.input_bytes = 100;
  for (int i = 0; i < 6; ++i) {
    LayerProfile l;
    l.index = i;
    l.forward_s = 0.1 * (i + 1);
    l.backward_s = 0.2 * (i + 1);
    l.output_bytes = 1000.0 * (6 - i);
    l.stash_bytes = 1500.0 * (6 - i);
    l.param_bytes = 10000.0 * (i + 1);
    l.optimizer_bytes = 5000.0 * (i + 1);
    p.layers.push_back(l);
  }
  const ClusterModel net = ClusterModel::single(1e9);
  const std::vector<std::vector<int>> firsts = {{0, 2, 3}, {0, 1, 4}, {0, 5}};
  const std::vector<std::vector<int>> repss = {{2, 1, 1}, {1, 2, 1}, {3, 1}};
  for (size_t t = 0; t < firsts.size(); ++t)
    for (std::string k : {"1f1b", "gpipe", "pipedream"})
      for (int M : {1, 2, 4, 8}) {
        if (k == "pipedream" && M > 1) continue;
        const Layout l = Layout::make(firsts[t], 6, repss[t]);
        const int64_t B = 8;
        const SimResult r = run(p, k, l, M, B, net);
        ASSERT_TRUE(r.ok) << r.error;
        const ChainCosts cc = ChainCosts::from_profile(p, schedule_def(k), M, B);
        for (int s = 0; s < l.stages(); ++s) {
          const double want = stage_memory(cc, l.first_layer(s), l.end_layer(s), l.replicas[static_cast<size_t>(s)],
                                           l.in_flight_depth(s));
          EXPECT_NEAR(r.stages[static_cast<size_t>(s)].memory.total(), want, 1e-6 * want)
              << k << " " << l.str() << " M=" << M << " stage " << s;
        }
      }
}

// A profile measured in bf16: a stage's v weight versions cost the fp32 master, the compute
// copy, its packed twin and v - 1 stashes at 2 bytes per parameter (the runtime's WeightStore), in the
// replay's memory and the planner's formula alike; fp32 costs v copies.
TEST(Simulator, Bf16StashesCostHalf) {
  Profile p;
  p.microbatch = 1;
  for (int i = 0; i < 4; ++i) {
    LayerProfile l;
    l.index = i;
    l.forward_s = 1, l.backward_s = 2, l.output_bytes = 100, l.stash_bytes = 100;
    l.param_bytes = 4000.0 * (i + 1);
    p.layers.push_back(l);
  }
  const ClusterModel net = ClusterModel::single(1e9);
  const Layout l = one_layer_stages(4);
  for (const char* prec : {"fp32", "bf16"}) {
    p.precision = precision_from_name(prec);
    const bool bf16 = p.precision == Precision::bf16;
    for (std::string k : {"pipedream", "1f1b", "2bw"}) {
      const int M = k == "pipedream" ? 1 : 4;
      const SimResult r = run(p, k, l, M, 4, net);
      ASSERT_TRUE(r.ok) << r.error;
      const ChainCosts cc = ChainCosts::from_profile(p, schedule_def(k), M, 4);
      for (int s = 0; s < 4; ++s) {
        const RankMemory& m = r.stages[static_cast<size_t>(s)].memory;
        const double P = p.layers[static_cast<size_t>(s)].param_bytes, v = m.versions;
        const double weights = static_cast<double>(m[MemCategory::master] + m[MemCategory::weight_copies]);
        // bf16: master + compute copy + its packed twin, packed stashes, and (kept_weight_layouts)
        // the input-gradient product's weights in oneDNN's layout, one copy per version's bf16
        // array (not the model's first layer)
        const double kept = bf16 && kept_weight_layouts() && s > 0 ? v * P / 2 : 0.0;
        EXPECT_DOUBLE_EQ(weights, bf16 ? 2.5 * P + (v - 1) * P / 2 + kept : v * P) << prec << " " << k << " stage " << s;
        const double want = stage_memory(cc, s, s + 1, 1, l.in_flight_depth(s));
        EXPECT_NEAR(m.total(), want, 1e-9 * want) << prec << " " << k << " stage " << s;
      }
      if (k == "pipedream") { EXPECT_EQ(r.stages[0].memory.versions, 4); }  // stage 0 stashes 3
    }
  }
}

TEST(Simulator, TraceHasComputeEventsPerRank) {
  const ClusterModel net = ClusterModel::single(1e9);
  const SimResult r = run(equal_layers(3), "1f1b", one_layer_stages(3), 4, 4, net);
  ASSERT_TRUE(r.ok);
  const nlohmann::json j = nlohmann::json::parse(sim_trace_json(r, "test"));
  int f = 0, b = 0;
  for (const auto& e : j.at("traceEvents")) {
    if (e.value("ph", "") != "X") continue;
    const std::string n = e.at("name");
    if (n[0] == 'F' && std::isdigit(static_cast<unsigned char>(n[1]))) ++f;
    if (n[0] == 'B' && std::isdigit(static_cast<unsigned char>(n[1]))) ++b;
    EXPECT_GE(e.at("tid").get<int>(), 0);
    EXPECT_LT(e.at("tid").get<int>(), 3);
  }
  EXPECT_EQ(f, 3 * 4 * static_cast<int>(r.minibatches));
  EXPECT_EQ(b, f);
}

TEST(Simulator, ComparesWithAMeasuredRun) {
  char tmpl[] = "/tmp/pt_simcmp_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  nlohmann::json summary = {{"schedule", "1f1b"}, {"split", {1}},        {"replicas", {1, 1}}, {"microbatches", 2},
                            {"ranks", 2},         {"batch_size", 2},     {"steps", 10},        {"train_wall_s", 0.5},
                            {"bubble_fraction", 0.2}, {"bytes_p2p_per_sample", 0.0}, {"bytes_allreduce_per_sample", 0.0}};
  std::ofstream(dir + "/summary.json") << summary.dump();
  // rank 0 (stage 0): F 10 ms, B 20 ms; rank 1: F 12 ms, B 24 ms
  std::vector<TraceEvent> ev = {{0, 0.00, 0.010, Op::forward, 0, 0},  {0, 0.02, 0.030, Op::forward, 1, 0},
                                {1, 0.01, 0.022, Op::forward, 0, 0},  {1, 0.03, 0.054, Op::backward, 0, 0},
                                {0, 0.06, 0.080, Op::backward, 0, 0}, {0, 0.08, 0.100, Op::backward, 1, 0}};
  std::ofstream(dir + "/trace.json") << chrome_trace_json(ev, one_layer_stages(2), "run");
  const MeasuredRun m = MeasuredRun::load(dir);
  ASSERT_EQ(m.forward_s.size(), 2u);
  EXPECT_NEAR(m.forward_s[0], 0.010, 1e-9);
  EXPECT_NEAR(m.backward_s[0], 0.020, 1e-9);
  EXPECT_NEAR(m.forward_s[1], 0.012, 1e-9);
  EXPECT_NEAR(m.backward_s[1], 0.024, 1e-9);
  EXPECT_EQ(m.steps, 10);
  const SimResult r = run(equal_layers(2, 0.01), "1f1b", one_layer_stages(2), 2, 2, ClusterModel::single(1e9));
  const std::string rep = compare_report(r, m);
  EXPECT_NE(rep.find("time per minibatch"), std::string::npos) << rep;
  EXPECT_NE(rep.find("per stage"), std::string::npos) << rep;
  std::remove((dir + "/summary.json").c_str());
  std::remove((dir + "/trace.json").c_str());
  rmdir(dir.c_str());
}

// A V run (zb-v, 2 ranks, 4 stages): summary.json records the placement; the layout is the
// V (rank 0 holds stages 0 and 3), the trace's slices name their stage ("3I0"), and a
// unit's backward is its I + W. Older files without "placement" take the schedule's own.
TEST(Simulator, ComparesWithAMeasuredVRun) {
  char tmpl[] = "/tmp/pt_simcmp_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  nlohmann::json summary = {{"schedule", "zb-v"}, {"placement", "v"}, {"split", {1, 2, 3}}, {"replicas", {1, 1}},
                            {"microbatches", 2}, {"ranks", 2}, {"batch_size", 2}, {"steps", 10}, {"train_wall_s", 0.5}};
  std::ofstream(dir + "/summary.json") << summary.dump();
  const Layout v = Layout::make({0, 1, 2, 3}, 4, {1, 1}, Placement::v);
  // stage 3 (rank 0): F 10 ms, I 15 ms + W 5 ms; stage 1 (rank 1): F 12 ms
  std::vector<TraceEvent> ev = {{0, 0.00, 0.010, Op::forward, 0, 0, 3},        {0, 0.02, 0.035, Op::backward_input, 0, 0, 3},
                                {0, 0.04, 0.045, Op::backward_weight, 0, 0, 3}, {1, 0.01, 0.022, Op::forward, 0, 0, 1}};
  std::ofstream(dir + "/trace.json") << chrome_trace_json(ev, v, "run");
  MeasuredRun m = MeasuredRun::load(dir);
  EXPECT_EQ(m.placement, Placement::v);
  ASSERT_EQ(m.forward_s.size(), 4u);
  EXPECT_NEAR(m.forward_s[3], 0.010, 1e-9);
  EXPECT_NEAR(m.backward_s[3], 0.020, 1e-9);
  EXPECT_NEAR(m.forward_s[1], 0.012, 1e-9);
  EXPECT_TRUE(std::isnan(m.forward_s[0]));
  const Layout l = m.layout(4);
  EXPECT_EQ(l.stages_of_rank(0), std::vector<int>({0, 3}));
  const SimResult r = run(equal_layers(4, 0.01), "zb-v", l, 2, 2, ClusterModel::single(1e9));
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_NE(compare_report(r, m).find("per stage"), std::string::npos);
  summary.erase("placement");  // a summary written before the field: zb-v's own placement
  std::ofstream(dir + "/summary.json") << summary.dump();
  EXPECT_EQ(MeasuredRun::load(dir).placement, Placement::v);
  summary["schedule"] = "1f1b";  // ... and a contiguous kind whose layout does not hold 4 stages on 2 ranks
  std::ofstream(dir + "/summary.json") << summary.dump();
  try {
    MeasuredRun::load(dir);
    ADD_FAILURE() << "a contiguous layout of 4 stages on 2 rank groups was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("summary.json: the run's layout"), std::string::npos) << e.what();
  }
  std::remove((dir + "/summary.json").c_str());
  std::remove((dir + "/trace.json").c_str());
  rmdir(dir.c_str());
}

}  // namespace pt

namespace pt {

// parallel.recompute: full adds the stage's forward to every B (and I), and a unit keeps
// the stage's input and output only, plus recompute buffers (one, and one per unit between
// I and W); selective costs its layers' measured backward and keeps their selective stash.
TEST(Simulator, RecomputationCostsForwardTimeAndSavesBytes) {
  Profile p = equal_layers(4);  // F = 1, B = 2 per stage and sample
  p.input_bytes = 1e5;
  for (LayerProfile& l : p.layers)
    l.output_bytes = 1e5, l.stash_bytes = 1e6, l.selective_stash_bytes = 4e5, l.selective_backward_s = 2.5, l.param_bytes = 8;
  const ClusterModel net = ClusterModel::single(1e18);
  auto sim = [&](const std::string& k, Recompute r) {
    SimConfig c;
    c.def = &schedule_def(k);
    c.layout = one_layer_stages(4);
    c.microbatches = 8;
    c.batch_size = 8;
    c.recompute.assign(4, r);
    return simulate(p, net, c);
  };
  const SimResult none = sim("1f1b", Recompute::none), full = sim("1f1b", Recompute::full), sel = sim("1f1b", Recompute::selective);
  ASSERT_TRUE(none.ok && full.ok && sel.ok);
  EXPECT_NEAR(none.time_per_minibatch, 3.0 * (8 + 3), 1e-9);  // (M + K - 1)(F + B)
  EXPECT_NEAR(sel.time_per_minibatch, 3.5 * (8 + 3), 1e-9);   // B = 2.5
  EXPECT_NEAR(full.stages[1].backward_s, 3.0, 1e-12);         // B + F
  // the last stage's B directly follows its own F: the F's layout is reused, nothing recomputed
  for (size_t w = 0; w < 4; ++w)
    for (const ReplayEvent& e : full.replay.events[w]) {
      const Action& a = full.schedule.workers[w][static_cast<size_t>(e.index)];
      if (a.op == Op::backward) {
        EXPECT_NEAR(e.end - e.start, w == 3 ? 2.0 : 3.0, 1e-12) << "rank " << w << " B" << a.mb;
      }
    }
  EXPECT_GT(full.time_per_minibatch, none.time_per_minibatch);
  EXPECT_LE(full.time_per_minibatch, 4.0 * (8 + 3) + 1e-9);
  // memory (the memory model on the profile's bytes, within 1% for allocator rounding)
  using C = MemCategory;
  const RankMemory &n0 = none.memory[0], &f0 = full.memory[0], &s0 = sel.memory[0];
  auto near = [](double got, double want) { EXPECT_NEAR(got, want, 0.01 * want); };
  EXPECT_EQ(n0.in_flight, 4);
  near(n0[C::activations], 4 * (1e5 + 1e6));         // input + stash per unit
  near(s0[C::activations], 4 * (1e5 + 4e5));         // input + selective stash
  near(f0[C::activations], 4 * (1e5 + 1e5) + 1.1e6);  // input + output per unit, one recompute buffer
  EXPECT_EQ(f0.total() - f0[C::activations], n0.total() - n0[C::activations]);
  const SimResult zb = sim("zb-h1", Recompute::full);
  ASSERT_TRUE(zb.ok);
  const int kept = max_between_i_and_w(zb.schedule, 0, 0);
  ASSERT_GT(kept, 0);
  // recompute buffers: input, stash and the kept output gradients
  near(zb.memory[0][C::activations], zb.memory[0].in_flight * 2e5 + (1 + kept) * (1e5 + 1e6 + 1e5));
}

}  // namespace pt

namespace pt {

// parallel.tensor: a split layer's forward and backward each add its tensor sums, an
// allreduce among t ranks of the bytes they sum (ClusterModel::allreduce_seconds at the
// innermost level, the bytes scaled to the unit), and nothing else changes. One stage of 2
// layers at t = 2, one of them split with 2 sums of 4 MB per sample: F grows by 2 x
// allreduce(2 ranks, 4 MB) per sample, B by the same.
TEST(Simulator, TensorSumsCostAnAllreduceEachWayPerSplitLayer) {
  const double bw = 1e9, lat = 1e-5;
  const ClusterModel net = ClusterModel::single(bw, lat);
  Profile p = equal_layers(2);
  p.tensor = 2;
  p.layers[1].tensor_sums = 2;
  p.layers[1].tensor_sum_bytes = 8e6;  // per microbatch of 1 sample: 2 sums of 4 MB
  SimConfig c;
  c.def = &schedule_def("1f1b");
  c.layout = Layout::make({0}, 2, {1});
  c.microbatches = 2;
  c.batch_size = 4;  // units of 2 samples: each sum 8 MB
  const SimResult plain = simulate(equal_layers(2), net, c);
  c.tensor = 2;
  const SimResult split = simulate(p, net, c);
  ASSERT_TRUE(plain.ok && split.ok) << plain.error << split.error;
  const double sum = net.allreduce_seconds(0, 2, 8e6);
  EXPECT_NEAR(sum, 8e6 / bw + 2 * lat, 1e-12);  // ring factor 1 at 2 ranks
  // per unit: F + B = 3 s x 2 layers x 2 samples; the split adds 2 sums in F and 2 in B; 2 units
  EXPECT_NEAR(plain.time_per_minibatch, 2 * 12.0, 1e-9);
  EXPECT_NEAR(split.time_per_minibatch - plain.time_per_minibatch, 2 * 4 * sum, 1e-9);
}

}  // namespace pt
