// Shared by `pipetrain plan` and `pipetrain simulate`: the deck (optional), the profile
// (--profile, parallel.profile, or measured now) and the cluster model.
#pragma once
#include <memory>
#include <string>

#include "pipetrain/commands.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/profile.hpp"
#include "pipetrain/sim.hpp"

namespace pt {

struct PlannerInputs {
  std::unique_ptr<Deck> deck;  // null without a deck
  Profile profile;
  ClusterModel cluster;
  int64_t batch = 0;
  double memory = 0;
  int model_layers = -1;  // the deck's model, when there is a deck
};

// Reads or measures everything the planner and simulator need; every rank calls it.
PlannerInputs planner_inputs(const PlannerArgs& a, bool need_profile_from_deck = true);

}  // namespace pt
