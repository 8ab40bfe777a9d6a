// Updates, before the optimizer step: the group's reduction (replica allreduce, loss, the
// skip decision, tied gradients: once per group, at the rank's GRAD_NORM or at the stage's
// OPTIMIZER_STEP), and gradient clipping (train.clip_grad_norm, clip.hpp). Under a flush
// schedule the IR's GRAD_NORM gathers the per-tensor sums of squares of every stage (replica
// 0 of each fills its tensors' entries, every other entry is 0, so the sum over all ranks is
// exact in any order) through one host allreduce over all ranks, and every stage of the
// group scales by the same coefficient. Under parallel.tensor a split tensor's entry is the
// sum of its parts over the tensor group (gathered, added in tensor-rank order), a replicated
// one's counted once, and the skip of a non-finite update is the group's (any part's skips
// every part). An asynchronous stage clips its own update against its share of the
// threshold (docs/ARCHITECTURE.md, "Gradient clipping"); under parallel.tensor its norm is
// that of its whole tensors (its split tensors' sums gathered over the group), and its share
// counts whole tensors, so a part clips as the unsplit stage does.
#include <algorithm>
#include <cmath>

#include "executor_internal.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {

namespace {
// Per-tensor sums of squares whole over the tensor group: a split tensor's entry becomes the
// sum of its parts (gathered, added in tensor-rank order), a replicated one's stays; no-op
// at t = 1. parts: scratch.
void sum_over_tensor_group(const TensorGroup* tensor, const std::vector<bool>& split, std::vector<double>& sums,
                           std::vector<double>& parts) {
  if (!tensor || tensor->size() <= 1) return;
  parts.resize(sums.size() * static_cast<size_t>(tensor->size()));
  tensor->gather(sums.data(), parts.data(), static_cast<int64_t>(sums.size()));
  combine_tensor_parts(parts, tensor->size(), split, sums);
}

// A stage's own gradient norm (an asynchronous update): its tensors' sums of squares, under
// parallel.tensor the split ones summed over the group, added in index order.
// sums and parts: scratch of the model's tensor count (and t times it).
double own_stage_norm(Backend& be, const TensorGroup* tensor, const std::vector<bool>& split, const float* grads,
                      const std::vector<NormTensor>& tensors, std::vector<double>& sums, std::vector<double>& parts) {
  if (!tensor || tensor->size() <= 1) return stage_norm(be, grads, tensors);
  std::fill(sums.begin(), sums.end(), 0.0);
  sums_of_squares(be, grads, tensors, sums);
  sum_over_tensor_group(tensor, split, sums, parts);
  double s = 0;
  for (const NormTensor& t : tensors) s += sums[static_cast<size_t>(t.index)];
  return std::sqrt(s);
}
}  // namespace

void Executor::reduce_group(StageRuntime& r, const Action& a) {
  if (r.group.reduced) return;
  const size_t n = static_cast<size_t>(r.stage->num_params());
  if (ir_->layout.replicas_of(r.id) > 1) {
    wait(&r.group.allreduce, [&] { return "ALLREDUCE of update " + std::to_string(a.mb) + " among the replicas of stage " + std::to_string(r.id); });
    tr_->finish_allreduce(r.grads.data());
    float l = 0;
    be_.to_host(&l, r.grads.data() + n, 1);
    r.group.loss = l;
  }
  r.group.skip = cfg_.skip_nonfinite && (r.group.nonfinite || !be_.all_finite(n, r.grads.data()));
  if (cfg_.skip_nonfinite && cfg_.tensor && cfg_.tensor->size() > 1) {  // a part's non-finite gradient skips every part
    const double mine = r.group.skip ? 1.0 : 0.0;
    std::vector<double> all(static_cast<size_t>(cfg_.tensor->size()));
    cfg_.tensor->gather(&mine, all.data(), 1);
    r.group.skip = std::any_of(all.begin(), all.end(), [](double v) { return v != 0.0; });
  }
  apply_ties({Op::optimizer_step, static_cast<int16_t>(r.id), a.mb, -1, -1});
  r.group.reduced = true;
}

void Executor::init_clipping() {
  if (cfg_.clip_grad_norm <= 0 || stages_.empty()) return;
  norm_ = std::make_unique<GradNorm>();
  const Model& model = stages_.front()->stage->model();
  norm_->split = split_tensors(model);
  const int t = cfg_.tensor ? cfg_.tensor->size() : 1;
  for (StageRuntime* r : stages_) {
    norm_->tensors.push_back(norm_tensors(*r->stage));
    norm_->floats.push_back(norm_floats(norm_->tensors.back(), norm_->split, t));
  }
  norm_->model_floats = model_norm_floats(model);
  norm_->sums.assign(static_cast<size_t>(norm_tensor_count(model)), 0.0);
}

/// GRAD_NORM: every held stage's group reduced (replicas, ties), its tensors' sums of
/// squares (replica 0 only) into the model's per-tensor vector, summed over all ranks; the
/// norm of the group, the same on every rank, for the updates that follow.
void Executor::on_grad_norm(const Action& a, Step& st) {
  PT_CHECK(norm_, "GRAD_NORM in the IR without train.clip_grad_norm");
  GradNorm& g = *norm_;
  for (StageRuntime* r : stages_) reduce_group(*r, a);
  std::fill(g.sums.begin(), g.sums.end(), 0.0);
  if (ctx_.replica() == 0)
    for (size_t k = 0; k < stages_.size(); ++k) sums_of_squares(be_, stages_[k]->grads.data(), g.tensors[k], g.sums);
  Request q;
  tr_->iallreduce_host(g.sums.data(), g.sums.size(), ctx_.world(), &q);
  wait(&q, [&] { return "GRAD_NORM of update " + std::to_string(a.mb) + " (every rank's sums of squares; rank " + std::to_string(ctx_.rank()) + ")"; });
  sum_over_tensor_group(cfg_.tensor, g.split, g.sums, g.parts);  // split tensors' parts live on the other tensor ranks
  g.norm = total_norm(g.sums);
  g.group = a.mb;
  st.bytes = static_cast<int64_t>(g.sums.size() * sizeof(double));
}

float Executor::clip_coefficient_of(StageRuntime& r, const Action& a, double* norm) {
  *norm = -1;
  if (!norm_) return 1.0f;
  if (ir_->grad_norm) {
    PT_CHECK(norm_->group == a.mb, "stage " << r.id << " updates group " << a.mb << " after the GRAD_NORM of group " << norm_->group);
    *norm = norm_->norm;
    return clip_coefficient(*norm, cfg_.clip_grad_norm);
  }
  PT_CHECK(!ir_->def->flush, "train.clip_grad_norm under " << ir_->name() << " without GRAD_NORM in the IR");
  // asynchronous: this update's own gradient, g / stride, against the stage's share
  size_t k = 0;
  while (stages_[k] != &r) ++k;
  GradNorm& g = *norm_;
  *norm = own_stage_norm(be_, cfg_.tensor, g.split, r.grads.data(), g.tensors[k], g.sums, g.parts) /
          static_cast<double>(ir_->version_stride(r.id));
  return clip_coefficient(*norm, stage_clip_threshold(cfg_.clip_grad_norm, norm_->floats[k], norm_->model_floats));
}

}  // namespace pt
