// StageRuntime: everything one held stage needs at run time (engine.hpp), its pools sized
// from the IR before the IR runs, and the boundaries (what crosses between stages).
#include <algorithm>

#include "pipetrain/error.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

// The boundary before layer `l` (the model input at l = 0): bf16 activations once a layer
// other than a view has computed them (Stage rounds every such output).
static Boundary boundary_at(const Model& model, int l, int below, bool bf16) {
  Boundary b;
  b.below = below;
  b.shape = model.layer(l).in_shape();
  for (int k = 0; k < l; ++k) b.act_bf16 = b.act_bf16 || (bf16 && !model.layer(k).is_view());
  b.grad_bf16 = bf16 && l > 0;
  return b;
}

Boundary boundary_below(const Model& model, const Layout& layout, int stage, bool bf16) {
  return boundary_at(model, layout.first_layer(stage), stage - 1, bf16);
}

Boundary boundary_above(const Model& model, const Layout& layout, int stage, bool bf16) {
  const int l = layout.end_layer(stage);
  if (l < model.size()) return boundary_at(model, l, stage, bf16);
  return {stage, model.layer(l - 1).out_shape(), false, false};  // past the loss: nothing crosses
}

StageRuntime::StageRuntime(Backend& be, const Model& model, const Layout& layout, int s, int64_t train_mb, int64_t eval_mb,
                           bool split_backward, const Deck::Train& train, int64_t total_updates)
    : id(s),
      stage(std::make_unique<Stage>(be, model, layout.first_layer(s), layout.end_layer(s), train_mb, eval_mb, split_backward)),
      in(boundary_below(model, layout, s, train.precision == Precision::bf16)),
      out(boundary_above(model, layout, s, train.precision == Precision::bf16)),
      first(s == 0),
      last(s == layout.stages() - 1) {
  const size_t n = static_cast<size_t>(stage->num_params());
  weights = std::make_unique<WeightStore>(be, n, train.precision == Precision::bf16);  // bf16: compute reads bf16 copies
  opt = std::make_unique<Optimizer>(optim_config(train), be, n, std::max<int64_t>(1, total_updates));
  grads = Buffer(be, n + 1);
  state = Buffer(be, static_cast<size_t>(stage->num_state()));
  stage->set_activation_bf16(train.precision == Precision::bf16);  // so bf16 messages lose nothing
}

StageRuntime::~StageRuntime() {
  for (int32_t* p : slot_labels)
    if (p) stage->backend().release_int(p);
  if (eval_labels) stage->backend().release_int(eval_labels);
}

void StageRuntime::ensure_pools(const Schedule& ir, int rank, int64_t mb_size) {
  Backend& be = stage->backend();
  const int need = std::max(1, max_in_flight(ir, rank, id));
  while (static_cast<int>(slot_mem.size()) < need) {
    slot_mem.emplace_back(be, static_cast<size_t>(stage->slot_floats()));
    slot_labels.push_back(last ? be.alloc_int(static_cast<size_t>(stage->train_mb() * labels_per_sample)) : nullptr);
    slots.push_back(stage->carve(slot_mem.back().data(), slot_labels.back()));
    slot_state.emplace_back();
    free_slots.push_back(static_cast<int>(slots.size()) - 1);
    if (!last) {
      grad_in.emplace_back(be, static_cast<size_t>(out.floats(mb_size)));
      grad_in_req.push_back(MPI_REQUEST_NULL);
      free_grad_in.push_back(static_cast<int>(grad_in.size()) - 1);
    }
    if (!first) {
      grad_out.emplace_back(be, static_cast<size_t>(in.floats(mb_size)));
      grad_out_req.push_back(MPI_REQUEST_NULL);
      grad_out_mb.push_back(-1);
    }
    auto wire = [&](bool used, const Boundary& b, bool grad) {
      return Buffer(be, used && (grad ? b.grad_bf16 : b.act_bf16) ? static_cast<size_t>(b.words(mb_size, grad)) : 0);
    };
    wire_act_in.push_back(wire(!first, in, false));
    wire_act_out.push_back(wire(!last, out, false));
    if (!last) wire_grad_in.push_back(wire(true, out, true));
    if (!first) wire_grad_out.push_back(wire(true, in, true));
  }
}

int64_t StageRuntime::pool_bytes() const {
  int64_t b = static_cast<int64_t>(grads.bytes());
  for (const Buffer& x : grad_in) b += static_cast<int64_t>(x.bytes());
  for (const Buffer& x : grad_out) b += static_cast<int64_t>(x.bytes());
  for (auto* w : {&wire_act_in, &wire_act_out, &wire_grad_in, &wire_grad_out})
    for (const Buffer& x : *w) b += static_cast<int64_t>(x.bytes());
  return b;
}

}  // namespace pt
