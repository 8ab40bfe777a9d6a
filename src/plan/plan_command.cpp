// `pipetrain plan`: profile (or read one), run the planner, print the comparison table and
// write plan.json. Without a deck: --profile FILE (JSON or graph.txt) and --bandwidth.
#include <mpi.h>

#include <cstdio>
#include <cstdlib>

#include "cli_common.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/memory_info.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/stability.hpp"

namespace pt {


[[noreturn]] static void fail_no_network_model() {
  fail(Exit::bad_input,
       "no network model: pass --bandwidth BYTES_PER_S (one per level, innermost first, inner ones as B:RANKS), add "
       "[[cluster.levels]] to the deck, or use a profile measured under mpirun -np >= 2",
       true);
}

PlannerInputs planner_inputs(const PlannerArgs& a, bool need_profile) {
  PlannerInputs in;
  if (!a.deck.empty()) in.deck = std::make_unique<Deck>(load_deck(a.deck, a.sets));
  // the model alone (not TrainSetup: the deck's split may not fit this command's rank count)
  std::unique_ptr<Model>& model = in.model;
  int64_t mb_size = 0;
  if (in.deck) {
    const DataInfo info = data_info(*in.deck);
    model = std::make_unique<Model>(*in.deck, info.shape, info.classes);
    in.model_layers = model->size();
    // the budget the run would have: --memory, else the deck's (cluster.memory or the node's
    // share), which sizes the automatic evaluation microbatch as the run sizes it
    const int64_t budget = a.memory > 0 ? static_cast<int64_t>(a.memory) : memory_budget(*in.deck, std::max(1, a.ranks)).bytes;
    in.mem = deck_memory(*in.deck, *model, budget, startup_resident_bytes());
    mb_size = schedule_def(in.deck->parallel.schedule)
                  .unit_size(in.deck->train.batch_size, static_cast<int>(in.deck->parallel.microbatches));
  }
  std::string prof = a.profile;
  if (prof.empty() && in.deck) prof = in.deck->parallel.profile;
  if (!prof.empty()) {
    in.profile = Profile::load(prof);
  } else if (in.deck && need_profile) {
    int rank = 0, size = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    // the network model is checked before minutes of profiling, not after
    if (a.bandwidths.empty() && in.deck->cluster.levels.empty() && size < 2) fail_no_network_model();
    if (rank == 0) std::printf("no profile given: measuring %s (10 repetitions)\n", in.deck->path.c_str());
    in.profile = measure_profile(*in.deck, *model, mb_size, 10, MPI_COMM_WORLD);
  } else if (need_profile) {
    fail(Exit::bad_input, "command line: give a deck or --profile FILE (profile.json or graph.txt)", true);
  }
  if (a.profile_batch > 0) in.profile.microbatch = a.profile_batch;
  if (in.deck && in.model_layers >= 0 && !in.profile.layers.empty() &&
      static_cast<int>(in.profile.layers.size()) != in.model_layers)
    fail(Exit::bad_input, prof + ": the profile has " + std::to_string(in.profile.layers.size()) + " layers but " +
                              in.deck->path + "'s model has " + std::to_string(in.model_layers), true);
  // cluster: --bandwidth levels, else the deck's levels, else the measured network
  if (!a.bandwidths.empty()) {
    std::vector<ClusterLevel> lv;
    for (size_t k = 0; k < a.bandwidths.size(); ++k) {
      const std::string& s = a.bandwidths[k];
      ClusterLevel l;
      char* end = nullptr;
      l.bandwidth = std::strtod(s.c_str(), &end);
      if (end == s.c_str() || l.bandwidth <= 0)
        fail(Exit::bad_input, "command line: --bandwidth expects BYTES_PER_S[:RANKS], got '" + s + "'", true);
      if (*end == ':') {
        char* e2 = nullptr;
        l.ranks = std::strtoll(end + 1, &e2, 10);
        if (*e2 || l.ranks < 1) fail(Exit::bad_input, "command line: --bandwidth " + s + ": RANKS must be an integer >= 1", true);
      } else if (*end) {
        fail(Exit::bad_input, "command line: --bandwidth expects BYTES_PER_S[:RANKS], got '" + s + "'", true);
      } else if (k + 1 < a.bandwidths.size()) {
        fail(Exit::bad_input, "command line: --bandwidth " + s + ": an inner level needs its component size (BYTES_PER_S:RANKS)", true);
      } else {
        l.ranks = int64_t{1} << 40;  // the outermost level covers every rank
      }
      l.latency = a.latency;
      lv.push_back(l);
    }
    in.cluster = ClusterModel::from_levels(lv);
  } else if (in.deck && !in.deck->cluster.levels.empty()) {
    in.cluster = ClusterModel::from_levels(in.deck->cluster.levels);
  } else if (in.profile.network.measured) {
    in.cluster = ClusterModel::from_network(in.profile.network);
  } else {
    fail_no_network_model();
  }
  in.batch = a.batch > 0 ? a.batch : in.deck ? in.deck->train.batch_size : 0;
  in.memory = a.memory >= 0 ? a.memory : in.deck ? in.deck->cluster.memory : 0.0;
  return in;
}

std::string int_list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

void print_prediction(const char* label, const Plan& plan) {
  if (!plan.sim.ok) {
    std::printf("%s: not simulated: %s\n", label, plan.sim.error.c_str());
    return;
  }
  std::printf("%s: %.4f ms per minibatch, %.1f samples/s, bubble %.3f, peak memory %.3g GB per rank%s\n", label,
              plan.sim.time_per_minibatch * 1e3, plan.sim.samples_per_s, plan.sim.bubble, plan.sim.max_memory / 1e9,
              plan.fits ? "" : " (exceeds the memory cap)");
}

void write_plan(const std::string& out, const Plan& plan) {
  if (!out.empty()) {
    write_file_atomic(out, plan.to_json());
    std::printf("wrote %s\n", out.c_str());
  }
  std::fflush(stdout);
}

Plan plan_from_layout(const PlannerInputs& in, int ranks, int64_t batch, const std::string& schedule, const Layout& layout,
                      double objective) {
  Plan plan;
  plan.ok = true;
  plan.ranks = ranks;
  plan.layers = static_cast<int>(in.profile.layers.size());
  plan.batch_size = batch;
  plan.memory_cap = in.memory;
  plan.profile_source = in.profile.source;
  plan.cluster = in.cluster.describe();
  plan.schedule = schedule;
  plan.layout = layout;
  plan.dp_objective = objective;
  SimConfig cfg;
  cfg.def = &schedule_def(schedule);
  cfg.layout = layout;
  cfg.microbatches = plan.microbatches;
  cfg.batch_size = batch;
  cfg.keep_schedule = false;
  cfg.max_actions = PlanOptions().sim_budget;
  cfg.memory = in.mem.source, cfg.memory_shared = in.mem.shared;
  plan.sim = simulate(in.profile, in.cluster, cfg);
  plan.fits = plan.sim.ok && (in.memory <= 0 || plan.sim.max_memory <= in.memory);
  return plan;
}

namespace {
// The plan over the given profiles, one per tensor degree (Profile::tensor; a profile of one
// part at t > 1 alone is one candidate): choose_tensor_plan plans each on ranks / t ranks.
Plan plan_over_tensor_profiles(const PlanArgs& a, const PlannerInputs& in, const PlanOptions& o) {
  std::vector<TensorCandidate> c;
  c.push_back({in.profile.tensor, in.profile, o.memory, o.memory_shared});
  for (const std::string& f : a.more_profiles) {
    Profile p = Profile::load(f);
    if (a.profile_batch > 0) p.microbatch = a.profile_batch;
    for (const TensorCandidate& k : c)
      if (k.t == p.tensor)
        fail(Exit::bad_input, f + ": a second profile at parallel.tensor = " + std::to_string(p.tensor) +
                                  " (give one --profile per tensor degree)", true);
    c.push_back({p.tensor, std::move(p), o.memory, o.memory_shared});
  }
  return choose_tensor_plan(c, in.cluster, a.ranks, in.batch, o);
}

// The grid and the bubble of the chosen plan, beside the fastest fitting 1f1b candidate's
// with as many microbatches (its own split) when 1f1b was a candidate.
void print_grid(const Plan& plan) {
  const int d = plan.layout.stages() > 0 ? plan.layout.replicas.front() : 1;
  std::printf("grid: t = %d, p = %d, d = %d%s; schedule %s, recompute %s; predicted bubble %.4f\n", plan.tensor,
              plan.layout.stages(), d, plan.layout.stages() > 1 ? " (stage 0's replicas)" : "", plan.schedule.c_str(),
              enum_name(plan.recompute), plan.sim.bubble);
  const PlanCandidate* best = nullptr;
  for (const PlanCandidate& c : plan.candidates)
    if (c.schedule == "1f1b" && c.sim.ok && c.fits && c.microbatches == plan.microbatches &&
        (!best || c.sim.time_per_sample < best->sim.time_per_sample))
      best = &c;
  if (best)
    std::printf("1f1b with %d microbatches at t = %d: %s, recompute %s; predicted bubble %.4f, %.4g ms per sample\n",
                best->microbatches, plan.tensor, best->layout.str().c_str(), enum_name(best->recompute), best->sim.bubble,
                best->sim.time_per_sample * 1e3);
}
}  // namespace

int cmd_plan(const PlanArgs& a) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PlannerArgs pa = a;
  PlannerInputs in;
  if (a.synthetic_chain > 0) {
    PlannerArgs none = a;
    none.profile.clear();
    in = planner_inputs(none, false);
    in.profile = synthetic_chain(a.synthetic_chain, 1);
    if (a.profile_batch > 0) in.profile.microbatch = a.profile_batch;
  } else {
    in = planner_inputs(pa);
  }
  if (a.cost_model.rfind(kPipeDreamCostModel, 0) == 0) return cmd_plan_pipedream(a, in);
  if (a.cost_model != "pipetrain")
    fail(Exit::bad_input, "command line: --cost-model expects pipetrain or pipedream[,OPTIONS], got '" + a.cost_model + "'", true);
  PlanOptions o;
  if (!a.schedules.empty()) o.schedules = a.schedules;
  o.microbatches = a.microbatches;
  o.memory_cap = in.memory;
  o.memory = in.mem.source, o.memory_shared = in.mem.shared;
  o.veto = in.veto();
  if (in.deck) o.recompute_modes = planner_recompute_modes(*in.deck);
  else if (o.memory_cap > 0) o.recompute_modes = {Recompute::none, Recompute::selective, Recompute::full};
  o.bsp_batch = a.bsp_batch;
  o.batch_growth_margin = a.batch_growth_margin;
  if (a.replicas == "all") o.replicas = ReplicaSet::all;
  else if (a.replicas == "pow2") o.replicas = ReplicaSet::powers_of_two;
  else if (a.replicas != "auto") fail(Exit::bad_input, "command line: --replicas expects auto, all or pow2, got '" + a.replicas + "'", true);
  for (const std::string& s : o.schedules) (void)schedule_def(s);  // unknown names fail here
  const bool over_t = !a.more_profiles.empty() || in.profile.tensor > 1;
  Plan plan = over_t ? plan_over_tensor_profiles(a, in, o) : choose_plan(in.profile, in.cluster, a.ranks, in.batch, o);
  if (rank != 0) return plan.ok ? 0 : static_cast<int>(Exit::bad_input);
  std::printf("profile: %s (%zu layers, microbatch %lld)\n", in.profile.source.c_str(), in.profile.layers.size(),
              static_cast<long long>(in.profile.microbatch));
  std::printf("%s", plan.table().c_str());
  if (plan.ok) {
    std::printf("\nchosen: %s, %s, %d microbatch%s; split %s\n", plan.schedule.c_str(), plan.layout.str().c_str(),
                plan.microbatches, plan.microbatches == 1 ? "" : "es", int_list(plan.split()).c_str());
    print_prediction("predicted", plan);
    if (over_t) print_grid(plan);
    if (in.deck) std::printf("%s", async_momentum_warning(plan.schedule, plan.layout.stages(), optim_config(in.deck->train)).c_str());
  }
  write_plan(a.out, plan);
  if (!plan.ok) {
    std::fprintf(stderr, "pipetrain plan: %s\n", plan.error.c_str());
    return static_cast<int>(Exit::bad_input);
  }
  return 0;
}

}  // namespace pt
