// StageRuntime: everything one held stage needs at run time (runtime.hpp), its pools sized
// from the IR before the IR runs, and the boundaries (what crosses between stages).
#include <algorithm>

#include "pipetrain/error.hpp"
#include "pipetrain/runtime.hpp"

namespace pt {

Boundary boundary_below(const Model& model, const Layout& layout, int stage) {
  return {stage - 1, model.layer(layout.first_layer(stage)).in_shape()};
}

Boundary boundary_above(const Model& model, const Layout& layout, int stage) {
  return {stage, model.layer(layout.end_layer(stage) - 1).out_shape()};
}

StageRuntime::StageRuntime(Backend& be, const Model& model, const Layout& layout, int s, int64_t train_mb, int64_t eval_mb,
                           bool split_backward, const Deck::Train& train, int64_t total_updates)
    : id(s),
      stage(std::make_unique<Stage>(be, model, layout.first_layer(s), layout.end_layer(s), train_mb, eval_mb, split_backward)),
      in(boundary_below(model, layout, s)),
      out(boundary_above(model, layout, s)),
      first(s == 0),
      last(s == layout.stages() - 1) {
  const size_t n = static_cast<size_t>(stage->num_params());
  weights = std::make_unique<WeightStore>(be, n);
  opt = std::make_unique<Optimizer>(train, be, n, std::max<int64_t>(1, total_updates));
  grads = Buffer(be, n + 1);
  state = Buffer(be, static_cast<size_t>(stage->num_state()));
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
  }
}

int64_t StageRuntime::pool_bytes() const {
  int64_t b = static_cast<int64_t>(grads.bytes());
  for (const Buffer& x : grad_in) b += static_cast<int64_t>(x.bytes());
  for (const Buffer& x : grad_out) b += static_cast<int64_t>(x.bytes());
  return b;
}

}  // namespace pt
