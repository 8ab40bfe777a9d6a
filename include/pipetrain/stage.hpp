// A stage: the model slice [first, last) on one backend, its flat parameter layout, its
// flat state layout (batch-norm running statistics: not parameters), the per-microbatch
// activation slot (stage input, every layer output, every layer's saved extras, and, for
// split-backward schedules, the output gradient of every layer whose weight gradient runs
// later and the composites' split regions), and forward/backward/inference over a slot.
// Used by the executor, the profiler and the sequential emulator alike.
// Recomputation (parallel.recompute, recompute.hpp) changes what a unit in flight keeps:
// slot_geometry() is the one sizing rule, shared with the memory model.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/recompute.hpp"

namespace pt {

// Called between layers so outstanding messages make progress while computing.
struct PollHook {
  void (*fn)(void*) = nullptr;
  void* arg = nullptr;
  void operator()() const { if (fn) fn(arg); }
};

class Stage {
 public:
  // keep_output_grads: slots also hold each splitting layer's output gradient, from
  // backward_input until backward_weight (the zero-bubble schedules). recompute: what a unit
  // in flight keeps (slot_geometry). precision: the stage's precision policy
  // (train.precision): its layers run their products in it (LayerCtx::precision, set on every
  // layer's context), keep the operands only their products read as bf16 views under bf16 (so
  // the slot layout depends on it: Layer::kept_floats), and under bf16 every activation and
  // input gradient between layers is rounded to bf16 values (statistics, the loss and
  // parameter gradients stay fp32).
  Stage(Backend& be, const Model& model, int first, int last, int64_t train_mb, int64_t eval_mb,
        bool keep_output_grads = false, Recompute recompute = Recompute::none, Precision precision = Precision::fp32);

  // The per-unit buffers of layers [first, last) under a recompute mode, in floats per sample:
  //  - layout: the slot the layers compute in (stage input, every output, saved extras, and
  //    with keep_output_grads the kept output gradients and split regions), with each layer's
  //    saved extras as the mode has them (Layer::aux_floats; full: as none);
  //  - unit: what one unit in flight keeps from its F until its B (or W): the layout under
  //    none and selective; under full only the stage's input and output (the output stays for
  //    the SEND_ACT, the input for the recompute), the layout then living in a recompute
  //    buffer only while a B runs, or from an I until its W;
  //  - recompute: a recompute buffer (the layout) under full, else 0.
  // The memory model (memory_model.hpp) multiplies unit by units in flight and recompute by
  // the recompute buffers (1 + max_between_i_and_w).
  //  - kept: of layout, the output gradients kept for the split backward (0 under full,
  //    where they live in the recompute buffer).
  struct SlotGeometry {
    int64_t layout = 0, unit = 0, recompute = 0, input = 0, output = 0, kept = 0;
  };
  static SlotGeometry slot_geometry(const Model& model, int first, int last, bool keep_output_grads, Recompute mode,
                                    Precision p = Precision::fp32);
  Recompute recompute() const { return mode_; }
  // The mode's layout equals another's (selective without a selective layer is none's):
  // what a checkpoint's units need to come back as they were.
  Recompute layout_mode(Recompute mode) const;

  // What a stage of layers [first, last) allocates, in floats, computed from the model alone:
  // the constructor allocates exactly this, and the memory model (memory_model.hpp) asks for
  // it before anything is allocated. Change a buffer here and both follow.
  struct Geometry {
    int64_t num_params = 0, num_state = 0;
    int64_t slot_floats = 0;       // one unit's activation slot (train_mb samples): SlotGeometry::unit
    int64_t slot_kept_floats = 0;  // of which the output gradients kept for the split backward (dout, split regions)
    int64_t layout_floats = 0;     // the layout the layers compute in (SlotGeometry::layout x train_mb)
    int64_t recompute_floats = 0;  // one recompute buffer under full (the layout), else 0
    int64_t scratch_floats = 0;    // each of the two ping-pong scratch buffers: max(train_mb, eval_mb) x max_numel
    int64_t eval_aux_floats = 0;   // saved extras of an evaluation forward: eval_mb x aux_max (at least 1)
    int64_t work_floats = 0;       // the layers' workspace: max(train_mb, eval_mb) x work_max
    int64_t eval_loss_floats = 0;  // last stage: the loss layer's evaluation output, eval_mb x its numel
    int64_t max_numel = 0, aux_max = 0, work_max = 0;  // per sample, over the slice's inputs and outputs / layers
  };
  static Geometry geometry(const Model& model, int first, int last, int64_t train_mb, int64_t eval_mb,
                           bool keep_output_grads, Recompute mode = Recompute::none, Precision p = Precision::fp32);
  // Floats per sample layer l adds to a slot (its output unless a view, its saved extras, and
  // with keep_output_grads its split region and kept output gradient) in the layout of `mode`
  // (full: as none) under precision p; *kept: of which kept gradients. A slot is the stage
  // input plus this over the slice's layers.
  static int64_t slot_floats_per_sample(const Layer& layer, bool keep_output_grads, Recompute mode, Precision p,
                                        int64_t* kept = nullptr);

  int first() const { return first_; }
  int last() const { return last_; }
  bool has_model_input() const { return first_ == 0; }
  bool has_loss() const { return model_.layer(last_ - 1).is_loss(); }
  const Model& model() const { return model_; }
  Backend& backend() const { return be_; }
  int64_t num_params() const { return num_params_; }
  int64_t param_offset(int layer) const { return offset_[static_cast<size_t>(layer - first_)]; }
  // The ranges {offset, count} of the flat parameters that the layers read only as product
  // operands under bf16 (ParamTensor::operand_only), each trimmed to even ends (whole words
  // of a packed bf16 array), for WeightStore::set_operand_only.
  std::vector<std::pair<int64_t, int64_t>> operand_only_ranges() const;
  Shape in_shape() const { return model_.layer(first_).in_shape(); }
  Shape out_shape() const { return model_.layer(last_ - 1).out_shape(); }
  int64_t train_mb() const { return train_mb_; }
  int64_t eval_mb() const { return eval_mb_; }

  // Fill the slice's flat parameters on the host: layer l at param_offset(l), keyed by (seed, l).
  void init_params(float* host, uint64_t seed) const;

  // Running state (Layer::num_state): one flat buffer of num_state() floats per stage
  // replica, layer l's region at state_offset(l). Callers pass its base as LayerCtx::state
  // to forward(), forward_layer() and infer(); the stage points each layer at its region.
  // forward() and infer() require it when num_state() > 0; forward_layer() (the profiler)
  // runs without (training forward then updates no running statistics).
  int64_t num_state() const { return num_state_; }
  int64_t state_offset(int layer) const { return state_offset_[static_cast<size_t>(layer - first_)]; }
  void init_state(float* host) const;  // initial values (running mean 0, variance 1)

  struct Slot {
    float* input = nullptr;
    std::vector<float*> out, aux;  // per layer of the slice
    std::vector<float*> dout;      // per layer: its output gradient kept for backward_weight, or null
    int32_t* labels = nullptr;     // last stage only
  };
  // The layout (the slot layers compute in), for train_mb samples, and its carving.
  int64_t slot_floats() const { return slot_floats_; }
  Slot carve(float* base, int32_t* labels) const;
  // A unit's slot (SlotGeometry::unit), for train_mb samples: the layout, or under full the
  // stage's input and output only (out holds only the output, at out.back(); no aux).
  int64_t unit_floats() const { return unit_floats_; }
  Slot carve_unit(float* base, int32_t* labels) const;
  // A unit's slot as `mode` laid it out (contents of unit_floats() under that mode, host
  // memory), as this stage's unit slot: the same contents when the layouts agree; the input
  // and output of a whole layout when this stage recomputes fully. Empty when neither
  // (the whole layout cannot come from an input and output without running the forward).
  std::vector<float> unit_from(const std::vector<float>& contents, Recompute mode) const;
  bool can_restore_units(Recompute mode) const;  // whether unit_from(., mode) gives a slot
  int64_t unit_floats_under(Recompute mode) const;  // the floats of a slot `mode` laid out, at this precision
  const float* output(const Slot& s) const { return s.out.back(); }
  float* output(Slot& s) const { return s.out.back(); }

  void forward(const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const;
  // Full recomputation before a backward: the training forward again into a recompute
  // buffer's layout, with the same kernels, dropout keys and weights as the unit's FORWARD,
  // but no running state touched (batch norm normalises with the batch statistics as in any
  // training forward and leaves its running statistics alone: ctx.state is ignored), so the
  // layout holds bitwise what the FORWARD computed.
  void recompute_forward(const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const;
  // grads accumulate. dy: gradient of the stage output (ignored when the stage ends in the
  // loss). dx: where the gradient of the stage input goes (null: not needed).
  void backward(const Slot& s, ParamView params, float* grads, const float* dy, float* dx, const LayerCtx& ctx,
                int64_t n, PollHook poll) const;
  // The split backward (needs keep_output_grads): backward_input computes dx and every
  // layer's output gradient (kept in the slot; layers that do not split accumulate their
  // grads here); backward_weight then accumulates the splitting layers' grads. Together
  // they give bitwise what backward gives.
  void backward_input(const Slot& s, ParamView params, float* grads, const float* dy, float* dx, const LayerCtx& ctx,
                      int64_t n, PollHook poll) const;
  void backward_weight(const Slot& s, ParamView params, float* grads, const LayerCtx& ctx, int64_t n, PollHook poll) const;
  bool keeps_output_grads() const { return keep_dout_; }
  // The stage's precision policy (the constructor's).
  Precision precision() const { return precision_; }
  bool activation_bf16() const { return precision_ == Precision::bf16; }
  // Under bf16: whether the stage rounds layer l's output (every layer's but a view's and the
  // loss's) and its input gradient after the layer ran, except where the layer passes values
  // (Layer::passes_values) that a layer of this stage below it (output) or above it (input
  // gradient) made, which are bf16 already. False in fp32.
  bool rounds_output(int l) const;
  bool rounds_input_grad(int l) const;

  // Forward without keeping activations (evaluation): returns the last non-loss output,
  // in scratch owned by the stage, valid until the next call.
  const float* infer(const float* x, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const;
  // Last stage: the loss layer's evaluation (Layer::eval_loss) of infer()'s output x: summed
  // loss, correct predictions and predictions scored (n * labels_per_sample(): n for a
  // classifier, n*T for a language model); labels in ctx.labels, the stage's state in ctx.state.
  void eval_loss(const float* x, ParamView params, const LayerCtx& ctx, int64_t n, double* loss_sum, int64_t* correct,
                 int64_t* scored) const;

  // One layer of the slice, for the profiler.
  void forward_layer(int layer, const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n) const;
  void backward_layer(int layer, const Slot& s, ParamView params, float* grads, const float* dy, float* dx,
                      const LayerCtx& ctx, int64_t n) const;
  // One splitting layer's weight-gradient half alone, for the profiler (dy: its output gradient).
  void backward_weight_layer(int layer, const Slot& s, ParamView params, float* grads, const float* dy,
                             const LayerCtx& ctx, int64_t n) const;
  // Bytes of activations a unit in flight keeps per sample (its slot: the unit geometry).
  int64_t slot_bytes_per_sample() const { return unit_floats_ / train_mb_ * 4; }
  int64_t max_numel() const { return max_numel_; }

 private:
  Backend& be_;
  const Model& model_;
  int first_, last_;
  int first_compute_;  // the stage's first layer that is not a view (last_ if none)
  int last_compute_;   // its last one (first_ - 1 if none)
  int64_t train_mb_, eval_mb_;
  bool keep_dout_;
  Recompute mode_;
  Precision precision_ = Precision::fp32;
  int64_t unit_floats_ = 0;
  // the layout under `mode` at base (carve: this stage's own mode)
  Slot carve_layout(float* base, int32_t* labels, Recompute mode) const;
  void run_forward(const Slot& s, ParamView params, const LayerCtx& ctx, int64_t n, PollHook poll) const;
  void round_output(int l, float* y, int64_t n) const;
  void round_input_grad(int l, float* dx, int64_t n) const;
  int64_t num_params_ = 0, slot_floats_ = 0, max_numel_ = 0, num_state_ = 0;
  std::vector<int64_t> offset_, state_offset_;
  // The context layer l runs with: the stage's workspace, its own state region.
  LayerCtx layer_ctx(const LayerCtx& ctx, int l) const;
  void require_state(const LayerCtx& ctx) const;
  // The buffer that receives layer l's input gradient in a backward pass: the output
  // gradient slot of the next non-view layer below l when it splits, else scratch; null when
  // nothing reads it (input_grad_needed).
  float* grad_target(const Slot& s, int l, const float* cur_dy, float* dx) const;
  bool input_grad_needed(int l, const float* dx) const;  // false: only views below and no dx
  mutable Buffer scratch_a_, scratch_b_, eval_aux_, eval_loss_, work_;
};

}  // namespace pt
