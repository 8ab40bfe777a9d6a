// `pipetrain plan --cost-model pipedream[,compression=R][,fewer-machines]`: the partition
// PipeDream's own optimizer would choose (plan_pipedream) for the profile, --ranks and the
// cluster's bandwidth levels. Contract: prints each level's stages as PipeDream does
// (outermost first), its predicted time per minibatch, single-machine and data-parallel
// times; replays the layout with pipetrain's simulator (pipedream schedule) beside it; writes
// plan.json with the cost model's name (kPipeDreamCostModel) as cost_model. Misuse is a
// located pt::Error (bad_input).
#include <mpi.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli_common.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {
namespace {

[[noreturn]] void bad(const std::string& msg) { fail(Exit::bad_input, "command line: --cost-model: " + msg, true); }

// --cost-model pipedream[,compression=R][,fewer-machines] plus the other flags into PipeDream's options
PipeDreamOptions options_of(const PlanArgs& a, const PlannerInputs& in) {
  PipeDreamOptions o = PipeDreamOptions::from_cluster(in.cluster, a.ranks);
  const std::string model = kPipeDreamCostModel;
  std::string rest = a.cost_model.substr(model.size());
  while (!rest.empty()) {
    if (rest[0] != ',') bad("expected " + model + "[,compression=R][,fewer-machines], got '" + a.cost_model + "'");
    const size_t e = rest.find(',', 1);
    const std::string opt = rest.substr(1, e == std::string::npos ? std::string::npos : e - 1);
    rest = e == std::string::npos ? "" : rest.substr(e);
    if (opt == "fewer-machines") {
      o.use_fewer_machines = true;
    } else if (opt.rfind("compression=", 0) == 0) {
      char* end = nullptr;
      o.activation_compression_ratio = std::strtod(opt.c_str() + 12, &end);
      if (*end || !(o.activation_compression_ratio > 0)) bad("compression=R needs a ratio > 0, got '" + opt + "'");
    } else {
      bad("unknown option '" + opt + "' (compression=R, fewer-machines)");
    }
  }
  if (a.replicas == "one")
    o.straight_pipeline = true;
  else if (a.replicas != "auto" && a.replicas != "all")
    bad(model + " tries every replica count: --replicas auto|all|one (one: --straight_pipeline), got '" + a.replicas + "'");
  if (!a.schedules.empty() || !a.microbatches.empty())
    bad(model + " plans the " + flagged_schedule(&ScheduleDef::pipedream_model).name +
        " schedule: drop --schedules and --microbatches");
  o.memory_size = in.memory;
  return o;
}

std::string gbps(double b) {
  char s[32];
  std::snprintf(s, sizeof s, "%.3g GB/s", b / 1e9);
  return s;
}

void print_levels(const PipeDreamPlan& pd, const PipeDreamOptions& o) {
  for (size_t l = pd.levels.size(); l-- > 0;) {
    std::printf("level %zu of %zu (%d machines per component, %s):\n", l + 1, pd.levels.size(), o.machines[l],
                gbps(o.bandwidths[l]).c_str());
    for (const PipeDreamStage& s : pd.levels[l])
      std::printf("  layers %4d-%-4d  compute %10.4f ms  x%d\n", s.first, s.end - 1, s.compute * 1e3, s.replicas);
  }
}

std::string detail_json(const PipeDreamPlan& pd, const PipeDreamOptions& o) {
  nlohmann::json lv = nlohmann::json::array();
  for (size_t l = 0; l < pd.levels.size(); ++l) {
    nlohmann::json st = nlohmann::json::array();
    for (const PipeDreamStage& s : pd.levels[l])
      st.push_back(
          {{"first_layer", s.first}, {"last_layer", s.end - 1}, {"replicas", s.replicas}, {"compute_s", s.compute}});
    lv.push_back({{"machines", o.machines[l]}, {"bandwidth", o.bandwidths[l]}, {"stages", st}});
  }
  nlohmann::json j = {{"time_per_minibatch_s", pd.time_per_minibatch},
                      {"single_machine_s", pd.single_machine_time},
                      {"data_parallel_s", pd.data_parallel_time},
                      {"unused_machines", pd.unused_machines},
                      {"levels_innermost_first", lv},
                      {"memory_size", o.memory_size},
                      {"straight_pipeline", o.straight_pipeline},
                      {"use_fewer_machines", o.use_fewer_machines},
                      {"activation_compression_ratio", o.activation_compression_ratio}};
  return j.dump();
}

// the notes on what PipeDream's model leaves out of this cluster model
void print_notes(const PlannerInputs& in, const PipeDreamOptions& o) {
  bool latency = false;
  for (const auto& l : in.cluster.levels) latency = latency || l.latency > 0;
  if (latency) std::printf("note: PipeDream's model has no latency term; --latency is ignored\n");
  if (in.cluster.measured)
    std::printf("note: allreduce by PipeDream's formula on the fitted bandwidth, not the measured table\n");
  if (o.activation_compression_ratio <= 0)
    std::printf(
        "note: as PipeDream's default, activation transfers are not in the objective (compression=R adds them)\n");
}

}  // namespace

int cmd_plan_pipedream(const PlanArgs& a, const PlannerInputs& in) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const PipeDreamOptions o = options_of(a, in);
  const int64_t B = in.batch > 0 ? in.batch : std::max<int64_t>(1, in.profile.microbatch);
  const auto t0 = std::chrono::steady_clock::now();
  const PipeDreamPlan pd = plan_pipedream(PipeDreamChain::from_profile(in.profile, B), o);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (rank != 0) return pd.ok ? 0 : static_cast<int>(Exit::bad_input);
  std::printf("profile: %s (%zu layers, microbatch %lld)\n", in.profile.source.c_str(), in.profile.layers.size(),
              static_cast<long long>(in.profile.microbatch));
  std::printf("cost model: PipeDream's optimizer (optimizer_graph_hierarchical.py), %d ranks, minibatch %lld\n",
              a.ranks, static_cast<long long>(B));
  print_notes(in, o);
  if (!pd.ok) {
    std::fprintf(stderr, "pipetrain plan: %s\n", pd.error.c_str());
    return static_cast<int>(Exit::bad_input);
  }
  print_levels(pd, o);
  const std::string& schedule = flagged_schedule(&ScheduleDef::pipedream_model).name;
  Plan plan = plan_from_layout(in, a.ranks, B, schedule, pd.layout, pd.time_per_minibatch);
  plan.cost_model = kPipeDreamCostModel;
  plan.cost_model_json = detail_json(pd, o);
  plan.plan_seconds = seconds;
  std::printf("\nchosen: %s, %s; split %s%s\n", schedule.c_str(), pd.layout.str().c_str(), int_list(plan.split()).c_str(),
              pd.unused_machines ? (", " + std::to_string(pd.unused_machines) + " machines unused").c_str() : "");
  std::printf(
      "PipeDream predicts: %.4f ms per minibatch (%.4g ms per sample); one machine %.4f ms (%.2fx), "
      "data-parallel %.4f ms (pipeline %.2fx faster)\n",
      pd.time_per_minibatch * 1e3, pd.time_per_minibatch * 1e3 / static_cast<double>(B), pd.single_machine_time * 1e3,
      pd.single_machine_time / pd.time_per_minibatch, pd.data_parallel_time * 1e3,
      pd.data_parallel_time / pd.time_per_minibatch);
  print_prediction(("pipetrain's simulator on this layout (" + schedule + " schedule)").c_str(), plan);
  std::printf("planned in %.3f s\n", seconds);
  write_plan(a.out, plan);
  return 0;
}

}  // namespace pt
