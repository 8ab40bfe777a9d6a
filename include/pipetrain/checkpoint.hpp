// Checkpoints in HDF5 (docs/CHECKPOINT.md): one file per rank plus a manifest per step,
// written with a commit protocol that never leaves a selectable partial checkpoint, and
// read back with every checksum verified, falling back to the previous committed one.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/parallel.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

// What identifies the run a checkpoint belongs to; stored in every file and the manifest.
struct CheckpointMeta {
  int64_t step = 0;  // minibatches applied (the version id at the cut)
  int64_t epoch = 0, epoch_steps = 0, epoch_start = 0;
  bool epoch_complete = false;  // taken after the epoch's evaluation: resume starts the next epoch
  std::string schedule;
  std::string placement = "contiguous";
  std::vector<int> split, replicas;  // the layout (split: first layer of stages 2..K; replicas per rank group)
  int microbatches = 1;
  int64_t batch_size = 0;
  int64_t seed = 0;
  std::string optimizer;
  std::string model_hash, model_text;
  int ranks = 1;
  // parallel.tensor: the checkpoint holds part tensor_rank of tensor_parts of the split layers
  // (each tensor rank writes its own checkpoint; 1 and 0 for one part, and for checkpoints
  // written before the key existed)
  int tensor_parts = 1, tensor_rank = 0;
};

// Per held stage: where it lives in the model (for re-slicing on another layout).
struct StageInfo {
  int stage = 0, replica = 0, first_layer = 0, end_layer = 0;
  std::vector<int64_t> layer_offsets;  // param offset of each layer of the stage
  std::vector<int64_t> layer_counts;
  std::vector<int64_t> state_offsets, state_counts;  // running state (batch norm) of each layer
  std::vector<std::string> optimizer_names;
};

class CheckpointWriter {
 public:
  CheckpointWriter(const ParallelContext& ctx, std::string dir, int keep);
  const std::string& dir() const { return dir_; }
  // Collective: create the directory, prove it writable, clean stale *.tmp and uncommitted
  // step folders (rank 0), then a barrier: no rank returns before the folder is clean.
  // Throws Exit::io (collectively) before step 1 if it cannot be written.
  void prepare();
  // Collective commit of one checkpoint: write rank file (tmp, checked, fsync, rename),
  // agree that every rank succeeded, then rank 0 writes the manifest (tmp, fsync, rename,
  // directory fsync) and prunes checkpoints beyond `keep`. Returns the step directory.
  // One state and one info per stage the rank holds, in the same order.
  std::string commit(const std::vector<WorkerState>& st, const CheckpointMeta& meta, const std::vector<StageInfo>& info);

 private:
  const ParallelContext& ctx_;
  std::string dir_;
  int keep_;
};

// A committed checkpoint on disk.
struct CheckpointRef {
  std::string step_dir;  // .../step_000000123
  int64_t step = 0;
};
// Committed checkpoints (those with a manifest), newest first. `path` may be a run
// directory, a checkpoint directory, a step directory or a manifest.json.
std::vector<CheckpointRef> list_checkpoints(const std::string& path);
std::string checkpoint_dir_of_run(const std::string& run_dir);
// Step folders under `path` without a manifest (never committed, or the manifest was lost).
std::vector<std::string> uncommitted_checkpoints(const std::string& path);
int64_t checkpoint_step_of(const std::string& step_dir);  // from the folder name; -1 if none

// Verify one committed checkpoint fully: manifest, every file's size, HDF5 structure and
// Fletcher32-protected data, CRC32. Returns "" if valid, else the reasons (file, dataset, rank).
std::string verify_checkpoint(const std::string& step_dir, int only_rank = -1);

CheckpointMeta read_meta(const std::string& step_dir);
// This rank's states on the same layout, one per held stage (versions, optimizer, in-flight
// units, crossing messages).
std::vector<WorkerState> load_worker_state(const std::string& step_dir, int rank);
// Re-slice for another layout: the parameters and optimizer state of layers [first, end)
// gathered from the files of the old stages that overlap them (replica 0's; no other file
// is opened). Only for checkpoints without in-flight state.
WorkerState load_resliced_state(const std::string& step_dir, const CheckpointMeta& meta, int first, int end,
                                size_t nparams, size_t optimizer_buffers, size_t nstate = 0);
// The old layout of a checkpoint (split, replicas per group, placement).
Layout checkpoint_layout(const CheckpointMeta& meta, int layers);
// Field-level differences between a checkpoint's model and the deck's ("" when equal).
std::string model_difference(const std::string& checkpoint_model_text, const std::string& deck_model_text);

// `pipetrain inspect`: manifest, plan, step, versions per stage, verification.
int cmd_inspect(const std::string& path);

}  // namespace pt
