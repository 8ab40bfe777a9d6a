// What a deck and a rank count determine before training: the model, the layout, the
// schedule kind and the microbatch split. Shared by train, schedule, profile and plan.
#pragma once
#include <memory>

#include "pipetrain/deck.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/schedule.hpp"

namespace pt {

struct TrainSetup {
  std::unique_ptr<Model> model;
  Layout layout;
  ScheduleKind kind = ScheduleKind::one_f_one_b;
  int microbatches = 1;  // units per minibatch (1 for the pipedream family)
  int64_t mb_size = 0;   // samples per unit
  static TrainSetup from_deck(const Deck& deck, int world_size);
};

}  // namespace pt
