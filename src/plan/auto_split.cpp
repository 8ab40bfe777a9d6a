// parallel.split = "auto": profile (or read parallel.profile), plan for this job's ranks,
// and return the deck with the chosen split, replicas, schedule and microbatches filled in.
// A schedule or microbatch count set explicitly in the deck constrains the plan.
#include <mpi.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/train.hpp"

namespace pt {

Deck resolve_auto_split(const Deck& deck, int world_size, std::string* plan_json) {
  if (!deck.parallel.split_auto) return deck;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const DataInfo info = data_info(deck);
  const Model model(deck, info.shape, info.classes);
  const bool schedule_given = deck.where("parallel.schedule").find("(default") == std::string::npos;
  const bool microbatches_given = deck.where("parallel.microbatches").find("(default") == std::string::npos;
  Profile prof;
  if (!deck.parallel.profile.empty()) {
    prof = Profile::load(deck.parallel.profile);
    if (static_cast<int>(prof.layers.size()) != model.size())
      fail(Exit::bad_input, deck.where("parallel.profile") + ": key 'parallel.profile': " + deck.parallel.profile + " has " +
                                std::to_string(prof.layers.size()) + " layers, the deck's model " + std::to_string(model.size()),
           true);
  } else {
    const int64_t mb = deck.train.batch_size / deck.parallel.microbatches;
    if (rank == 0) {
      std::printf("parallel.split = \"auto\": profiling %d layers at microbatch %lld%s\n", model.size(),
                  static_cast<long long>(mb), world_size > 1 ? " and the network between ranks" : "");
      std::fflush(stdout);
    }
    prof = measure_profile(deck, model, mb, 5, MPI_COMM_WORLD);
  }
  const ClusterModel net = ClusterModel::from_deck(deck, prof);
  PlanOptions o;
  o.memory_cap = deck.cluster.memory;
  if (schedule_given) o.schedules = {deck.parallel.schedule};
  if (microbatches_given) o.microbatches = {static_cast<int>(deck.parallel.microbatches)};
  const Plan plan = choose_plan(prof, net, world_size, deck.train.batch_size, o);
  if (!plan.ok)
    fail(Exit::bad_input, deck.where("parallel.split") + ": key 'parallel.split': \"auto\" found no plan for " +
                              std::to_string(world_size) + " ranks: " + plan.error, true);
  Deck d = deck;
  d.parallel.split_auto = false;
  d.parallel.split.clear();
  for (int v : plan.split()) d.parallel.split.push_back(v);
  d.parallel.replicas.clear();
  for (int v : plan.replicas()) d.parallel.replicas.push_back(v);
  d.parallel.schedule = plan.schedule;
  d.parallel.microbatches = plan.microbatches;
  for (const char* k : {"parallel.split", "parallel.replicas", "parallel.schedule", "parallel.microbatches"})
    d.locations[k] = "the plan of parallel.split = \"auto\" (" + deck.where("parallel.split") + ")";
  if (rank == 0) {
    std::printf("%s", plan.table().c_str());
    std::printf("plan: %s, split %s, replicas %s, %d microbatch%s; predicted %.3g ms per sample\n", plan.schedule.c_str(),
                nlohmann::json(plan.split()).dump().c_str(), plan.layout.replication().c_str(), plan.microbatches,
                plan.microbatches == 1 ? "" : "es", plan.sim.time_per_sample * 1e3);
    std::fflush(stdout);
  }
  if (plan_json) *plan_json = plan.to_json();
  return d;
}

}  // namespace pt
