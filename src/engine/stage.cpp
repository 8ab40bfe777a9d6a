// Stage compute: slot layout, forward, backward (ping-pong gradient scratch) and inference.
#include "pipetrain/stage.hpp"

#include <algorithm>
#include <vector>

#include "pipetrain/error.hpp"

namespace pt {

int64_t Stage::slot_floats_per_sample(const Layer& layer, bool keep_output_grads, Recompute mode, Precision p,
                                      int64_t* kept) {
  const Recompute lm = mode == Recompute::full ? Recompute::none : mode;  // the layout's saved extras
  int64_t k = 0;
  if (keep_output_grads) {
    k = layer.split_aux_floats(lm);
    if (layer.splits_backward() && !layer.is_loss()) k += layer.out_shape().numel();
  }
  if (kept) *kept = k;
  return (layer.is_view() ? 0 : layer.out_shape().numel()) + layer.aux_floats(lm, p) + k;
}

Stage::SlotGeometry Stage::slot_geometry(const Model& model, int first, int last, bool keep_output_grads, Recompute mode,
                                         Precision p) {
  PT_CHECK(0 <= first && first < last && last <= model.size(), "bad stage [" << first << ", " << last << ")");
  SlotGeometry g;
  g.input = model.layer(first).in_shape().numel();
  g.output = model.layer(last - 1).out_shape().numel();
  g.layout = g.input;
  for (int l = first; l < last; ++l) {
    int64_t k = 0;
    g.layout += slot_floats_per_sample(model.layer(l), keep_output_grads, mode, p, &k);
    g.kept += k;
  }
  const bool full = mode == Recompute::full;
  g.unit = full ? g.input + g.output : g.layout;
  g.recompute = full ? g.layout : 0;
  if (full) g.kept = 0;  // kept gradients live in the recompute buffer from I until W
  return g;
}

Recompute Stage::layout_mode(Recompute mode) const {
  if (mode != Recompute::selective) return mode;
  for (int l = first_; l < last_; ++l)
    if (model_.layer(l).recomputes_selectively()) return mode;
  return Recompute::none;
}

Stage::Geometry Stage::geometry(const Model& model, int first, int last, int64_t train_mb, int64_t eval_mb,
                                bool keep_output_grads, Recompute mode, Precision p) {
  const SlotGeometry sg = slot_geometry(model, first, last, keep_output_grads, mode, p);
  Geometry g;
  g.max_numel = model.layer(first).in_shape().numel();
  for (int l = first; l < last; ++l) {
    const Layer& layer = model.layer(l);
    g.num_params += layer.num_params();
    g.num_state += layer.num_state();
    g.aux_max = std::max(g.aux_max, layer.aux_per_sample());
    g.work_max = std::max({g.work_max, layer.workspace_per_sample(), layer.workspace_floats(mode)});
    g.max_numel = std::max({g.max_numel, layer.in_shape().numel(), layer.out_shape().numel()});
  }
  const int64_t widest = std::max(train_mb, eval_mb);
  g.layout_floats = sg.layout * train_mb;
  g.slot_floats = sg.unit * train_mb;
  g.recompute_floats = sg.recompute * train_mb;
  g.slot_kept_floats = sg.kept * train_mb;
  g.scratch_floats = widest * g.max_numel;
  g.eval_aux_floats = std::max<int64_t>(1, eval_mb * g.aux_max);
  g.work_floats = g.work_max ? widest * g.work_max : 0;
  const Layer& tail = model.layer(last - 1);
  g.eval_loss_floats = tail.is_loss() ? eval_mb * std::max<int64_t>(1, tail.out_shape().numel()) : 0;
  return g;
}

Stage::Stage(Backend& be, const Model& model, int first, int last, int64_t train_mb, int64_t eval_mb, bool keep_output_grads,
             Recompute recompute, Precision precision)
    : be_(be), model_(model), first_(first), last_(last), first_compute_(last), last_compute_(first - 1), train_mb_(train_mb), eval_mb_(eval_mb),
      keep_dout_(keep_output_grads), mode_(recompute), precision_(precision) {
  const Geometry g = geometry(model, first, last, train_mb, eval_mb, keep_output_grads, recompute, precision);
  for (int l = first; l < last; ++l) {
    const Layer& layer = model.layer(l);
    offset_.push_back(num_params_);
    num_params_ += layer.num_params();
    state_offset_.push_back(num_state_);
    num_state_ += layer.num_state();
    if (!layer.is_view() && first_compute_ == last) first_compute_ = l;
    if (!layer.is_view()) last_compute_ = l;
  }
  slot_floats_ = g.layout_floats;
  unit_floats_ = g.slot_floats;
  max_numel_ = g.max_numel;
  scratch_a_ = Buffer(be, static_cast<size_t>(g.scratch_floats));
  scratch_b_ = Buffer(be, static_cast<size_t>(g.scratch_floats));
  eval_aux_ = Buffer(be, static_cast<size_t>(g.eval_aux_floats));
  if (g.work_floats) work_ = Buffer(be, static_cast<size_t>(g.work_floats));
  if (g.eval_loss_floats) eval_loss_ = Buffer(be, static_cast<size_t>(g.eval_loss_floats));
}

void Stage::init_params(float* host, uint64_t seed) const {
  for (int l = first_; l < last_; ++l) model_.layer(l).init_params(host + param_offset(l), seed);
}

std::vector<std::pair<int64_t, int64_t>> Stage::operand_only_ranges() const {
  std::vector<std::pair<int64_t, int64_t>> r;
  for (int l = first_; l < last_; ++l)
    for (const ParamTensor& t : model_.layer(l).params()) {
      const int64_t at = param_offset(l) + t.offset, lo = (at + 1) / 2 * 2, hi = (at + t.size) / 2 * 2;
      if (t.operand_only && hi > lo) r.emplace_back(lo, hi - lo);
    }
  return r;
}

void Stage::init_state(float* host) const {
  for (int l = first_; l < last_; ++l) model_.layer(l).init_state(host + state_offset(l));
}

LayerCtx Stage::layer_ctx(const LayerCtx& ctx, int l) const {
  LayerCtx lc = ctx;
  lc.work = work_.data();
  lc.state = ctx.state && model_.layer(l).num_state() ? ctx.state + state_offset(l) : nullptr;
  lc.selective = ctx.training && model_.layer(l).selective_in(mode_);  // evaluation keeps nothing anyway
  lc.precision = precision();
  for (int k = 0; k < l && activation_bf16() && !lc.x_bf16; ++k) lc.x_bf16 = !model_.layer(k).is_view();
  return lc;
}

void Stage::require_state(const LayerCtx& ctx) const {
  PT_CHECK(num_state_ == 0 || ctx.state, "layers " << first_ << ".." << last_ - 1 << " keep " << num_state_
                                                   << " floats of running state (batch norm), but no state buffer "
                                                      "was passed (LayerCtx::state)");
}

Stage::Slot Stage::carve(float* base, int32_t* labels) const { return carve_layout(base, labels, mode_); }

Stage::Slot Stage::carve_layout(float* base, int32_t* labels, Recompute mode) const {
  const Recompute lm = mode == Recompute::full ? Recompute::none : mode;
  Slot s;
  s.labels = labels;
  float* p = base;
  s.input = p;
  p += train_mb_ * in_shape().numel();
  const float* prev = s.input;
  for (int l = first_; l < last_; ++l) {
    const Layer& layer = model_.layer(l);
    float* y = layer.is_view() ? const_cast<float*>(prev) : p;
    if (!layer.is_view()) p += train_mb_ * layer.out_shape().numel();
    s.out.push_back(y);
    const int64_t aux = layer.aux_floats(lm, precision_) + (keep_dout_ ? layer.split_aux_floats(lm) : 0);
    s.aux.push_back(aux ? p : nullptr);
    p += train_mb_ * aux;
    const bool keep = keep_dout_ && layer.splits_backward() && !layer.is_loss();
    s.dout.push_back(keep ? p : nullptr);
    if (keep) p += train_mb_ * layer.out_shape().numel();
    prev = y;
  }
  PT_CHECK(p - base == slot_geometry(model_, first_, last_, keep_dout_, mode, precision_).layout * train_mb_,
           "slot layout " << (p - base) << " floats, not the geometry's");
  return s;
}

Stage::Slot Stage::carve_unit(float* base, int32_t* labels) const {
  if (mode_ != Recompute::full) return carve(base, labels);
  Slot s;
  s.labels = labels;
  s.input = base;
  const size_t L = static_cast<size_t>(last_ - first_);
  s.out.assign(L, nullptr);
  s.aux.assign(L, nullptr);
  s.dout.assign(L, nullptr);
  s.out.back() = base + train_mb_ * in_shape().numel();
  return s;
}

bool Stage::can_restore_units(Recompute mode) const {
  const Recompute from = layout_mode(mode), to = layout_mode(mode_);
  return from == to || (to == Recompute::full && from != Recompute::full);
}

int64_t Stage::unit_floats_under(Recompute mode) const {
  return slot_geometry(model_, first_, last_, keep_dout_, layout_mode(mode), precision_).unit * train_mb_;
}

std::vector<float> Stage::unit_from(const std::vector<float>& contents, Recompute mode) const {
  const Recompute from = layout_mode(mode), to = layout_mode(mode_);
  PT_CHECK(static_cast<int64_t>(contents.size()) == unit_floats_under(mode),
           "a unit slot of " << contents.size() << " floats for stage layers " << first_ << ".." << last_ - 1
                             << " under recompute = " << enum_name(mode) << ", whose slot has " << unit_floats_under(mode));
  if (from == to) return contents;
  if (!can_restore_units(mode)) return {};
  std::vector<float> whole = contents;  // carved in place: the input and the output's offsets
  const Slot s = carve_layout(whole.data(), nullptr, from);
  const int64_t in = train_mb_ * in_shape().numel(), out = train_mb_ * out_shape().numel();
  std::vector<float> unit(s.input, s.input + in);
  unit.insert(unit.end(), output(s), output(s) + out);
  return unit;
}

void Stage::forward_layer(int l, const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n) const {
  const size_t i = static_cast<size_t>(l - first_);
  const float* x = i == 0 ? s.input : s.out[i - 1];
  model_.layer(l).forward(layer_ctx(ctx, l), params + offset_[i], x, s.out[i], s.aux[i], n);
}

void Stage::forward(const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const {
  require_state(ctx);
  run_forward(s, params, ctx, n, poll);
}

void Stage::recompute_forward(const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const {
  LayerCtx c = ctx;
  c.state = nullptr;  // the FORWARD updated the running statistics once already
  run_forward(s, params, c, n, poll);
}

void Stage::run_forward(const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const {
  PT_CHECK(n <= train_mb_, "microbatch " << n << " > slot capacity " << train_mb_);
  for (int l = first_; l < last_; ++l) {
    forward_layer(l, s, params, ctx, n);
    round_output(l, s.out[static_cast<size_t>(l - first_)], n);
    poll();
  }
}

// train.precision = "bf16": every activation between layers holds a bf16 value (the loss's
// output stays fp32), so a stage boundary sends bf16 losslessly and any cut equals one process.
// A layer that passes values (ReLU) keeps them bf16 where a layer of this stage below it made
// its input; rounding them again would change no bit.
bool Stage::rounds_output(int l) const {
  const Layer& layer = model_.layer(l);
  if (!activation_bf16() || layer.is_view() || layer.is_loss()) return false;
  return !(layer.passes_values() && first_compute_ < l);
}

// The same for a backward's input gradient (dx of layer l), whose output gradient a layer of
// this stage above it made (and rounded) when there is one.
bool Stage::rounds_input_grad(int l) const {
  return activation_bf16() && !(model_.layer(l).passes_values() && last_compute_ > l);
}

void Stage::round_output(int l, float* y, int64_t n) const {
  if (y && rounds_output(l)) be_.round_bf16(static_cast<size_t>(n * model_.layer(l).out_shape().numel()), y, y);
}

void Stage::round_input_grad(int l, float* dx, int64_t n) const {
  if (dx && rounds_input_grad(l)) be_.round_bf16(static_cast<size_t>(n * model_.layer(l).in_shape().numel()), dx, dx);
}

void Stage::backward_layer(int l, const Slot& s, ParamView params, float* grads, const float* dy, float* dx,
                           const LayerCtx& ctx, int64_t n) const {
  const size_t i = static_cast<size_t>(l - first_);
  const float* x = i == 0 ? s.input : s.out[i - 1];
  model_.layer(l).backward(layer_ctx(ctx, l), params + offset_[i], x, s.out[i], dy, dx, grads + offset_[i], s.aux[i], n);
}

void Stage::backward_weight_layer(int l, const Slot& s, ParamView params, float* grads, const float* dy,
                                  const LayerCtx& ctx, int64_t n) const {
  const size_t i = static_cast<size_t>(l - first_);
  const float* x = i == 0 ? s.input : s.out[i - 1];
  model_.layer(l).backward_weight(layer_ctx(ctx, l), params + offset_[i], x, s.out[i], dy, grads + offset_[i], s.aux[i], n);
}

void Stage::backward(const Slot& s, ParamView params, float* grads, const float* dy, float* dx,
                     const LayerCtx& ctx, int64_t n, PollHook poll) const {
  const float* cur_dy = dy;
  for (int l = last_ - 1; l >= first_; --l) {
    const Layer& layer = model_.layer(l);
    const bool first_layer = l == first_;
    if (layer.is_view()) {  // gradient passes through unchanged
      if (first_layer && dx) be_.copy(dx, cur_dy, static_cast<size_t>(n * layer.in_shape().numel()));
      continue;
    }
    float* target;
    if (!input_grad_needed(l, dx)) target = nullptr;  // nobody reads it
    else if (first_layer) target = dx;
    else target = (cur_dy == scratch_a_.data()) ? scratch_b_.data() : scratch_a_.data();
    backward_layer(l, s, params, grads, cur_dy, target, ctx, n);
    round_input_grad(l, target, n);
    cur_dy = target;
    poll();
  }
}

// Layer l's input gradient is read by a layer below it in the stage, or sent (dx): not when
// only views (flatten) lie below and the stage has no dx (the model's input needs none), as
// for the MLP's first linear after its flatten.
bool Stage::input_grad_needed(int l, const float* dx) const { return dx || l > first_compute_; }

float* Stage::grad_target(const Slot& s, int l, const float* cur_dy, float* dx) const {
  if (!input_grad_needed(l, dx)) return nullptr;
  for (int j = l - 1; j >= first_; --j) {
    if (model_.layer(j).is_view()) continue;
    if (float* d = s.dout[static_cast<size_t>(j - first_)]) return d;
    break;
  }
  if (l == first_) return dx;
  return cur_dy == scratch_a_.data() ? scratch_b_.data() : scratch_a_.data();
}

void Stage::backward_input(const Slot& s, ParamView params, float* grads, const float* dy, float* dx,
                           const LayerCtx& ctx, int64_t n, PollHook poll) const {
  PT_CHECK(keep_dout_, "backward_input on a stage built without output-gradient slots");
  const float* cur_dy = dy;
  for (int l = last_ - 1; l >= first_; --l) {
    const Layer& layer = model_.layer(l);
    const size_t i = static_cast<size_t>(l - first_);
    if (layer.is_view()) {  // gradient passes through unchanged
      if (l == first_ && dx) be_.copy(dx, cur_dy, static_cast<size_t>(n * layer.in_shape().numel()));
      continue;
    }
    if (s.dout[i] && cur_dy != s.dout[i]) {  // the stage's incoming gradient: keep it for W
      be_.copy(s.dout[i], cur_dy, static_cast<size_t>(n * layer.out_shape().numel()));
      cur_dy = s.dout[i];
    }
    float* target = l == first_ ? dx : grad_target(s, l, cur_dy, dx);
    const float* x = i == 0 ? s.input : s.out[i - 1];
    layer.backward_input(layer_ctx(ctx, l), params + offset_[i], x, s.out[i], cur_dy, target, grads + offset_[i], s.aux[i], n);
    round_input_grad(l, target, n);
    cur_dy = target;
    poll();
  }
}

void Stage::backward_weight(const Slot& s, ParamView params, float* grads, const LayerCtx& ctx, int64_t n,
                            PollHook poll) const {
  for (int l = last_ - 1; l >= first_; --l) {
    const size_t i = static_cast<size_t>(l - first_);
    const Layer& layer = model_.layer(l);
    if (!layer.splits_backward()) continue;  // its output gradient is in s.dout[i] (none for the loss)
    const float* x = i == 0 ? s.input : s.out[i - 1];
    layer.backward_weight(layer_ctx(ctx, l), params + offset_[i], x, s.out[i], s.dout[i], grads + offset_[i], s.aux[i], n);
    poll();
  }
}

const float* Stage::infer(const float* x, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const {
  PT_CHECK(n <= eval_mb_, "eval microbatch " << n << " > " << eval_mb_);
  require_state(ctx);
  const float* cur = x;
  for (int l = first_; l < last_; ++l) {
    const Layer& layer = model_.layer(l);
    if (layer.is_loss() || layer.is_view()) continue;
    float* y = (cur == scratch_a_.data()) ? scratch_b_.data() : scratch_a_.data();
    layer.forward(layer_ctx(ctx, l), params + param_offset(l), cur, y, eval_aux_.data(), n);
    round_output(l, y, n);
    cur = y;
    poll();
  }
  return cur;
}

void Stage::eval_loss(const float* x, ParamView params, const LayerCtx& ctx, int64_t n, double* loss_sum, int64_t* correct,
                      int64_t* scored) const {
  PT_CHECK(n <= eval_mb_, "eval microbatch " << n << " > " << eval_mb_);
  const int l = last_ - 1;
  const Layer& loss = model_.layer(l);
  LayerCtx c = ctx;
  c.training = false;
  loss.eval_loss(layer_ctx(c, l), params + param_offset(l), x, eval_loss_.data(), eval_aux_.data(), n, loss_sum, correct);
  *scored = n * loss.labels_per_sample();
}

}  // namespace pt
