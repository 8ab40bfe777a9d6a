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
  bool resharded = false;  // ... and from another parallel.tensor (reshard.cpp)
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

// parallel.tensor: the step folder of tensor part k of the checkpoint whose part 0 is
// step_dir (<folder>/step_N): <folder>/tensor<k>/step_N, part 0 itself for k = 0.
std::string tensor_part_dir(const std::string& step_dir, int k);
// A checkpoint of t_old = metas.size() parts (dirs[k], its manifest metas[k]) for layers
// [first, end) of `mine`, a model split over another t: each part's parameters and optimizer
// buffers re-sliced from its own files (load_resliced_state, for that part's model), each
// split tensor laid out whole (place_shard) and this rank's part cut from it (take_shard);
// replicated tensors and the running state from part 0. One version (the latest).
WorkerState load_resharded_state(const std::vector<std::string>& dirs, const std::vector<CheckpointMeta>& metas,
                                 const Deck& deck, const Model& mine, int first, int end, size_t optimizer_buffers);

}  // namespace pt
