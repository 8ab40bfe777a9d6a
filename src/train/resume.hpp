// Choosing where a resumed run starts (internal to runtime).
#pragma once
#include <string>

#include "pipetrain/checkpoint.hpp"
#include "pipetrain/engine.hpp"
#include "pipetrain/train.hpp"

namespace pt {

struct ResumePoint {
  bool valid = false;
  bool resliced = false;  // parameters gathered for a different layout
  bool segment_shortened = false;  // a drained mid-segment cut; its segment now ends at this run's last step
  std::string step_dir;
  CheckpointMeta meta;
  std::vector<WorkerState> states;  // this rank's starting state, one per held stage
};

// Collective: the newest committed checkpoint under `path` that every rank verifies, checked
// against the deck (model, seed, batch size) and loaded for this rank's place in the layout.
// total_steps is the resuming run's last step: a drained mid-segment cut of a flush schedule
// whose segment runs past it resumes in a segment that ends there (state.epoch_steps).
ResumePoint choose_resume(const std::string& path, const Deck& deck, const TrainSetup& setup, const ParallelContext& ctx,
                          const std::vector<const StageRuntime*>& stages, int64_t total_steps);

}  // namespace pt
