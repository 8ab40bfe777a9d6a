// Internal to the executor's files: the state of one train() call and the message tags.
#pragma once
#include <map>

#include "pipetrain/clip.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

// Tag kinds: activation, gradient, evaluation activation.
enum TagKind { kTagAct = 0, kTagGrad = 1, kTagEval = 2, kTagKinds = 3 };
constexpr int kTagTie = 1 << 20;  // tied-gradient exchanges, on the world communicator (p2p carries the pipeline)

// A tensor of one layer held again by a later one (lm_head's tie to the embedding): where
// each holder keeps it in its stage's flat parameters, and who holds the other copy.
struct Executor::Tie {
  int emb_stage, head_stage;      // stages of the two holders
  int64_t emb_offset, head_offset;  // floats into each stage's flat parameters
  int64_t size;
  int64_t done_group = -1;          // both copies local: the group whose sum is already in both
};

// train.clip_grad_norm: per held stage (stages_' order) its tensors of the norm, the
// per-tensor sums of squares of the model, and the norm of the latest GRAD_NORM's group.
struct Executor::GradNorm {
  std::vector<std::vector<NormTensor>> tensors;
  std::vector<int64_t> floats;  // per held stage: floats of its tensors (its share of the threshold)
  int64_t model_floats = 0;
  std::vector<double> sums;     // one per tensor of the model
  std::vector<bool> split;      // parallel.tensor: the tensors split over the tensor group (split_tensors)
  std::vector<double> parts;    // every tensor rank's sums (TensorGroup::gather)
  double norm = 0;
  int32_t group = -1;           // the update group `norm` belongs to
};

struct Executor::Step {
  Step(const Schedule& s, int rank, PollHook p) : ir(s), poll(p) {
    const auto& acts = ir.workers[static_cast<size_t>(rank)];
    for (size_t k = 0; k < acts.size(); ++k)
      if (acts[k].op == Op::optimizer_step) last_update[acts[k].version] = k;
  }
  const Schedule& ir;
  size_t i = 0;          // the action running
  bool stopped = false;  // a checkpoint_and_stop cut ended the IR
  int64_t bytes = 0;     // bytes the running action moved (timeline)
  PollHook poll;
  // Index of the rank's last OPTIMIZER_STEP producing `version` (a rank holding several
  // stages updates each; the boundary is after the last).
  size_t last_update_of(int32_t version) const { return last_update.at(version); }
  std::map<int32_t, size_t> last_update;
  // Whether the running action (B or W) is its stage's last gradient accumulation before the
  // stage's gradients are reduced, normed or applied (or the IR ends): no B or W of `stage`
  // comes first in this rank's actions.
  bool ends_accumulation(int rank, int stage) const {
    const auto& acts = ir.workers[static_cast<size_t>(rank)];
    for (size_t k = i + 1; k < acts.size(); ++k) {
      const Action& b = acts[k];
      if (b.stage != stage) continue;
      if (b.op == Op::backward || b.op == Op::backward_weight) return false;
      if (b.op == Op::allreduce || b.op == Op::grad_norm || b.op == Op::optimizer_step) return true;
    }
    return true;
  }
};

}  // namespace pt
