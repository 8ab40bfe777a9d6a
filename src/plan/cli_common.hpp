// Shared by `pipetrain plan` and `pipetrain simulate`: the deck (optional), the profile
// (--profile, parallel.profile, or measured now) and the cluster model.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/commands.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/profile.hpp"
#include "pipetrain/sim.hpp"
#include "pipetrain/train.hpp"

namespace pt {

struct PlannerInputs {
  std::unique_ptr<Deck> deck;  // null without a deck
  Profile profile;
  ClusterModel cluster;
  int64_t batch = 0;
  double memory = 0;
  int model_layers = -1;  // the deck's model, when there is a deck
  std::unique_ptr<Model> model;  // the deck's model (outlives mem.source)
  DeckMemory mem;                // the memory model of the deck's run (memory_model.hpp); no source without a deck
  // The planner's veto from the deck (tied layers across stages need a flush schedule);
  // no veto without a deck.
  std::function<std::string(const ScheduleDef&, const Layout&)> veto() const {
    if (!deck) return {};
    const Deck* d = deck.get();
    return [d](const ScheduleDef& def, const Layout& layout) { return tie_conflict(*d, def, layout); };
  }
};

// Reads or measures everything the planner and simulator need; every rank calls it.
PlannerInputs planner_inputs(const PlannerArgs& a, bool need_profile_from_deck = true);

// Helpers of the plan command (src/plan/plan_command.cpp):
std::string int_list(const std::vector<int>& v);             // "[1, 2]"
void print_prediction(const char* label, const Plan& plan);  // the simulated time, bubble, memory
void write_plan(const std::string& out, const Plan& plan);   // plan.json when out is set; flushes stdout
// A plan of one given layout (schedule, 1 microbatch), replayed by the simulator.
Plan plan_from_layout(const PlannerInputs& in, int ranks, int64_t batch, const std::string& schedule, const Layout& layout,
                      double objective);
// `plan --cost-model pipedream[,...]` (src/plan/plan_pipedream_command.cpp)
int cmd_plan_pipedream(const PlanArgs& a, const PlannerInputs& in);

}  // namespace pt
