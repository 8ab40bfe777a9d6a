// `pipetrain check`: validate a deck and print the layer table and, for a layout (--ranks N,
// or the ranks it runs on), each rank's memory estimate by category (text or JSON).
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/memory_info.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/stability.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

// What check knows of the run's memory: the estimate on `ranks` ranks, assumed to share this
// node (the budget: cluster.memory, else this node's available memory / ranks), this
// process's start-up bytes as every rank's base.
struct CheckMemory {
  std::vector<RankMemory> ranks;
  MemoryBudget budget;
  int64_t eval_mb = 0;
  std::string problem;
};

CheckMemory check_memory(const Deck& deck, const TrainSetup& setup, int ranks) {
  const DataInfo info = data_info(deck);
  RunMemoryInputs in;
  in.train_samples = info.train_samples, in.test_samples = info.test_samples;
  in.data_bytes = info.held_bytes, in.label_count = info.label_count;
  in.base = {startup_resident_bytes()};
  CheckMemory c;
  c.budget = memory_budget(deck, ranks);
  c.eval_mb = resolve_eval_batch(deck, *setup.model, in.test_samples, in.label_count, c.budget.bytes);
  c.ranks = run_memory(deck, setup, in, c.eval_mb);
  c.problem = fit_problem(deck, setup, c.ranks, {c.budget}, c.eval_mb);
  return c;
}

// One row per rank, one column per category, in MB.
void print_memory(const Deck& deck, const CheckMemory& c) {
  std::printf("memory per rank (estimate, MB; the runtime is this process's start-up bytes, measured): evaluation microbatch "
              "%lld%s; budget %s per rank from %s\n",
              static_cast<long long>(c.eval_mb), deck.train.eval_batch_size == 0 ? " (sized to fit)" : "",
              bytes_text(static_cast<double>(c.budget.bytes)).c_str(), c.budget.source(deck).c_str());
  auto width = [](int k) { return static_cast<int>(std::max<size_t>(8, std::strlen(memory_category_name(static_cast<MemCategory>(k))))); };
  std::printf("%-5s", "rank");
  for (int k = 0; k < kMemCategories; ++k) std::printf(" %*s", width(k), memory_category_name(static_cast<MemCategory>(k)));
  std::printf(" %9s\n", "total");
  for (const RankMemory& m : c.ranks) {
    std::printf("%-5d", m.rank);
    for (int k = 0; k < kMemCategories; ++k) std::printf(" %*.1f", width(k), static_cast<double>(m.bytes[static_cast<size_t>(k)]) / 1e6);
    std::printf(" %9.1f\n", static_cast<double>(m.total()) / 1e6);
  }
  if (!c.problem.empty()) std::printf("WARNING: %s\n", c.problem.c_str());
}

nlohmann::json memory_array(const CheckMemory& c) {
  nlohmann::json a = nlohmann::json::array();
  for (const RankMemory& m : c.ranks) a.push_back(memory_json(m));
  return a;
}

int check_auto_split(const Deck& deck, const CheckArgs& a, int rank) {
  const DataInfo info = data_info(deck);
  const Model model(deck, info.shape, info.classes);
  if (rank != 0) return 0;
  if (a.json) {
    std::printf("%s\n", nlohmann::json({{"deck", deck.path}, {"layers", nlohmann::json::parse(model.table_json())}}).dump(2).c_str());
    return 0;
  }
  std::printf("%s: ok\n%s", deck.path.c_str(), model.table().c_str());
  std::printf("parallel.split = \"auto\": split, replicas, schedule and microbatches are planned when training starts\n"
              "(see them, and each rank's memory, beforehand with: pipetrain plan %s --ranks N)\n", deck.path.c_str());
  const bool schedule_given = deck.where("parallel.schedule").find("(default") == std::string::npos;
  if (schedule_given) std::printf("%s", async_momentum_warning(deck.parallel.schedule, 0, optim_config(deck.train)).c_str());
  return 0;
}

}  // namespace

int cmd_check(const CheckArgs& a) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Deck deck = load_deck(a.deck, a.sets);
  if (a.ranks > 0) size = a.ranks;
  // the run's length needs the data; train.max_steps bounds it
  if (rank == 0 && !a.json && deck.train.max_steps > 0) std::printf("%s", warmup_warning(deck, deck.train.max_steps).c_str());
  if (deck.parallel.split_auto) return check_auto_split(deck, a, rank);  // the model only: the layout is planned later
  TrainSetup setup = TrainSetup::from_deck(deck, size);  // also checks the layout for this rank count
  if (rank != 0) return 0;
  const CheckMemory mem = check_memory(deck, setup, size);
  if (a.json) {
    nlohmann::json j = {{"deck", deck.path},
                        {"layers", nlohmann::json::parse(setup.model->table_json())},
                        {"layout", setup.layout.str()},
                        {"schedule", setup.def->name},
                        {"eval_batch_size", mem.eval_mb},
                        {"budget_bytes", mem.budget.bytes},
                        {"budget_source", mem.budget.source(deck)},
                        {"memory", memory_array(mem)}};
    if (!mem.problem.empty()) j["memory_problem"] = mem.problem;
    std::printf("%s\n", j.dump(2).c_str());
    return 0;
  }
  std::printf("%s: ok\n", deck.path.c_str());
  std::printf("%s", setup.model->table().c_str());
  std::printf("layout on %d rank%s: %s; schedule %s, %d microbatch%s of %lld\n", size, size == 1 ? "" : "s",
              setup.layout.str().c_str(), setup.def->name.c_str(), setup.microbatches, setup.microbatches == 1 ? "" : "es",
              static_cast<long long>(setup.mb_size));
  print_memory(deck, mem);
  std::printf("%s", async_momentum_warning(setup.def->name, setup.layout.stages(), optim_config(deck.train)).c_str());
  return 0;
}

}  // namespace pt
