// StageRuntime: everything one held stage needs at run time (engine.hpp), its pools
// (StagePools, stage_pools.cpp) and evaluation buffers, and the boundaries (what crosses
// between stages).
#include <algorithm>

#include "pipetrain/error.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

// The boundary before layer `l` (the model input at l = 0): bf16 activations once a layer
// other than a view has computed them (Stage rounds every such output). Past the last layer
// (the loss) nothing crosses: its shape, fp32.
Boundary boundary_at_layer(const Model& model, int l, int below, bool bf16) {
  if (l >= model.size()) return {below, model.layer(model.size() - 1).out_shape(), false, false};
  Boundary b;
  b.below = below;
  b.shape = model.layer(l).in_shape();
  for (int k = 0; k < l; ++k) b.act_bf16 = b.act_bf16 || (bf16 && !model.layer(k).is_view());
  b.grad_bf16 = bf16 && l > 0;
  return b;
}

Boundary boundary_below(const Model& model, const Layout& layout, int stage, bool bf16) {
  return boundary_at_layer(model, layout.first_layer(stage), stage - 1, bf16);
}

Boundary boundary_above(const Model& model, const Layout& layout, int stage, bool bf16) {
  return boundary_at_layer(model, layout.end_layer(stage), stage, bf16);
}

StageRuntime::StageRuntime(Backend& be, const Model& model, const Layout& layout, int s, int64_t train_mb, int64_t eval_mb,
                           bool split_backward, const Deck::Train& train, int64_t total_updates, Recompute recompute)
    : id(s),
      stage(std::make_unique<Stage>(be, model, layout.first_layer(s), layout.end_layer(s), train_mb, eval_mb, split_backward,
                                    recompute, train.precision)),
      in(boundary_below(model, layout, s, train.precision == Precision::bf16)),
      out(boundary_above(model, layout, s, train.precision == Precision::bf16)),
      first(s == 0),
      last(s == layout.stages() - 1),
      pools(*stage, in, out, first, last) {
  const size_t n = static_cast<size_t>(stage->num_params());
  weights = std::make_unique<WeightStore>(be, n, train.precision == Precision::bf16);  // bf16: compute reads bf16 copies
  weights->set_operand_only(stage->operand_only_ranges());
  opt = std::make_unique<Optimizer>(optim_config(train), be, n, std::max<int64_t>(1, total_updates));
  grads = Buffer(be, n + 1);
  state = Buffer(be, static_cast<size_t>(stage->num_state()));
}

StageRuntime::~StageRuntime() {
  if (eval_.labels) stage->backend().release_int(eval_.labels);
}

StageRuntime::EvalSizes StageRuntime::eval_sizes(const Boundary& in, const Boundary& out, bool last, int64_t eval_mb,
                                                 int64_t labels_per_sample) {
  return {in.floats(eval_mb), out.floats(eval_mb), last ? eval_mb * labels_per_sample : 0};
}

StageRuntime::EvalBuffers& StageRuntime::eval_buffers(int64_t eval_mb) {
  Backend& be = stage->backend();
  const EvalSizes z = eval_sizes(in, out, last, eval_mb, labels_per_sample);
  if (!eval_.in[0].data())  // allocated on the first evaluation and kept
    for (int b = 0; b < 2; ++b) {
      eval_.in[b] = Buffer(be, static_cast<size_t>(z.in));
      eval_.out[b] = Buffer(be, static_cast<size_t>(z.out));
      if (last && !eval_.labels) eval_.labels = be.alloc_int(static_cast<size_t>(z.labels));
    }
  return eval_;
}

}  // namespace pt
