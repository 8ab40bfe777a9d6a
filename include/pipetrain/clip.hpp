// Gradient-norm clipping (train.clip_grad_norm), as torch.nn.utils.clip_grad_norm_ with the
// L2 norm: the norm over every parameter of the model (a tied tensor once), and the
// gradients scaled by min(1, max_norm / (norm + 1e-6)) in fp32 before the optimizer step.
// The norm is assembled from one sum of squares per parameter tensor (double, fixed order:
// Backend::sum_squares), indexed by the tensor's place in the model (layers in order, each
// layer's params() in order) and added in index order, so it has the same bits on every
// layout: a stage fills the entries of its tensors, and the executor sums the entries of
// every stage over all ranks, each entry from exactly one rank (docs/ARCHITECTURE.md,
// "Gradient clipping"). Asynchronous schedules clip each stage's update alone, against its
// share of the threshold (stage_clip_threshold). Used by the executor and the emulator.
#pragma once
#include <cstdint>
#include <vector>

#include "pipetrain/stage.hpp"

namespace pt {

// One parameter tensor that counts toward the norm: its floats in the stage's flat
// parameters (and gradients), and its index among the model's tensors.
struct NormTensor {
  int64_t offset = 0, size = 0;
  int index = 0;
};

// The model's parameter tensors (the length of the per-tensor sums).
int norm_tensor_count(const Model& model);
// The tensors of a stage's layers that count toward the norm: every one except a tied
// head's mirror of the embedding matrix (the tied tensor counts once, at the embedding,
// after the two gradients are summed).
std::vector<NormTensor> norm_tensors(const Stage& stage);
// Floats of these tensors, of the whole tensors under parallel.tensor = t (split: the
// model's split_tensors; a split tensor's part counts t times).
int64_t norm_floats(const std::vector<NormTensor>& tensors, const std::vector<bool>& split = {}, int t = 1);
// The model's floats that count (a stage's share of the threshold divides by it), of the
// whole tensors when the model is a tensor-parallel part.
int64_t model_norm_floats(const Model& model);
// sums[t.index] = sum of squares of the stage's gradient over tensor t, for each t.
void sums_of_squares(Backend& be, const float* grads, const std::vector<NormTensor>& tensors, std::vector<double>& sums);
// Under parallel.tensor: which of the model's tensors are split over the tensor group (a
// layer with LayerSpec::tensor_parts > 1, ParamTensor::split_dim >= 0); the others are
// replicated there, each rank holding the whole (and the same gradient).
std::vector<bool> split_tensors(const Model& model);
// sums[i] <- for a split tensor the sum over the t tensor ranks of their entries (parts: t
// rows of sums.size(), rank order), added in rank order; for a replicated one, rank 0's.
void combine_tensor_parts(const std::vector<double>& parts, int t, const std::vector<bool>& split, std::vector<double>& sums);
// sqrt of the entries added in index order.
double total_norm(const std::vector<double>& sums);
// The norm of one stage's gradient over its tensors alone (an asynchronous stage's update):
// the same sums, added in index order.
double stage_norm(Backend& be, const float* grads, const std::vector<NormTensor>& tensors);
// min(1, max_norm / (norm + 1e-6)) as a float; 1 when the norm is not finite (the update is
// then skipped or aborted: train.nonfinite).
float clip_coefficient(double norm, double max_norm);
// An asynchronous stage's threshold: max_norm * sqrt(its floats / the model's), so that the
// thresholds' squares add up to max_norm^2 over the stages.
double stage_clip_threshold(double max_norm, int64_t stage_floats, int64_t model_floats);
// Scale n gradients by the coefficient in fp32 (nothing when it is 1).
void apply_clip(Backend& be, float* grads, size_t n, float coefficient);

}  // namespace pt
