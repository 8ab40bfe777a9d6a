// Gradient-norm clipping (clip.hpp): the model's parameter tensors in a fixed index order,
// per-tensor sums of squares, their total in index order, the coefficient, a stage's share
// of the threshold.
#include "pipetrain/clip.hpp"

#include <cmath>

namespace pt {

int norm_tensor_count(const Model& model) {
  int n = 0;
  for (int l = 0; l < model.size(); ++l) n += static_cast<int>(model.layer(l).params().size());
  return n;
}

std::vector<NormTensor> norm_tensors(const Stage& stage) {
  const Model& model = stage.model();
  int index = 0;
  for (int l = 0; l < stage.first(); ++l) index += static_cast<int>(model.layer(l).params().size());
  std::vector<NormTensor> out;
  for (int l = stage.first(); l < stage.last(); ++l) {
    const Layer& layer = model.layer(l);
    const std::vector<ParamTensor> ps = layer.params();
    for (size_t t = 0; t < ps.size(); ++t, ++index)
      if (layer.tied_to(static_cast<int>(t)).empty()) out.push_back({stage.param_offset(l) + ps[t].offset, ps[t].size, index});
  }
  return out;
}

int64_t norm_floats(const std::vector<NormTensor>& tensors, const std::vector<bool>& split, int t) {
  int64_t n = 0;
  for (const NormTensor& x : tensors)
    n += x.size * (!split.empty() && split[static_cast<size_t>(x.index)] ? t : 1);
  return n;
}

std::vector<bool> split_tensors(const Model& model) {
  std::vector<bool> out;
  for (int l = 0; l < model.size(); ++l)
    for (const ParamTensor& p : model.layer(l).params())
      out.push_back(model.layer(l).spec().tensor_parts > 1 && p.split_dim >= 0);
  return out;
}

void combine_tensor_parts(const std::vector<double>& parts, int t, const std::vector<bool>& split, std::vector<double>& sums) {
  const size_t n = sums.size();
  PT_CHECK(parts.size() == n * static_cast<size_t>(t) && split.size() == n, "combine_tensor_parts: sizes");
  for (size_t i = 0; i < n; ++i) {
    sums[i] = parts[i];
    if (split[i])
      for (size_t k = 1; k < static_cast<size_t>(t); ++k) sums[i] += parts[k * n + i];
  }
}

int64_t model_norm_floats(const Model& model) {
  int64_t n = 0;
  for (int l = 0; l < model.size(); ++l) {
    const std::vector<ParamTensor> ps = model.layer(l).params();
    const int parts = model.layer(l).spec().tensor_parts;
    for (size_t t = 0; t < ps.size(); ++t)
      if (model.layer(l).tied_to(static_cast<int>(t)).empty()) n += ps[t].size * (ps[t].split_dim >= 0 ? parts : 1);
  }
  return n;
}

void sums_of_squares(Backend& be, const float* grads, const std::vector<NormTensor>& tensors, std::vector<double>& sums) {
  for (const NormTensor& t : tensors)
    sums[static_cast<size_t>(t.index)] = be.sum_squares(static_cast<size_t>(t.size), grads + t.offset);
}

double total_norm(const std::vector<double>& sums) {
  double s = 0;
  for (double v : sums) s += v;
  return std::sqrt(s);
}

double stage_norm(Backend& be, const float* grads, const std::vector<NormTensor>& tensors) {
  double s = 0;
  for (const NormTensor& t : tensors) s += be.sum_squares(static_cast<size_t>(t.size), grads + t.offset);
  return std::sqrt(s);
}

float clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0 || !std::isfinite(norm)) return 1.0f;
  const double c = max_norm / (norm + 1e-6);
  return c < 1.0 ? static_cast<float>(c) : 1.0f;
}

double stage_clip_threshold(double max_norm, int64_t stage_floats, int64_t model_floats) {
  if (model_floats <= 0) return max_norm;
  return max_norm * std::sqrt(static_cast<double>(stage_floats) / static_cast<double>(model_floats));
}

void apply_clip(Backend& be, float* grads, size_t n, float coefficient) {
  if (coefficient < 1.0f && n > 0) be.scale(n, coefficient, grads);
}

}  // namespace pt
