// Planner: the DP's choice equals an exhaustive search over every split and replica
// assignment on many random instances (costs, bandwidths, one or two levels, memory caps
// that bind), with the objective recomputed here from the documented formulas; the
// closed-form in-flight/version rules match the generated schedules; choose_plan and
// plan.json round-trip.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <random>
#include <unistd.h>

#include "pipetrain/error.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

struct Instance {
  ChainCosts c;
  std::vector<ClusterLevel> levels;  // innermost first, the last covers everything
  int N = 1;
  double cap = 0;
};

// ---- the objective, written out again from plan.hpp's definition -----------------------

int level_of(const std::vector<ClusterLevel>& lv, int a, int b) {
  if (a == b) return -1;
  for (size_t k = 0; k < lv.size(); ++k)
    if (a / lv[k].ranks == b / lv[k].ranks) return static_cast<int>(k);
  return static_cast<int>(lv.size()) - 1;
}

double p2p(const std::vector<ClusterLevel>& lv, int level, double bytes) {
  return level < 0 ? 0.0 : lv[static_cast<size_t>(level)].latency + bytes / lv[static_cast<size_t>(level)].bandwidth;
}

double ring(const std::vector<ClusterLevel>& lv, int level, int r, double bytes) {
  if (r < 2) return 0.0;
  const ClusterLevel& l = lv[static_cast<size_t>(std::max(0, level))];
  return 2.0 * (r - 1) / r * bytes / l.bandwidth + 2.0 * (r - 1) * l.latency;
}

// The memory rule a schedule's registry entry points to.
const MemoryRule* rule_of(const char* schedule) { return schedule_def(schedule).memory; }
std::string rule_name(const MemoryRule* rule) {
  for (const ScheduleDef* d : schedule_defs())
    if (d->memory == rule) return d->name;
  return "?";
}

int in_flight(const ChainCosts& c, int d, int r) {
  const int per = (c.units + r - 1) / r;
  if (c.rule == rule_of("1f1b")) return std::min(d, per);
  if (c.rule == rule_of("gpipe")) return per;
  return d;
}
int versions(const ChainCosts& c, int d) { return c.rule == rule_of("pipedream") ? d : c.rule == rule_of("2bw") ? 2 : 1; }

struct Eval {
  double objective = 0, max_memory = 0;
};

Eval objective(const Instance& in, const std::vector<int>& first, const std::vector<int>& reps) {
  const ChainCosts& c = in.c;
  const int L = c.layers(), K = static_cast<int>(reps.size());
  Eval e;
  int off = 0;
  for (int s = 0; s < K; ++s) {
    const int i = first[static_cast<size_t>(s)], j = s + 1 < K ? first[static_cast<size_t>(s) + 1] : L;
    const int r = reps[static_cast<size_t>(s)];
    double C = 0, P = 0, O = 0, S = 0;
    for (int k = i; k < j; ++k) {
      C += c.compute[static_cast<size_t>(k)];
      P += c.params[static_cast<size_t>(k)];
      O += c.opt_state[static_cast<size_t>(k)];
      S += c.stash[static_cast<size_t>(k)];
    }
    const double opt = c.optimizer_s_per_byte * P;
    const double ar = ring(in.levels, level_of(in.levels, off, off + r - 1), r, P);
    const double a = c.amortized ? (C + opt) / r : C * ((c.units + r - 1) / r) / c.units + opt;
    const double b = c.amortized ? ar / r : ar;
    e.objective = std::max(e.objective, c.serial_allreduce ? a + b : std::max(a, b));
    int rest = 0;
    for (int t = s; t < K; ++t) rest += reps[static_cast<size_t>(t)];
    const int d = (rest + r - 1) / r;
    // the memory model's (memory_model.hpp), which the DP's cap uses too: the search is what is
    // checked here, and the rules' units in flight and versions against the ones written out above
    EXPECT_EQ(rule_in_flight(c, d, r), in_flight(c, d, r));
    EXPECT_EQ(rule_versions(c, d), versions(c, d));
    const double mem = stage_memory(c, i, j, r, d);
    e.max_memory = std::max(e.max_memory, mem);
    if (s + 1 < K) {
      const int o1 = off + r, r1 = reps[static_cast<size_t>(s) + 1];
      const double bytes = c.out[static_cast<size_t>(j) - 1];
      e.objective = std::max(e.objective, 2.0 * c.units * p2p(in.levels, level_of(in.levels, off, o1), bytes) / r);
      e.objective = std::max(e.objective, 2.0 * c.units * p2p(in.levels, level_of(in.levels, o1 - 1, o1 + r1 - 1), bytes) / r1);
    }
    off += r;
  }
  return e;
}

struct Candidate {
  std::vector<int> first, reps;
  Eval e;
};

// every split (bitmask of cut points) and every composition of N into K parts
std::vector<Candidate> all_layouts(const Instance& in, bool pow2_aligned) {
  const int L = in.c.layers(), N = in.N;
  std::vector<Candidate> out;
  for (int mask = 0; mask < (1 << (L - 1)); ++mask) {
    std::vector<int> first = {0};
    for (int b = 0; b < L - 1; ++b)
      if (mask & (1 << b)) first.push_back(b + 1);
    const int K = static_cast<int>(first.size());
    if (K > N) continue;
    std::vector<int> reps(static_cast<size_t>(K), 1);
    std::function<void(int, int, int)> rec = [&](int s, int left, int off) {
      if (s == K - 1) {
        reps[static_cast<size_t>(s)] = left;
        if (pow2_aligned && ((left & (left - 1)) || off % left)) return;
        out.push_back({first, reps, objective(in, first, reps)});
        return;
      }
      for (int r = 1; r <= left - (K - 1 - s); ++r) {
        if (pow2_aligned && ((r & (r - 1)) || off % r)) continue;
        reps[static_cast<size_t>(s)] = r;
        rec(s + 1, left - r, off + r);
      }
    };
    rec(0, N, 0);
  }
  return out;
}

Instance random_instance(std::mt19937_64& g) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  auto pick = [&](int lo, int hi) { return lo + static_cast<int>(g() % static_cast<uint64_t>(hi - lo + 1)); };
  Instance in;
  const int L = pick(1, 8);
  in.N = pick(1, 6);
  ChainCosts& c = in.c;
  for (int i = 0; i < L; ++i) {
    c.compute.push_back(0.05 + 2.0 * u(g));
    c.params.push_back(u(g) < 0.2 ? 0.0 : 1e3 + 2e7 * u(g));
    c.opt_state.push_back(u(g) < 0.5 ? 0.0 : c.params.back());
    c.stash.push_back(1e3 + 4e6 * u(g));
    c.out.push_back(1e2 + 4e6 * u(g));
  }
  c.input_bytes = 1e3 + 1e6 * u(g);
  c.optimizer_s_per_byte = u(g) < 0.5 ? 0.0 : 1e-9 * u(g);
  c.units = pick(1, 4);
  c.amortized = u(g) < 0.3;
  c.serial_allreduce = u(g) < 0.3;
  c.rule = c.amortized ? rule_of("pipedream")
                       : std::vector<const MemoryRule*>{rule_of("1f1b"), rule_of("gpipe"), rule_of("2bw")}[g() % 3];
  if (u(g) < 0.5) {
    in.levels.push_back({int64_t{1} << 40, 1e8 + 1e10 * u(g), u(g) < 0.5 ? 0.0 : 1e-4 * u(g)});
  } else {
    in.levels.push_back({pick(2, 3), 1e9 + 1e11 * u(g), 1e-5 * u(g)});
    in.levels.push_back({int64_t{1} << 40, 1e8 + 1e10 * u(g), 1e-4 * u(g)});
  }
  return in;
}

DpOptions dp_options(double cap, ReplicaSet rs) {
  DpOptions o;
  o.memory_cap = cap;
  o.replicas = rs;
  return o;
}

}  // namespace

TEST(Planner, DpEqualsExhaustiveSearch) {
  std::mt19937_64 g(20240605);
  int instances = 0, binding = 0, infeasible = 0, unique = 0;
  for (int t = 0; t < 6000; ++t) {
    Instance in = random_instance(g);
    const bool pow2 = t % 4 == 3;  // a quarter with the large-job replica set
    std::vector<Candidate> all = all_layouts(in, pow2);
    const ClusterModel net = ClusterModel::from_levels(in.levels);
    if (all.empty()) {  // e.g. one layer on 3 ranks: no power-of-two layout exists
      ASSERT_TRUE(pow2);
      EXPECT_FALSE(plan_dp(in.c, net, in.N, dp_options(0, ReplicaSet::powers_of_two)).ok);
      continue;
    }
    // a memory cap that binds: below the unconstrained optimum's memory, at or above the
    // smallest footprint (sometimes below it: nothing fits); sometimes no cap
    const auto opt0 = std::min_element(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) { return a.e.objective < b.e.objective; });
    double least = INFINITY;
    for (auto& c : all) least = std::min(least, c.e.max_memory);
    const int mode = static_cast<int>(g() % 10);
    if (mode == 0) in.cap = 0;
    else if (mode == 1) in.cap = least * 0.999;
    else in.cap = least + (opt0->e.max_memory - least) * std::uniform_real_distribution<double>(0.01, 0.99)(g);
    if (in.cap > 0 && opt0->e.max_memory > in.cap) ++binding;

    double best = INFINITY;
    for (auto& c : all)
      if (in.cap <= 0 || c.e.max_memory <= in.cap) best = std::min(best, c.e.objective);
    const DpResult dp = plan_dp(in.c, net, in.N, dp_options(in.cap, pow2 ? ReplicaSet::powers_of_two : ReplicaSet::all));
    ++instances;
    if (!std::isfinite(best)) {
      EXPECT_FALSE(dp.ok) << "instance " << t << ": nothing fits but the DP found a plan";
      ++infeasible;
      continue;
    }
    if (!dp.ok) {
      std::string d = "L=" + std::to_string(in.c.layers()) + " N=" + std::to_string(in.N) + " cap=" + std::to_string(in.cap) +
                      " units=" + std::to_string(in.c.units) + " amort=" + std::to_string(in.c.amortized) + " rule=" +
                      rule_name(in.c.rule) + " pow2=" + std::to_string(pow2);
      for (auto& c : all)
        if (c.e.max_memory <= in.cap || in.cap <= 0) {
          d += "\n feasible:";
          for (size_t q = 0; q < c.first.size(); ++q) d += " [" + std::to_string(c.first[q]) + "x" + std::to_string(c.reps[q]) + "]";
          d += " mem=" + std::to_string(c.e.max_memory) + " obj=" + std::to_string(c.e.objective);
        }
      FAIL() << "instance " << t << ": the DP found nothing, the search found " << best << "\n" << d;
    }
    EXPECT_NEAR(dp.objective, best, 1e-9 * best) << "instance " << t;
    // the DP's layout: feasible, and its objective (recomputed here) is the optimum
    const Eval mine = objective(in, dp.first, dp.replicas);
    EXPECT_NEAR(mine.objective, best, 1e-9 * best) << "instance " << t;
    if (in.cap > 0) { EXPECT_LE(mine.max_memory, in.cap * (1 + 1e-12)) << "instance " << t; }
    // evaluate_layout agrees with the formula here
    const LayoutCost lc = evaluate_layout(in.c, net, dp.layout(in.c.layers()), in.cap);
    EXPECT_NEAR(lc.objective, best, 1e-9 * best) << "instance " << t;
    int ties = 0;
    const Candidate* arg = nullptr;
    for (auto& c : all)
      if ((in.cap <= 0 || c.e.max_memory <= in.cap) && c.e.objective <= best * (1 + 1e-9)) ++ties, arg = &c;
    if (ties == 1) {
      ++unique;
      EXPECT_EQ(dp.first, arg->first) << "instance " << t;
      EXPECT_EQ(dp.replicas, arg->reps) << "instance " << t;
    }
  }
  std::printf("[          ] %d instances, %d with a binding memory cap, %d with none fitting, %d with a unique optimum\n",
              instances, binding, infeasible, unique);
  EXPECT_GT(instances, 5500);
  EXPECT_GT(binding, 2000);    // the cap excluded the unconstrained optimum this often
  EXPECT_GT(infeasible, 150);
  EXPECT_GT(unique, 2500);     // the split and replication were compared this often
}

TEST(Planner, StraightPipelineDp) {
  // ReplicaSet::one: exactly N stages of one replica, the best such split
  std::mt19937_64 g(7);
  for (int t = 0; t < 300; ++t) {
    Instance in = random_instance(g);
    if (in.c.layers() < in.N) continue;
    double best = INFINITY;
    for (auto& c : all_layouts(in, false))
      if (static_cast<int>(c.reps.size()) == in.N) best = std::min(best, c.e.objective);
    const DpResult dp = plan_dp(in.c, ClusterModel::from_levels(in.levels), in.N, dp_options(0, ReplicaSet::one));
    ASSERT_TRUE(dp.ok);
    EXPECT_EQ(static_cast<int>(dp.replicas.size()), in.N);
    EXPECT_NEAR(dp.objective, best, 1e-9 * best);
  }
}

TEST(Planner, MemoryRulesMatchTheGenerators) {
  // the DP's closed forms of in-flight units and weight versions against the schedules
  const std::vector<std::vector<int>> pats = {{1}, {3}, {1, 1, 1}, {2, 1, 1}, {1, 2, 1}, {3, 1}, {1, 3}, {2, 3, 1}, {3, 2, 2, 1}, {4, 1, 2}};
  int checked = 0;
  for (const auto& reps : pats) {
    const int K = static_cast<int>(reps.size());
    std::vector<int> first;
    for (int s = 0; s < K; ++s) first.push_back(s);
    const Layout l = Layout::make(first, K, reps);
    int64_t lcm = 1;
    for (int r : reps) lcm = std::lcm(lcm, static_cast<int64_t>(r));
    for (std::string k : {"1f1b", "gpipe", "pipedream", "2bw", "zb-h1", "zb-h2"})
      for (int M = 1; M <= 9; ++M) {
        const ScheduleDef& def = schedule_def(k);
        const bool pd = def.per_minibatch_units;
        if ((pd && M > 1) || (def.check && !def.check(l, M).empty())) continue;
        const Schedule s = make_schedule(def, l, pd ? 6 * lcm : 6, M);
        ChainCosts c;
        c.units = pd ? 1 : M;
        c.rule = def.memory;
        c.ranks = l.ranks();
        for (int st = 0; st < K; ++st) {
          int inflight = 0, vers = 0;
          for (int q = 0; q < reps[static_cast<size_t>(st)]; ++q) {
            inflight = std::max(inflight, max_in_flight(s, l.rank_of(st, q), st));
            vers = std::max(vers, max_versions_held(s, l.rank_of(st, q), st));
          }
          const int d = l.in_flight_depth(st), r = reps[static_cast<size_t>(st)];
          if (k == "2bw" || def.split_backward) EXPECT_LE(inflight, rule_in_flight(c, d, r)) << k;  // upper bounds
          else EXPECT_EQ(inflight, rule_in_flight(c, d, r)) << k << " " << l.replication() << " M=" << M << " stage " << st;
          EXPECT_EQ(vers, rule_versions(c, d)) << k << " " << l.replication() << " M=" << M << " stage " << st;
          ++checked;
        }
      }
  }
  EXPECT_GT(checked, 300);
}

// batch_growth_margin: a plan that averages more samples per update (pipedream with a
// replicated stage) is judged 1/(1 - margin) slower, so it wins only when predicted faster than
// every fitting candidate that keeps the minibatch by about the margin (0.5% ties aside); when
// the margin overrode the time-fastest, the plan says so. Instances sweep chains and network
// speeds; some must exercise each side.
TEST(Planner, LargerUpdatesMustWinByTheMargin) {
  int overridden = 0, grown = 0, instances = 0;
  for (uint64_t seed : {1, 2, 3, 4})
    for (double bw : {2e8, 1e9, 5e9, 5e10})
      for (int N : {2, 4}) {
        const Profile p = synthetic_chain(12, seed);
        const ClusterModel net = ClusterModel::single(bw, 1e-5);
        PlanOptions o;
        o.schedules = {"pipedream", "1f1b"};
        o.refine_steps = 0;
        const Plan plan = choose_plan(p, net, N, 32, o);
        o.batch_growth_margin = 0;
        const Plan timed = choose_plan(p, net, N, 32, o);
        ASSERT_TRUE(plan.ok && timed.ok) << plan.error << timed.error;
        ++instances;
        PlanCandidate chosen;
        chosen.schedule = plan.schedule, chosen.layout = plan.layout, chosen.batch_size = plan.batch_size;
        PlanCandidate fastest;
        fastest.schedule = timed.schedule, fastest.layout = timed.layout, fastest.batch_size = timed.batch_size;
        const double tc = plan.sim.time_per_sample, tf = timed.sim.time_per_sample;
        EXPECT_LE(tf, tc * 1.005) << "margin 0 picks the fastest";
        std::vector<const PlanCandidate*> all = {&plan.bsp, &plan.straight};
        for (const PlanCandidate& c : plan.candidates) all.push_back(&c);
        if (chosen.samples_per_update() > 32) {
          ++grown;
          for (const PlanCandidate* c : all)
            if (c->fits && c->sim.ok && c->batch_size == 32 && c->samples_per_update() == 32) {
              EXPECT_LT(tc, c->sim.time_per_sample * 0.9 * 1.005) << c->schedule << " " << c->layout.replication();
            }
        }
        if (fastest.samples_per_update() > 32 && chosen.samples_per_update() == 32) {
          ++overridden;
          EXPECT_GT(tf, tc * 0.9 / 1.005);  // the override costs predicted time, less than the margin
          EXPECT_NE(plan.choice_note.find("batch_growth_margin"), std::string::npos) << plan.choice_note;
        } else {
          EXPECT_EQ(plan.choice_note, "");
        }
      }
  std::printf("instances %d: the margin overrode the fastest in %d, a larger update won by it in %d\n", instances,
              overridden, grown);
  EXPECT_EQ(instances, 32);
  EXPECT_GT(overridden, 0) << "no instance where the margin changed the choice: the test exercises nothing";
  EXPECT_GT(grown, 0) << "no instance where a larger update won by the margin";
}

TEST(Planner, ChoosesAndRoundTripsPlanJson) {
  const Profile p = synthetic_chain(24, 3);
  const ClusterModel net = ClusterModel::from_levels({{4, 5e10, 2e-6}, {int64_t{1} << 40, 5e9, 1e-5}});
  PlanOptions o;
  o.batch_growth_margin = 0;  // time alone (the margin has its own test below)
  const Plan plan = choose_plan(p, net, 8, 64, o);
  ASSERT_TRUE(plan.ok) << plan.error;
  EXPECT_EQ(plan.layout.ranks(), 8);
  EXPECT_EQ(plan.layout.end_layer(plan.layout.stages() - 1), 24);
  EXPECT_EQ(64 % plan.microbatches, 0);
  ASSERT_TRUE(plan.has_bsp);
  ASSERT_TRUE(plan.has_straight);
  // the chosen plan is the fastest that fits, baselines included (ties within 0.5% go to less traffic)
  EXPECT_LE(plan.sim.time_per_sample, plan.bsp.sim.time_per_sample * 1.005);
  EXPECT_LE(plan.sim.time_per_sample, plan.straight.sim.time_per_sample * 1.005);
  for (const PlanCandidate& c : plan.candidates)
    if (c.fits && c.sim.ok) { EXPECT_LE(plan.sim.time_per_sample, c.sim.time_per_sample * 1.005); }
  EXPECT_EQ(plan.straight.layout.stages(), 8);
  // deterministic
  const Plan again = choose_plan(p, net, 8, 64, o);
  EXPECT_EQ(again.layout.first, plan.layout.first);
  EXPECT_EQ(again.layout.replicas, plan.layout.replicas);
  EXPECT_EQ(again.schedule, plan.schedule);
  // plan.json
  char name[] = "/tmp/pt_plan_XXXXXX";
  const int fd = mkstemp(name);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(name) << plan.to_json();
  const PlanFile f = PlanFile::load(name);
  EXPECT_EQ(f.schedule, plan.schedule);
  EXPECT_EQ(f.microbatches, plan.microbatches);
  EXPECT_EQ(f.replicas, plan.layout.replicas);
  EXPECT_EQ(f.layout().first, plan.layout.first);
  const nlohmann::json j = nlohmann::json::parse(plan.to_json());
  EXPECT_EQ(j.at("stages").size(), static_cast<size_t>(plan.layout.stages()));
  EXPECT_TRUE(j.at("predicted").contains("time_per_sample_s"));
  EXPECT_TRUE(j.contains("communication_reduction_vs_bsp"));
  std::remove(name);
  // a cap nothing fits
  o.memory_cap = 1.0;
  const Plan none = choose_plan(p, net, 8, 64, o);
  EXPECT_FALSE(none.ok);
  EXPECT_NE(none.error.find("memory cap"), std::string::npos);
}

// plan.json records the placement: a zb-v plan (a V, 2 stages per rank group) reads back as
// the same V layout (simulate --plan builds it), its stage table lists every stage with its
// group's replicas; a plan written before the field takes the schedule's own placement.
TEST(Planner, PlanJsonKeepsThePlacement) {
  Plan plan;
  plan.ok = true;
  plan.ranks = 4;
  plan.layers = 16;
  plan.batch_size = 64;
  plan.schedule = "zb-v";
  plan.microbatches = 4;
  plan.layout = Layout::make({0, 4, 8, 12}, 16, {2, 2}, Placement::v);
  char name[] = "/tmp/pt_plan_XXXXXX";
  const int fd = mkstemp(name);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(name) << plan.to_json();
  nlohmann::json j = nlohmann::json::parse(plan.to_json());
  EXPECT_EQ(j.at("placement"), "v");
  ASSERT_EQ(j.at("stages").size(), static_cast<size_t>(plan.layout.stages()));
  for (const auto& st : j.at("stages")) EXPECT_EQ(st.at("replicas"), plan.layout.replicas[0]);
  const Layout l = PlanFile::load(name).layout();
  EXPECT_EQ(l.placement, Placement::v);
  EXPECT_EQ(l.first, plan.layout.first);
  EXPECT_EQ(l.replicas, plan.layout.replicas);
  j.erase("placement");  // an older plan.json
  std::ofstream(name) << j.dump();
  EXPECT_EQ(PlanFile::load(name).layout().placement, Placement::v);
  j["schedule"] = "1f1b";
  std::ofstream(name) << j.dump();
  try {
    PlanFile::load(name);
    ADD_FAILURE() << "4 stages on 2 rank groups accepted as a contiguous layout";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("the plan's layout"), std::string::npos) << e.what();
  }
  j["placement"] = "diagonal";
  std::ofstream(name) << j.dump();
  try {
    PlanFile::load(name);
    ADD_FAILURE() << "an unknown placement was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unknown placement 'diagonal'"), std::string::npos) << e.what();
  }
  std::remove(name);
}

TEST(Planner, MemoryCapIsRespectedBySimulation) {
  const Profile p = synthetic_chain(40, 5);
  const ClusterModel net = ClusterModel::single(1e10, 1e-6);
  PlanOptions o;
  const Plan free = choose_plan(p, net, 6, 96, o);
  ASSERT_TRUE(free.ok);
  o.memory_cap = free.sim.max_memory * 0.6;
  const Plan capped = choose_plan(p, net, 6, 96, o);
  if (capped.ok) { EXPECT_LE(capped.sim.max_memory, o.memory_cap); }
}

}  // namespace pt

namespace pt {
namespace {

// Tied layers across stages need a flush schedule (tie_conflict, the one rule TrainSetup and
// the planner share): an asynchronous schedule is refused only when the tied copies sit in
// different stages, and the planner never chooses a vetoed candidate.
TEST(Planner, TiedLayersAcrossStagesVetoAsynchronousSchedules) {
  const char* text =
      "[data]\nsource = \"synthetic\"\nshape = [6]\nclasses = 11\n[model]\n"
      "[[model.layers]]\ntype = \"embedding\"\nname = \"emb\"\ndim = 8\n"
      "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
      "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
      "[[model.layers]]\ntype = \"lm_head\"\ntie = \"emb\"\n";
  const Deck deck = parse_deck_text(text, "tied.toml", {});
  const Layout one = Layout::make({0}, 4, {2}), two = Layout::make({0, 2}, 4, {1, 1});
  EXPECT_EQ(tie_conflict(deck, schedule_def("pipedream"), one), "");  // both copies in one stage
  EXPECT_EQ(tie_conflict(deck, schedule_def("1f1b"), two), "");       // a flush keeps them equal
  const std::string why = tie_conflict(deck, schedule_def("pipedream"), two);
  EXPECT_NE(why.find("'lm_head3' (stage 1) tied to 'emb' (stage 0)"), std::string::npos) << why;
  EXPECT_NE(why.find("zb-v"), std::string::npos) << why;  // the flush schedules, from the registry
  EXPECT_NE(tie_conflict(deck, schedule_def("2bw"), two), "");
  // the planner: veto every schedule without a flush on more than one stage
  const Profile p = synthetic_chain(12, 5);
  const ClusterModel net = ClusterModel::from_levels({{4, 5e10, 2e-6}, {int64_t{1} << 40, 5e9, 1e-5}});
  PlanOptions o;
  o.veto = [](const ScheduleDef& def, const Layout& layout) {
    return def.flush || layout.stages() == 1 ? std::string() : std::string("vetoed");
  };
  const Plan plan = choose_plan(p, net, 4, 64, o);
  ASSERT_TRUE(plan.ok) << plan.error;
  EXPECT_TRUE(schedule_def(plan.schedule).flush || plan.layout.stages() == 1) << plan.schedule;
  int vetoed = 0;
  for (const PlanCandidate& c : plan.candidates) vetoed += c.note == "vetoed";
  EXPECT_GT(vetoed, 0);
}

}  // namespace
}  // namespace pt

namespace pt {
namespace {

// Recomputation is planned jointly (PlanOptions::recompute_modes): on a chain whose memory is
// its activations, a cap that no plan without recomputation meets is met by a recomputing
// plan (under the cap, said in choice_note); with recomputation not allowed nothing fits and
// the error says why; without a cap recomputation, which only costs time, is not chosen.
TEST(Planner, ChoosesRecomputationWhenOnlyItFits) {
  Profile p = synthetic_chain(8, 3);
  p.input_bytes = 1e5;
  for (LayerProfile& l : p.layers) {
    l.output_bytes = 1e6, l.stash_bytes = 4e7, l.selective_stash_bytes = 3e7, l.param_bytes = l.optimizer_bytes = 1e5;
    l.selective_backward_s = l.backward_s * 1.1;
  }
  const ClusterModel net = ClusterModel::single(1e10, 1e-6);
  PlanOptions o;
  o.schedules = {"1f1b"};
  o.microbatches = {2};
  o.replicas = ReplicaSet::one;  // a straight pipeline: its first stage keeps two units in flight
  o.baselines = false;
  o.recompute_modes = {Recompute::none, Recompute::selective, Recompute::full};
  const Plan free = choose_plan(p, net, 2, 16, o);
  ASSERT_TRUE(free.ok) << free.error;
  EXPECT_EQ(free.recompute, Recompute::none);
  o.recompute_modes = {Recompute::full};  // the fastest fully recomputing plan: its memory sets the cap
  const Plan full = choose_plan(p, net, 2, 16, o);
  ASSERT_TRUE(full.ok) << full.error;
  ASSERT_LT(full.sim.max_memory, 0.8 * free.sim.max_memory);
  o.memory_cap = full.sim.max_memory * 1.05;
  o.recompute_modes = {Recompute::none, Recompute::selective, Recompute::full};
  const Plan capped = choose_plan(p, net, 2, 16, o);
  ASSERT_TRUE(capped.ok) << capped.error;
  EXPECT_NE(capped.recompute, Recompute::none);
  EXPECT_LE(capped.sim.max_memory, o.memory_cap);
  EXPECT_NE(capped.choice_note.find("parallel.recompute = \""), std::string::npos) << capped.choice_note;
  EXPECT_NE(capped.choice_note.find("no plan without recomputation fits the memory cap"), std::string::npos)
      << capped.choice_note;
  EXPECT_NE(capped.to_json().find("\"recompute\""), std::string::npos);
  o.recompute_modes = {Recompute::none};
  const Plan refused = choose_plan(p, net, 2, 16, o);
  EXPECT_FALSE(refused.ok);
  EXPECT_NE(refused.error.find("recomputation not allowed"), std::string::npos) << refused.error;
}

// When no split fits without recomputation and selective recomputation fits, full
// recomputation is still planned: here its extra forward costs less than selective's slower
// backward, so it wins (the gpt_300m case of bench/README.md, where the DP's "no split fits"
// once stopped the search at the first mode that fit).
TEST(Planner, TriesEveryRecomputeModeWhenNoSplitFitsWithout) {
  Profile p = synthetic_chain(8, 3);
  p.input_bytes = 1e5;
  for (LayerProfile& l : p.layers) {
    l.output_bytes = 1e6, l.stash_bytes = 4e7, l.selective_stash_bytes = 1e6, l.param_bytes = l.optimizer_bytes = 1e5;
    l.selective_backward_s = l.backward_s + 3 * l.forward_s;  // slower than full's forward again
  }
  const ClusterModel net = ClusterModel::single(1e10, 1e-6);
  PlanOptions o;
  o.schedules = {"1f1b"};
  o.microbatches = {2};
  o.replicas = ReplicaSet::one;
  o.baselines = false;
  o.recompute_modes = {Recompute::selective};
  const Plan sel = choose_plan(p, net, 2, 16, o);
  o.recompute_modes = {Recompute::full};
  const Plan full = choose_plan(p, net, 2, 16, o);
  o.recompute_modes = {Recompute::none};
  const Plan none = choose_plan(p, net, 2, 16, o);
  ASSERT_TRUE(sel.ok && full.ok && none.ok);
  ASSERT_LT(full.sim.time_per_sample, sel.sim.time_per_sample);
  o.memory_cap = std::max(sel.sim.max_memory, full.sim.max_memory) * 1.02;
  ASSERT_GT(none.sim.max_memory, o.memory_cap);  // nothing fits without recomputation
  o.recompute_modes = {Recompute::none, Recompute::selective, Recompute::full};
  const Plan capped = choose_plan(p, net, 2, 16, o);
  ASSERT_TRUE(capped.ok) << capped.error;
  EXPECT_EQ(capped.recompute, Recompute::full);
  EXPECT_NE(capped.choice_note.find("no plan without recomputation fits the memory cap"), std::string::npos)
      << capped.choice_note;
}

}  // namespace
}  // namespace pt

namespace pt {

// parallel.tensor = 0 with split = "auto" (issue 25): t is chosen beside the rest. A chain of
// 3 layers whose middle layer alone (weights, AdamW state, what it keeps per unit) exceeds the
// per-rank cap: no pipeline split of 2 ranks fits (some stage holds that layer whole) and no
// recomputation is allowed, while its half under t = 2 (one part's profile: times, bytes and
// parameters halved, 2 sums each way) fits on one stage of 2 tensor ranks.
TEST(Planner, ChoosesTensorParallelismWhenNoPipelineSplitFits) {
  Profile whole = synthetic_chain(3, 7);
  whole.input_bytes = 1e5;
  for (LayerProfile& l : whole.layers) l.output_bytes = 1e6, l.stash_bytes = 2e6, l.param_bytes = 1e6, l.optimizer_bytes = 2e6;
  LayerProfile& big = whole.layers[1];
  big.param_bytes = 4e8, big.optimizer_bytes = 8e8, big.stash_bytes = 1e8;
  Profile part = whole;
  part.tensor = 2;
  LayerProfile& half = part.layers[1];
  half.forward_s /= 2, half.backward_s /= 2, half.backward_weight_s /= 2;
  half.param_bytes /= 2, half.optimizer_bytes /= 2, half.stash_bytes /= 2;
  half.tensor_sums = 2, half.tensor_sum_bytes = 2 * half.output_bytes;
  const ClusterModel net = ClusterModel::single(1e10, 1e-6);
  PlanOptions o;
  o.schedules = {"1f1b"};
  o.microbatches = {2};
  o.baselines = false;
  o.recompute_modes = {Recompute::none};
  // the whole layer: 1.6 GB of weights, gradient and AdamW state and 0.8 GB per unit it keeps
  // (1e8 per sample, 8 samples), 2.4 GB at least on any stage; its half: 1.63 GB with 2 units
  o.memory_cap = 2.0e9;
  std::vector<TensorCandidate> cands(2);
  cands[0].t = 1, cands[0].profile = whole;
  cands[1].t = 2, cands[1].profile = part;
  const Plan only1 = choose_tensor_plan({cands[0]}, net, 2, 16, o);
  EXPECT_FALSE(only1.ok) << "a pipeline split alone should not fit";
  const Plan p = choose_tensor_plan(cands, net, 2, 16, o);
  ASSERT_TRUE(p.ok) << p.error;
  EXPECT_EQ(p.tensor, 2);
  EXPECT_EQ(p.layout.ranks(), 1) << "one stage, its rank a group of 2";
  EXPECT_EQ(p.ranks, 2);
  EXPECT_LE(p.sim.max_memory, o.memory_cap);
  EXPECT_NE(p.choice_note.find("parallel.tensor = 2 (t = 1: no plan, t = 2:"), std::string::npos) << p.choice_note;
  EXPECT_NE(p.to_json().find("\"tensor\": 2"), std::string::npos);
  // without the cap both are planned and the faster wins: here halving the big layer beats
  // the 2-stage pipeline's bubble; on a network 10^4 times slower its sums cost more than that
  o.memory_cap = 0;
  const Plan fast = choose_tensor_plan(cands, net, 2, 16, o);
  ASSERT_TRUE(fast.ok) << fast.error;
  EXPECT_EQ(fast.tensor, 2) << fast.choice_note;
  const Plan slow = choose_tensor_plan(cands, ClusterModel::single(1e6, 1e-6), 2, 16, o);
  ASSERT_TRUE(slow.ok) << slow.error;
  EXPECT_EQ(slow.tensor, 1) << slow.choice_note;
  // the sums are costed: t = 2's prediction includes them (a part without them is faster)
  Profile nosums = part;
  nosums.layers[1].tensor_sums = 0, nosums.layers[1].tensor_sum_bytes = 0;
  o.tensor = 2;
  const Plan with = choose_plan(part, net, 1, 16, o), without = choose_plan(nosums, net, 1, 16, o);
  ASSERT_TRUE(with.ok && without.ok);
  EXPECT_GT(with.sim.time_per_minibatch, without.sim.time_per_minibatch);
}

}  // namespace pt
