// The executor: runs a rank's action list with real kernels and nonblocking messages (its
// Transport: MPI, or a test's), one small handler per op (kHandlers), each on the
// StageRuntime of the action's stage and the buffers its pools hand out (StagePools).
// Receives are posted ahead of need into pooled buffers (executor_comm.cpp), sends never
// block compute, requests are tested between layers, replica allreduces overlap the
// remaining work, and every action is timed. Checkpoint cuts are in executor_cut.cpp,
// evaluation in evaluate.cpp.
#include <algorithm>
#include <cmath>

#include "executor_internal.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"
#include "pipetrain/stability.hpp"

namespace pt {

const Executor::Handler Executor::kHandlers[kOpCount] = {
    &Executor::on_forward,   &Executor::on_backward,  &Executor::on_backward_input, &Executor::on_backward_weight,
    &Executor::on_send_act,  &Executor::on_recv_act,  &Executor::on_send_grad,      &Executor::on_recv_grad,
    &Executor::on_allreduce, &Executor::on_optimizer_step, &Executor::on_grad_norm};

Executor::Executor(ParallelContext& ctx, std::vector<StageRuntime*> stages, Backend& be, const Dataset& train,
                   const Dataset& test, const ExecutorConfig& cfg, std::unique_ptr<Transport> transport)
    : ctx_(ctx), stages_(std::move(stages)), be_(be), train_(train), test_(test), cfg_(cfg),
      tr_(transport ? std::move(transport) : make_transport(be, cfg.nccl_allreduce)) {
  find_ties();
  init_clipping();
  int64_t mb = cfg.eval_mb, in = 1;
  for (StageRuntime* r : stages_) mb = std::max(mb, r->stage->train_mb()), in = std::max(in, r->in.shape.numel());
  host_x_.resize(static_cast<size_t>(mb * in));
  host_labels_.resize(static_cast<size_t>(mb * std::max<int64_t>(1, train.label_count())));
  idx_.resize(static_cast<size_t>(mb));
  timeline_.reserve(static_cast<size_t>(std::max<int64_t>(cfg.trace_limit, 0)));
  for (StageRuntime* r : stages_)
    for (Buffer* b : r->opt->state()) stats_.optimizer_bytes += static_cast<int64_t>(b->bytes());
}

Executor::~Executor() = default;

StageRuntime& Executor::rt(int stage) {
  for (StageRuntime* r : stages_)
    if (r->id == stage) return *r;
  fail(Exit::internal, "rank " + std::to_string(ctx_.rank()) + " does not hold stage " + std::to_string(stage));
}

bool Executor::train(const Schedule& ir, const std::vector<int64_t>& perm, int64_t sample_base, TrainControl& control,
                     const std::vector<WorkerState>* resume) {
  ir_ = &ir, perm_ = &perm, sample_base_ = sample_base, control_ = &control;
  mb_size_ = cfg_.batch_size / ir.microbatches;
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  const size_t from = resume && !resume->empty() ? static_cast<size_t>(resume->front().position) : 0;
  for (StageRuntime* r : stages_) {
    PT_CHECK(mb_size_ == r->stage->train_mb(), "IR microbatch " << mb_size_ << " != stage slot size " << r->stage->train_mb());
    r->pools.prepare(ir, ctx_.rank(), r->id, mb_size_, r->labels_per_sample);
    r->weights->prepare(ir, ctx_.rank(), r->id, from);
  }
  recv_positions_.clear();
  for (size_t i = from; i < acts.size(); ++i)
    if (acts[i].op == Op::recv_act || acts[i].op == Op::recv_grad) recv_positions_.push_back(i);
  next_recv_ = 0;
  if (resume) restore(ir, *resume);
  Step st(ir, ctx_.rank(), PollHook{&Executor::poll_thunk, this});
  const double t_begin = now_s();
  for (st.i = from; st.i < acts.size() && !st.stopped; ++st.i) {
    post_receives();
    const Action& a = acts[st.i];
    const double t0 = now_s();
    st.bytes = 0;
    (this->*kHandlers[static_cast<int>(a.op)])(a, st);
    const double t1 = now_s();
    if (is_compute(a.op) || a.op == Op::optimizer_step) stats_.compute_s += t1 - t0;
    if (a.op == Op::forward) stats_.forward_s += t1 - t0;
    if (static_cast<int64_t>(timeline_.size()) < cfg_.trace_limit) timeline_.push_back({t0, t1, a.op, a.mb, st.bytes, a.stage});
  }
  drain_sends("final");
  stats_.wall_s += now_s() - t_begin;
  stats_.weight_bytes = stats_.activation_bytes = stats_.buffer_bytes = stats_.recompute_bytes = 0;
  for (StageRuntime* r : stages_) {
    stats_.max_versions = std::max(stats_.max_versions, r->weights->max_held());
    stats_.max_in_flight = std::max(stats_.max_in_flight, r->pools.size());
    stats_.weight_bytes += r->weights->bytes();
    stats_.activation_bytes += r->pools.activation_bytes();
    stats_.recompute_bytes += r->pools.recompute_bytes();
    stats_.buffer_bytes += r->pool_bytes();
  }
  ir_ = nullptr;
  return !st.stopped;
}

void Executor::reserve(const Schedule& ir) {
  const int64_t mb = cfg_.batch_size / ir.microbatches;
  for (StageRuntime* r : stages_) {
    PT_CHECK(mb == r->stage->train_mb(), "IR microbatch " << mb << " != stage slot size " << r->stage->train_mb());
    r->pools.reserve(ir, ctx_.rank(), r->id, mb, r->labels_per_sample);
    r->weights->reserve(ir, ctx_.rank(), r->id);
  }
}

LayerCtx Executor::layer_ctx(StageRuntime& r, const Stage::Slot& slot, int64_t mb, bool training) const {
  LayerCtx c{be_, cfg_.seed, sample_base_ + mb * mb_size_, training, slot.labels, 1.0f / static_cast<float>(cfg_.batch_size)};
  c.state = r.state.data();
  c.tensor = cfg_.tensor;
  return c;
}

// Stage 0 reads its unit's samples, the last stage its labels, each from its own copy of the data.
void Executor::load_inputs(StageRuntime& r, Stage::Slot& slot, int64_t mb) {
  for (int64_t j = 0; j < mb_size_; ++j) idx_[static_cast<size_t>(j)] = (*perm_)[static_cast<size_t>(mb * mb_size_ + j)];
  if (r.first) {
    float* dst = be_.device() == Device::cpu ? slot.input : host_x_.data();
    train_.get(idx_.data(), mb_size_, dst, nullptr);
    if (dst != slot.input) be_.from_host(slot.input, dst, static_cast<size_t>(r.in.floats(mb_size_)));
  }
  if (r.last) {
    train_.get_labels(idx_.data(), mb_size_, host_labels_.data());
    be_.labels_from_host(slot.labels, host_labels_.data(), static_cast<size_t>(mb_size_ * r.labels_per_sample));
  }
}

/// FORWARD: the unit's activation slot (stage 0 claims a free one; other stages use the one
/// its RECV_ACT filled) runs the stage's layers on the version the action names (under full
/// recomputation in a recompute buffer, the output copied back into the unit's slot); the
/// last stage keeps the unit's summed loss in the slot state.
void Executor::on_forward(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  if (r.first) r.pools.claim(a.mb);
  load_inputs(r, r.pools.forward_slot(a.mb), a.mb);
  Stage::Slot& slot = r.pools.compute_slot(a.mb);
  r.stage->forward(slot, r.weights->read(a.version), layer_ctx(r, slot, a.mb, true), mb_size_, st.poll);
  const double loss = r.last ? be_.sum(static_cast<size_t>(mb_size_), r.stage->output(slot)) : 0.0;
  r.pools.forwarded(a.mb, r.weights->base() + a.version, loss);
  r.weights->done_reading(a.version);
}

// The outgoing-gradient buffer of a backward: buffers rotate, reuse waits for that buffer's
// earlier send.
float* Executor::claim_grad_out(StageRuntime& r, const Action& a) {
  wait(&r.pools.next_grad_out_req(), [&] { return "SEND_GRAD buffer reuse before " + waiting_for(a); });
  return r.pools.claim_grad_out(a.mb);
}

// B and I share everything but the stage call: the unit's slot, its incoming gradient (the
// RECV_GRAD buffer, free again after; none on the last stage) and an outgoing buffer for the
// input gradient (none on stage 0). After I the pools keep the slot for its W. Under full
// recomputation the slot is a recompute buffer, filled first by the forward again on the
// same weight version (the stash the FORWARD read, in asynchronous schedules), unless it is
// still the buffer the unit's own FORWARD computed in (StagePools::must_recompute).
void Executor::run_backward(const Action& a, StagePools::Half half, Step& st) {
  StageRuntime& r = rt(a.stage);
  Stage::Slot& slot = r.pools.backward_slot(a.mb, half);
  const float* dy = r.last ? nullptr : r.pools.grad_in(a.mb).data;
  float* dx = r.first ? nullptr : claim_grad_out(r, a);
  const ParamView w = r.weights->read(a.version);
  const LayerCtx lc = layer_ctx(r, slot, a.mb, true);
  if (r.pools.must_recompute(a.mb)) r.stage->recompute_forward(slot, w, lc, mb_size_, st.poll);
  if (half == StagePools::Half::fused) r.stage->backward(slot, w, r.grads.data(), dy, dx, lc, mb_size_, st.poll);
  else r.stage->backward_input(slot, w, r.grads.data(), dy, dx, lc, mb_size_, st.poll);
  r.weights->done_reading(a.version);
  if (!r.last) r.pools.release_grad_in(a.mb);
}

/// BACKWARD (fused): gradient of the unit's output (the RECV_GRAD buffer; none on the last
/// stage) through the stage into the accumulated gradients and the input gradient (an
/// outgoing buffer; none on stage 0); frees the unit's slot.
void Executor::on_backward(const Action& a, Step& st) {
  run_backward(a, StagePools::Half::fused, st);
  finish_unit(rt(a.stage), a, st);
}

/// BACKWARD_INPUT (I): the input gradient only, as B; every splitting layer's output
/// gradient stays in the unit's slot for its W, so the slot is kept; the incoming gradient
/// buffer is free again.
void Executor::on_backward_input(const Action& a, Step& st) { run_backward(a, StagePools::Half::input, st); }

/// BACKWARD_WEIGHT (W): the splitting layers' parameter gradients from the slot's kept
/// activations and output gradients, into the accumulated gradients; frees the slot.
void Executor::on_backward_weight(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  Stage::Slot& slot = r.pools.weight_slot(a.mb);
  r.stage->backward_weight(slot, r.weights->read(a.version), r.grads.data(), layer_ctx(r, slot, a.mb, true), mb_size_, st.poll);
  r.weights->done_reading(a.version);
  finish_unit(r, a, st);
}

// After a unit's last backward work (B or W): its loss joins the update group's, and its slot
// is free once its activation send completed. The accumulated gradients are checked once per
// accumulation, after its last unit: a non-finite value stays non-finite under the sums that
// follow it (NaN absorbs, inf + finite = inf, inf - inf = NaN), so the check finds what a check
// per unit would, at a quarter of the reads over 4 microbatches (all_finite over gpt2_small's
// 85.6M gradients was 1.5% of a bf16 step, checked per unit; 2026-12-06).
void Executor::finish_unit(StageRuntime& r, const Action& a, Step& st) {
  const StagePools::Unit& u = r.pools.unit(a.mb);
  r.group.loss += u.loss;
  if (fault_matches("nan", ctx_.rank(), a.stage, r.weights->latest_id() + st.ir.version_stride(a.stage))) {
    const float nan = NAN;
    be_.from_host(r.grads.data(), &nan, 1);  // test-only: poison this update's gradient
  }
  if (!cfg_.skip_nonfinite && st.ends_accumulation(ctx_.rank(), a.stage))  // "skip": reduce_group reads them
    check_finite_grads(r, a.mb, "after its backward, the last to add to the update's gradients (checked once per update)");
  if (cfg_.debug_versions) version_log_.push_back({a.stage, a.mb, u.fwd_version, r.weights->base() + a.version});
  wait(&r.pools.act_send_req(a.mb), [&] { return "SEND_ACT mb " + std::to_string(a.mb) + " completion (rank " + std::to_string(ctx_.rank()) + ")"; });
  r.pools.release(a.mb);
  stats_.samples += r.first ? mb_size_ : 0;
}

void Executor::check_finite_grads(StageRuntime& r, int64_t mb, const char* when) {
  if (be_.all_finite(static_cast<size_t>(r.stage->num_params()), r.grads.data())) return;
  if (cfg_.skip_nonfinite) {
    r.group.nonfinite = true;
    return;
  }
  std::string layer = "?";  // the first layer whose gradient is not finite
  for (int l = r.stage->first(); l < r.stage->last(); ++l) {
    const int64_t n = r.stage->model().layer(l).num_params();
    if (n && !be_.all_finite(static_cast<size_t>(n), r.grads.data() + r.stage->param_offset(l))) {
      layer = std::to_string(l) + " '" + r.stage->model().layer(l).name() + "'";
      break;
    }
  }
  fail(Exit::numerical, "non-finite gradient on stage " + std::to_string(r.id) + " (rank " + std::to_string(ctx_.rank()) +
                            "), layer " + layer + ", microbatch " + std::to_string(mb) + " of step " +
                            std::to_string(r.weights->latest_id() + ir_->version_stride(r.id)) + " " + when +
                            " (train.nonfinite = \"abort\")" + nonfinite_cause(ir_->name(), ir_->layout.stages(), r.opt->config()));
}

/// ALLREDUCE: starts the nonblocking sum of the stage's accumulated gradients (and the
/// group's loss riding along as one float) among the stage's replicas.
void Executor::on_allreduce(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const size_t n = static_cast<size_t>(r.stage->num_params());
  const float loss = static_cast<float>(r.group.loss);
  be_.from_host(r.grads.data() + n, &loss, 1);
  st.bytes = static_cast<int64_t>((n + 1) * 4);
  tr_->iallreduce(r.grads.data(), n + 1, ctx_.stage_comm(a.stage), &r.group.allreduce);
  const int reps = ir_->layout.replicas_of(a.stage);
  stats_.bytes_allreduce += st.bytes;
  // what a ring allreduce puts on the network from this rank: 2 (r-1)/r of the payload
  stats_.bytes_allreduce_network += 2 * (reps - 1) * st.bytes / reps;
}

/// OPTIMIZER_STEP: waits for the stage's allreduce and sums tied gradients (unless the
/// rank's GRAD_NORM did), clips the gradients (train.clip_grad_norm), applies them to the
/// version the IR names (in place, or to a copy when the latest version is still read:
/// stashing), clears the accumulator, reports, and after the rank's last update of a version
/// asks the trainer whether to cut a checkpoint there.
void Executor::on_optimizer_step(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const size_t n = static_cast<size_t>(r.stage->num_params());
  const int64_t stride = ir_->version_stride(a.stage);
  reduce_group(r, a);
  UpdateReport rep;
  const float coefficient = clip_coefficient_of(r, a, &rep.grad_norm);
  const bool skip = r.group.skip || (cfg_.skip_nonfinite && !std::isfinite(rep.grad_norm));  // a non-finite norm: every stage
  rep.stage = a.stage;
  rep.lr = r.opt->current_lr();
  float* w = r.weights->begin_update(a.version);
  float* g = r.grads.data();
  if (!skip) {  // each range of the gradients is cleared, and in bf16 rounded, right after its update (in cache)
    apply_clip(be_, g, n, coefficient);
    WeightStore& store = *r.weights;
    const auto after = [&](size_t offset, size_t count) { be_.fill(g + offset, 0.0f, count), store.updated_range(offset, count); };
    r.opt->step(w, g, 1.0f / static_cast<float>(stride), after);
    be_.fill(g + n, 0.0f, 1);
  } else {
    r.opt->set_updates(r.opt->updates() + 1), ++stats_.skipped_updates;
    be_.fill(g, 0.0f, n + 1);
  }
  rep.minibatches = r.weights->latest_id();
  rep.loss_sum = r.group.loss;
  rep.samples = stride * cfg_.batch_size;
  rep.skipped = skip;
  r.group.loss = 0;
  r.group.nonfinite = r.group.reduced = r.group.skip = false;
  control_->on_update(rep);
  fault_at_step(ctx_.rank(), a.stage, rep.minibatches);
  if (st.i == st.last_update_of(a.version)) cut_at(a, rep.minibatches, st);
}

// A checkpoint cut right after this rank's last update of `version` (absolute), if the
// trainer asks for one; messages in flight across it are saved by their senders.
void Executor::cut_at(const Action& a, int64_t version, Step& st) {
  const CutAction cut_action = control_->at_boundary(version);
  if (cut_action == CutAction::none) return;
  const Cut cut = consistent_cut(st.ir, version - rt(a.stage).weights->base());
  PT_CHECK(cut.position[static_cast<size_t>(ctx_.rank())] == st.i + 1, "cut position mismatch");
  std::vector<WorkerState> states = capture(st.ir, st.i + 1, cut.crossing[static_cast<size_t>(ctx_.rank())]);
  control_->save(states);
  if (cut_action == CutAction::checkpoint_and_stop) {
    quiesce(st.ir, cut);
    st.stopped = true;
  }
}

}  // namespace pt
