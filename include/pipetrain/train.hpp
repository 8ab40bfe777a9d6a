// What a deck and a rank count determine before training: the model, the layout, the
// schedule kind and the microbatch split. Shared by train, schedule, profile and plan.
#pragma once
#include <memory>

#include "pipetrain/deck.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {

// parallel.split = "auto": profile (or parallel.profile) and plan for `world_size` ranks;
// returns the deck with split, replicas, schedule and microbatches chosen (a schedule or
// microbatch count set explicitly in the deck is kept), and the plan as JSON. Collective.
// With world_size 1 nothing is planned or profiled: "auto", and an explicit split of a
// schedule whose update rule does not depend on the stage count (flush, 2bw), become one
// stage (printed), except that a flush schedule with several stages per rank (interleaved,
// zb-v) keeps its split on the one rank group; a pipedream-family split of several stages
// is a located error (exit 2). With `resume` (train --resume PATH) and "auto", the layout of
// the newest committed checkpoint under PATH is kept when it was taken on world_size ranks
// (and with the deck's schedule, where the deck sets one): a resumed run continues on the
// layout it was planned with instead of planning again from a new, noisy profile.
Deck resolve_auto_split(const Deck& deck, int world_size, std::string* plan_json, const std::string& resume = "");

// Tied layers (`tie`) held by different stages keep equal copies only if every stage
// updates at the same flush: the reason `def` on `layout` cannot train the deck's ties, or
// "" (no ties across stages, or a flush schedule). The planner skips such candidates.
std::string tie_conflict(const Deck& deck, const ScheduleDef& def, const Layout& layout);

struct TrainSetup {
  std::unique_ptr<Model> model;
  Layout layout;
  const ScheduleDef* def = nullptr;  // the schedule's registry entry
  int microbatches = 1;  // units per minibatch (the entry's units_per_minibatch)
  int64_t mb_size = 0;   // samples per unit (the entry's unit_size)
  bool grad_norm = false;  // train.clip_grad_norm > 0: a flush schedule's IR carries GRAD_NORM
  // parallel.recompute per stage (one value repeated, or the deck's list); the planner may
  // choose per stage one day, so everything downstream reads this vector
  std::vector<Recompute> recompute;
  Recompute recompute_of(int stage) const { return recompute.at(static_cast<size_t>(stage)); }
  // world_size: the ranks of the layout (a pipeline world under parallel.tensor: all / t);
  // shard: this rank's part of the split layers (Model).
  static TrainSetup from_deck(const Deck& deck, int world_size, TensorShard shard = {});
  // The training IR of a segment of `steps` minibatches (make_schedule with this setup).
  Schedule schedule(int64_t steps) const;

  // Minibatches per epoch for N training samples: whole minibatches only, and a multiple of
  // boundary_stride (every stage's update group complete).
  int64_t steps_per_epoch(const Deck& deck, int64_t N) const;
  // Steps of the whole run: epochs x steps_per_epoch, capped by train.max_steps (rounded
  // down to a whole update group).
  int64_t total_steps(const Deck& deck, int64_t N) const;
  // Minibatches one update of stage s applies (the entry's version_stride), and their least
  // common multiple: update boundaries every stage shares (checkpoints happen there).
  int64_t version_stride(int stage) const;
  int64_t boundary_stride() const;
  // summary.json's formulas, from the entry's memory rule (schedule_registry.hpp): weight versions
  // held and units in flight per stage; -1 where the rule is the generator's replay.
  int versions_formula(int stage) const;
  // The schedule runs in segments that drain at their end: an epoch, or the steps up to
  // the next evaluation (train.eval_every). Returns the length of the segment starting
  // at global step `done` (0 when training is over).
  static int64_t segment_steps(int64_t done, int64_t steps_per_epoch, int64_t total, int64_t eval_every);
  int in_flight_formula(int stage) const;
};

}  // namespace pt
