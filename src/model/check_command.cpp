// `pipetrain check`: validate a deck and print the layer table (text or JSON).
#include <mpi.h>

#include <cstdio>

#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/stability.hpp"
#include "pipetrain/train.hpp"

namespace pt {

int cmd_check(const CheckArgs& a) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const Deck deck = load_deck(a.deck, a.sets);
  if (a.ranks > 0) size = a.ranks;
  // the run's length needs the data; train.max_steps bounds it
  if (rank == 0 && !a.json && deck.train.max_steps > 0) std::printf("%s", warmup_warning(deck, deck.train.max_steps).c_str());
  if (deck.parallel.split_auto) {  // the model only: the layout is planned when training starts
    const DataInfo info = data_info(deck);
    const Model model(deck, info.shape, info.classes);
    if (rank != 0) return 0;
    if (a.json) {
      std::printf("%s\n", model.table_json().c_str());
      return 0;
    }
    std::printf("%s: ok\n%s", deck.path.c_str(), model.table().c_str());
    std::printf("parallel.split = \"auto\": split, replicas, schedule and microbatches are planned when training starts\n"
                "(see them beforehand with: pipetrain plan %s --ranks N)\n", deck.path.c_str());
    const bool schedule_given = deck.where("parallel.schedule").find("(default") == std::string::npos;
    if (schedule_given) std::printf("%s", async_momentum_warning(deck.parallel.schedule, 0, optim_config(deck.train)).c_str());
    return 0;
  }
  TrainSetup setup = TrainSetup::from_deck(deck, size);  // also checks the layout for this rank count
  if (rank != 0) return 0;
  if (a.json) {
    std::printf("%s\n", setup.model->table_json().c_str());
  } else {
    std::printf("%s: ok\n", deck.path.c_str());
    std::printf("%s", setup.model->table().c_str());
    std::printf("layout on %d rank%s: %s; schedule %s, %d microbatch%s of %lld\n", size, size == 1 ? "" : "s",
                  setup.layout.str().c_str(), setup.def->name.c_str(), setup.microbatches,
                  setup.microbatches == 1 ? "" : "es", static_cast<long long>(setup.mb_size));
    std::printf("%s", async_momentum_warning(setup.def->name, setup.layout.stages(), optim_config(deck.train)).c_str());
  }
  return 0;
}

}  // namespace pt
