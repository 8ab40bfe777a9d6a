// What the end of a run writes, and the collective gathers behind it (internal to runtime).
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "pipetrain/data.hpp"
#include "pipetrain/engine.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/train.hpp"

namespace pt {

struct RunOutputs {
  RunOutputs(const ParallelContext& c, const TrainSetup& s, const Deck& d, std::vector<const StageRuntime*> st,
             const Executor& e)
      : ctx(c), setup(s), deck(d), stages(std::move(st)), ex(e) {}
  const ParallelContext& ctx;
  const TrainSetup& setup;
  const Deck& deck;
  std::vector<const StageRuntime*> stages;  // held by this rank
  const Executor& ex;
  std::string run_dir, status;
  double t_origin = 0;
  int64_t epochs = 0, last_step = 0, steps_run = 0, resumed_from = -1;
  double train_time = 0, train_time_this_run = 0, time_to_target = -1;
  double final_train_loss = 0, final_test_loss = 0, final_accuracy = 0;
  std::string last_checkpoint;
  InputTransform input;  // how samples become model inputs (weights.h5 records it)
  std::string token_unit;  // "byte" or "token" for token models (tokens/s and mfu), else ""
  std::vector<RankMemory> estimate;  // every rank's memory estimate (memory_model.hpp)
  int64_t eval_mb = 0;
  double eval_time = 0;  // evaluation wall seconds this run
  nlohmann::json extra = nlohmann::json::object();  // more summary fields (e.g. the plan)
  // parallel.tensor: this rank's tensor grid (its reporter's tensor group assembles the whole
  // weights; tensor rank 0 writes them)
  TensorGrid grid;
};

// Collective: every rank calls it; the reporter writes the files.
void write_run_outputs(const RunOutputs& o);
// Collective: the reporter writes o.run_dir/weights_init.h5 (run.initial_weights).
void write_initial_weights(const RunOutputs& o);
std::vector<double> gather_doubles(const ParallelContext& ctx, const std::vector<double>& mine, int root, const char* what);

}  // namespace pt
