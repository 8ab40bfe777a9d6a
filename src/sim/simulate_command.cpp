// `pipetrain simulate`: replay a configuration (the deck's, a plan.json, or a measured
// run's) with the profile's costs; print the prediction, optionally a Chrome trace and the
// comparison with the measured run.
#include <algorithm>
#include <mpi.h>

#include <cstdio>

#include "../plan/cli_common.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

// parallel.recompute for K stages: the deck's one value, or its list when it has K entries
// (a plan's or the planner's layout may have another stage count: a located error).
std::vector<Recompute> deck_recompute(const Deck* deck, int K) {
  if (!deck) return {};
  const PerStage<Recompute>& r = deck->parallel.recompute;
  if (!r.uniform() && static_cast<int>(r.values.size()) != K)
    fail(Exit::bad_input, deck->where("parallel.recompute") + ": key 'parallel.recompute': has " + std::to_string(r.values.size()) +
                              " entries, one per stage, but the simulated layout has " + std::to_string(K) + " stages", true);
  return r.for_stages(K);
}

int cmd_simulate(const SimulateArgs& a) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  PlannerInputs in = planner_inputs(a);
  const int L = static_cast<int>(in.profile.layers.size());
  SimConfig cfg;
  cfg.batch_size = in.batch;
  std::string from;
  MeasuredRun run;
  if (!a.compare.empty()) {
    run = MeasuredRun::load(a.compare);
    if (!run.split.empty() && run.split.back() >= L)
      fail(Exit::bad_input, a.compare + "/summary.json: the run's split " + int_list(run.split) + " needs more layers than the profile's " +
                                std::to_string(L), true);
    cfg.layout = run.layout(L);  // with the run's placement (looped, V)
    cfg.tensor = run.tensor;
    cfg.def = &schedule_def(run.schedule);
    cfg.microbatches = run.microbatches;
    cfg.batch_size = run.batch_size;
    from = a.compare + "/summary.json";
  } else if (!a.plan.empty()) {
    const PlanFile f = PlanFile::load(a.plan);
    if (f.layers != L)
      fail(Exit::bad_input, a.plan + ": the plan is for " + std::to_string(f.layers) + " layers, the profile has " + std::to_string(L), true);
    cfg.layout = f.layout();  // with the plan's placement
    cfg.def = &schedule_def(f.schedule);
    cfg.microbatches = f.microbatches;
    if (a.batch <= 0) cfg.batch_size = f.batch_size;
    from = a.plan;
  } else if (in.deck && in.deck->parallel.split_auto) {
    PlanOptions o;
    o.memory_cap = in.memory;
    o.memory = in.mem.source, o.memory_shared = in.mem.shared;
    o.veto = in.veto();
    Plan p = choose_plan(in.profile, in.cluster, a.ranks, in.batch, o);
    if (!p.ok) fail(Exit::bad_input, "parallel.split = \"auto\": " + p.error, true);
    cfg.layout = p.layout;
    cfg.def = &schedule_def(p.schedule);
    cfg.microbatches = p.microbatches;
    from = "the planner (parallel.split = \"auto\")";
  } else if (in.deck) {
    if (a.ranks <= 0) fail(Exit::bad_input, "command line: simulate: --ranks N is required", true);
    cfg.def = &schedule_def(in.deck->parallel.schedule);
    cfg.tensor = std::max(1, static_cast<int>(in.deck->parallel.tensor));  // 0 (the planner's): as 1 here
    if (a.ranks % cfg.tensor != 0)
      fail(Exit::bad_input, "command line: --ranks " + std::to_string(a.ranks) + " is not a multiple of parallel.tensor = " +
                                std::to_string(cfg.tensor), true);
    cfg.layout = Layout::from_deck(*in.deck, L, a.ranks / cfg.tensor, *cfg.def);
    cfg.microbatches = static_cast<int>(in.deck->parallel.microbatches);
    from = in.deck->path;
  } else {
    fail(Exit::bad_input, "command line: simulate needs a deck, --plan FILE or --compare RUN_DIR", true);
  }
  cfg.recompute = a.compare.empty() ? deck_recompute(in.deck.get(), cfg.layout.stages()) : run.recompute;
  if (in.profile.tensor != cfg.tensor)
    fail(Exit::bad_input, in.profile.source + ": measured at parallel.tensor = " + std::to_string(in.profile.tensor) +
                              " (one part's costs), but the simulated run has parallel.tensor = " + std::to_string(cfg.tensor) +
                              "; profile with --set parallel.tensor=" + std::to_string(cfg.tensor), true);
  if (a.ranks > 0 && a.compare.empty() && cfg.layout.ranks() * cfg.tensor != a.ranks)
    fail(Exit::bad_input, "command line: --ranks " + std::to_string(a.ranks) + " but the layout from " + from + " has " +
                              std::to_string(cfg.layout.ranks()) + " ranks", true);
  cfg.memory = in.mem.source, cfg.memory_shared = in.mem.shared;  // the deck's model, when there is one
  SimResult r = simulate(in.profile, in.cluster, cfg);
  if (rank != 0) return r.ok ? 0 : static_cast<int>(Exit::bad_input);
  std::printf("simulating %s with profile %s\ncluster: %s\n", from.c_str(), in.profile.source.c_str(), in.cluster.describe().c_str());
  std::printf("%s", sim_report(r).c_str());
  if (!r.ok) return static_cast<int>(Exit::bad_input);
  if (in.memory > 0 && r.max_memory > in.memory)
    std::printf("WARNING: peak memory %.3g GB exceeds the cap of %.3g GB per rank\n", r.max_memory / 1e9, in.memory / 1e9);
  if (!a.trace.empty()) {
    write_file_atomic(a.trace, sim_trace_json(r, "simulated " + r.def->name));
    std::printf("wrote %s\n", a.trace.c_str());
  }
  if (!a.compare.empty()) std::printf("\n%s", compare_report(r, run).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace pt
