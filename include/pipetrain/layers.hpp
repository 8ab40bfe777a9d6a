// Layers: forward and backward of one link of the model chain on a backend, with the
// parameters they declare, the extra state they keep for backward, and their FLOPs.
// Layers are stateless between calls: every buffer is passed in, so many microbatches
// (and weight versions) can be in flight at once. Backward has two halves for the
// zero-bubble schedules: backward_input (the input gradient) and backward_weight (the
// weight gradient); a layer that does not split runs its fused backward as the first half.
//
// Every layer type registers itself once, beside its class (PT_REGISTER_LAYER in its .cpp,
// as LAMMPS registers a pair style): its deck keys over its own settings struct (read by the
// deck, layer_spec.hpp), their checks, docs/DECK.md, the factory and the PyTorch equivalent
// all come from that entry. Adding a layer type with new keys touches only its .cpp.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/keys.hpp"
#include "pipetrain/layer_spec.hpp"
#include "pipetrain/recompute.hpp"
#include "pipetrain/shape.hpp"

namespace pt {

struct ParamTensor {
  std::string name;             // "weight", "bias"
  std::vector<int64_t> shape;   // PyTorch layout, e.g. linear weight [out, in]
  int64_t offset = 0;           // floats from the start of the layer's parameters
  int64_t size = 0;
  // Tensor parallelism (parallel.tensor = t > 1, LayerSpec::tensor_parts): how this rank's
  // tensor is cut from the whole one. split_dim -1: replicated (every rank holds all of it);
  // else dimension split_dim of the whole tensor, viewed as split_chunks equal chunks (the
  // attention's in_proj: q, k and v, 3), each chunk cut into t equal parts, of which rank k
  // holds part k of every chunk, in chunk order. full_shape: the whole tensor's (= shape
  // when replicated or t = 1).
  int split_dim = -1;
  int split_chunks = 1;
  std::vector<int64_t> full_shape = {};
  // Under a bf16 policy the layer reads this tensor only as a product's operand
  // (ParamView::operand(bf16)), never its fp32 values: the stage's compute copy then makes
  // only its bf16 array (WeightStore::set_operand_only). A layer that reads the fp32 values
  // of a tensor in any pass (a bias, a norm, an embedding, a tied weight) leaves it false.
  bool operand_only = false;
};

// The tensor-parallel cut of parameter tensor p (ParamTensor::split_dim) between the whole
// tensor `full` (p.full_shape, row-major) and rank k's part of it (p.shape) of t parts:
// shard <- full (take) or full <- shard (place, the other parts untouched).
void take_shard(const ParamTensor& p, int t, int k, const float* full, float* shard);
void place_shard(const ParamTensor& p, int t, int k, const float* shard, float* full);

class Layer;
// The same over a whole layer (every tensor of Layer::params), between its whole form
// (layout of `whole`, the layer of one process) and the parts of a split: `part`'s own part
// (its LayerSpec::tensor_parts and tensor_rank) taken from the whole layer's values, and the
// whole laid out from every rank's part (parts[k], rank k's; a part has the same layout on
// every rank). A layer that does not split is copied whole (from parts[0]).
void take_layer_part(const Layer& part, const Layer& whole, const float* whole_values, float* out);
void place_layer_parts(const Layer& part, const Layer& whole, const std::vector<const float*>& parts, float* out);

// The tensor group of a stage replica (parallel.tensor = t): the t ranks that each hold one
// part of the split layers' weights and run the same units in the same order. Layers reach
// it through LayerCtx::tensor (null: t = 1). sum() is the all-reduce of Megatron's f and g
// operators: x (count floats in backend memory) becomes the sum of every rank's x, added in
// tensor-rank order, so every rank holds the same bits.
class TensorGroup {
 public:
  virtual ~TensorGroup() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void sum(Backend& be, float* x, int64_t count) const = 0;
  // x <- its elementwise maximum over the group (order-free: every rank the same bits); the
  // vocabulary-parallel head's row maxima.
  virtual void max(Backend& be, float* x, int64_t count) const = 0;
  // Megatron's reduce-scatter (sequence parallelism): x (count = t * part floats in backend
  // memory) -> its part [k part, (k + 1) part) holds the group's sum there, the same bits as
  // sum() gives; the rest of x is unspecified. Default: sum() of the whole.
  virtual void sum_part(Backend& be, float* x, int64_t count, int64_t part) const {
    (void)part;
    sum(be, x, count);
  }
  // all[k * count + i] = rank k's mine[i] (host memory): the gradient norm's per-tensor sums.
  virtual void gather(const double* mine, double* all, int64_t count) const = 0;
  // x (count floats in backend memory) holds this rank's part [k part, (k + 1) part) (the last
  // part shorter); afterwards every part (a pipeline message scattered over the group).
  virtual void allgather(Backend& be, float* x, int64_t count, int64_t part) const = 0;
};

struct LayerCtx {
  Backend& be;
  uint64_t seed = 0;              // run.seed (dropout keys)
  int64_t sample0 = 0;            // global id of the microbatch's first sample
  bool training = true;
  const int32_t* labels = nullptr;  // loss layer: labels in backend memory
  float loss_scale = 1.0f;        // loss layer backward: dL/d(per-sample loss), 1/batch_size
  // Running state (batch-norm statistics; not parameters). To a layer: its own region of
  // num_state() floats, updated by a training forward and read by an inference forward.
  // To a Stage: the stage's state buffer (Stage::num_state() floats); the stage points each
  // layer at base + Stage::state_offset(layer). Null when there is none.
  float* state = nullptr;
  // Scratch for the duration of one forward or backward call: at least
  // n * workspace_floats(mode) floats. The Stage provides it; contents are not kept.
  float* work = nullptr;
  // parallel.recompute = "selective" on this layer's stage: the layer's aux region (and split
  // region) has its selective layout, and its backward recomputes what that layout drops. Set
  // by the Stage only for layers that recompute_selectively(); false in evaluation.
  bool selective = false;
  // The precision policy of the products (train.precision): a layer passes it to every GEMM
  // and convolution it runs, and under bf16 keeps the operands only its products read as bf16
  // views (operand_dtype, dtype.hpp). The backend holds no precision of its own.
  Precision precision = Precision::fp32;
  // x holds bf16 values: under a bf16 policy, once a layer before this one on the chain (not
  // a view) has computed them (the Stage rounds every such output; boundary_at_layer). A layer
  // may then keep x as a bf16 copy and read it for x exactly. Set by the Stage.
  bool x_bf16 = false;
  // The tensor group of the stage replica (parallel.tensor > 1), null otherwise: split layers
  // (LayerSpec::tensor_parts > 1) sum their row-parallel outputs and column-parallel input
  // gradients over it (tensor_sum, layer_util.hpp).
  const TensorGroup* tensor = nullptr;
};

class Layer {
 public:
  Layer(const LayerSpec& spec, Shape in) : spec_(spec), in_(in), out_(in) {}
  virtual ~Layer() = default;

  const LayerSpec& spec() const { return spec_; }
  int index() const { return spec_.index; }
  const std::string& type() const { return spec_.type; }
  const std::string& name() const { return spec_.name; }
  Shape in_shape() const { return in_; }
  Shape out_shape() const { return out_; }

  virtual std::vector<ParamTensor> params() const { return {}; }
  int64_t num_params() const;
  // Fill this layer's parameters (host memory); keyed by (seed, layer index) only.
  virtual void init_params(float* host, uint64_t seed) const {}
  // Floats per sample kept for backward besides the layer's input and output, with every
  // tensor fp32 (the most a layer keeps; kept_floats below is what it keeps under a policy).
  virtual int64_t aux_per_sample() const { return 0; }
  // Floats per sample of scratch (LayerCtx::work) a forward or backward call needs.
  virtual int64_t workspace_per_sample() const { return 0; }
  // The convolutions it runs (geometry; with a bias), for the memory model's kernel bytes
  // (Backend::conv_kernel_bytes); with `keeps_layout`, its activations lie in inner_layout's
  // layout (the residual block's), else in NCHW.
  struct ConvUse {
    WindowGeom g;
    bool bias = false;
    bool keeps_layout = false;
  };
  virtual std::vector<ConvUse> convolutions() const { return {}; }
  // The layout a layer that keeps its activations in its convolutions' layout uses for n
  // samples on backend be in precision p (Backend::conv_layout); NCHW by default.
  virtual ImageLayout inner_layout(Backend& be, int64_t n, Precision p) const { return ImageLayout::nchw; }
  // Split backward of a composite layer (transformer_block, residual_block, attention,
  // lm_head): floats per sample that backward_input writes and backward_weight reads (the
  // output gradients of its inner linear/conv/normalisation pieces). When a Stage keeps
  // output gradients, a layer's aux region holds n * (aux_per_sample() +
  // split_aux_per_sample()) floats and this extra part starts at aux + n * aux_per_sample();
  // the fused backward keeps it in LayerCtx::work instead.
  virtual int64_t split_aux_per_sample() const { return 0; }
  // Selective recomputation (parallel.recompute = "selective"; docs/ARCHITECTURE.md
  // "Recomputation"): a layer that returns true keeps selective_aux_per_sample() floats per
  // sample instead of aux_per_sample() when LayerCtx::selective is set, and recomputes what it
  // dropped in its backward from what it kept, with the same kernels in the same order, so
  // every gradient is bitwise the same. Its split region is then
  // selective_split_aux_per_sample() (what W needs of the recomputed tensors stays there from
  // I until W) and its scratch selective_workspace_per_sample(). Other layers treat selective
  // as none.
  virtual bool recomputes_selectively() const { return false; }
  virtual int64_t selective_aux_per_sample() const { return aux_per_sample(); }
  virtual int64_t selective_split_aux_per_sample() const { return split_aux_per_sample(); }
  virtual int64_t selective_workspace_per_sample() const { return workspace_per_sample(); }
  // The sizes under a recompute mode, the ones the Stage's slot layout and scratch use
  // (full: the layer runs as under none, in the recompute buffer).
  bool selective_in(Recompute mode) const { return mode == Recompute::selective && recomputes_selectively(); }
  // What the layer keeps under a recompute layout (selective) and the dtype of the operands
  // that only its products read (operand_dtype(LayerCtx::precision)): a layer that keeps such
  // operands as bf16 views under a bf16 policy carves each of count values per sample as
  // operand_floats(count, bf16) floats (dtype.hpp: half) and says so here. Default: the fp32
  // sizes above (a layer that keeps no product-only operand).
  virtual int64_t kept_floats(bool selective, DType operands) const {
    return selective ? selective_aux_per_sample() : aux_per_sample();
  }
  // The aux region per sample the Stage's slot layout gives the layer (and its forward and
  // backward carve), under a recompute mode and a precision policy.
  int64_t aux_floats(Recompute mode, Precision p = Precision::fp32) const {
    return kept_floats(selective_in(mode), operand_dtype(p));
  }
  int64_t split_aux_floats(Recompute mode) const {
    return selective_in(mode) ? selective_split_aux_per_sample() : split_aux_per_sample();
  }
  int64_t workspace_floats(Recompute mode) const {
    return selective_in(mode) ? selective_workspace_per_sample() : workspace_per_sample();
  }
  // Running state that is not a parameter (batch-norm running mean and variance): not
  // trained, not in the gradient, but checkpointed and kept per replica.
  virtual int64_t num_state() const { return 0; }
  virtual void init_state(float* host) const {}  // its initial values (host memory)
  // Tied parameters: the name of the layer whose token-embedding weight (its tensor 0,
  // [V, D]) parameter tensor `tensor` of this layer mirrors, or "" (lm_head with `tie`).
  // Both layers hold their own copy, initialised identically; the runtime sums the two
  // gradients before each update so the copies stay equal.
  virtual std::string tied_to(int tensor) const { return ""; }
  // A loss: the number of classes its labels range over, and labels per sample (1; T for a
  // sequence loss, whose LayerCtx::labels hold n * T ids).
  virtual int64_t loss_classes() const { return in_.numel(); }
  virtual int64_t labels_per_sample() const { return 1; }
  // Output is the input reinterpreted (flatten): no buffer, no work.
  virtual bool is_view() const { return false; }
  // Its output holds only values of its input and zeros, and its input gradient only values
  // of its output gradient and zeros (ReLU): bf16 values in stay bf16 values out, so a stage
  // under bf16 does not round them again where a layer of its own made them
  // (Stage::round_output, round_input_grad).
  virtual bool passes_values() const { return false; }
  virtual bool is_loss() const { return false; }

  virtual void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const = 0;
  // The fused backward: dw accumulates (+=); dx is overwritten; it is null for the first
  // layer of the model.
  virtual void backward(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy,
                        float* dx, float* dw, const float* aux, int64_t n) const = 0;

  // Split backward. A layer whose weight gradient can run apart from its input gradient
  // returns true from splits_backward(): backward_input then computes dx only and
  // backward_weight accumulates dw only, each bitwise what the fused backward computes.
  // Defaults: the fused backward in backward_input, nothing in backward_weight.
  virtual bool splits_backward() const { return false; }
  // backward_input may write the split region after aux (split_aux_per_sample) and nothing else of aux.
  virtual void backward_input(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy,
                              float* dx, float* dw, float* aux, int64_t n) const {
    backward(c, w, x, y, dy, dx, dw, aux, n);
  }
  virtual void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy,
                               float* dw, const float* aux, int64_t n) const {}

  // Evaluation of a loss layer with parameters (lm_head): the sum over the n samples of the
  // per-sample loss into *loss_sum and the number of correct predictions (argmax == label,
  // per label: n * labels_per_sample() of them) into *correct; c.labels holds the labels,
  // aux is scratch of n * aux_per_sample() floats, y of n floats.
  virtual void eval_loss(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n,
                         double* loss_sum, int64_t* correct) const;

  virtual double flops_forward() const { return static_cast<double>(out_.numel()); }  // per sample
  virtual double flops_backward() const { return 2.0 * static_cast<double>(in_.numel()); }
  // Model FLOPs per sample of the attention scores (QK^T and PV), forward and backward, as
  // PaLM counts them: 12 T^2 D for self-attention over T positions of width D, the causal mask
  // not discounted; 0 for layers without attention. Model FLOPs utilisation adds it to 6 N
  // per token (model_flops_per_sample in run_outputs.cpp).
  virtual double attention_model_flops() const { return 0.0; }
  // Values of the weight matrices its products read (RowLinear: y = x W^T and dx = dy W): in
  // bf16 the host backend keeps each also in oneDNN's layout for the input gradient dx = dy W
  // (kept_weight_layouts, backend.hpp), 2 bytes per value, which the memory model counts for
  // every layer but the model's first (it computes no input gradient).
  virtual int64_t product_weight_values() const { return 0; }
  // A split layer (LayerSpec::tensor_parts > 1): the sums over its tensor group a forward
  // runs, and the floats per sample they sum together; a backward (its input half) runs as
  // many of the same size (Megatron's g forward, f backward). The simulator costs them.
  virtual int tensor_sums() const { return 0; }
  virtual int64_t tensor_sum_floats() const { return 0; }

 protected:
  [[noreturn]] void shape_error(const std::string& msg) const;
  LayerSpec spec_;
  Shape in_, out_;
};

// ---- the layer registry -------------------------------------------------------------------

// A layer type's deck keys over its settings struct S (declared beside its class): the keys
// as the deck sees them (behind LayerSettings) and a maker of S with every default.
struct LayerKeys {
  std::vector<Key<LayerSettings>> keys;
  std::function<std::shared_ptr<LayerSettings>()> make = [] { return std::make_shared<LayerSettings>(); };
};
template <class S>
LayerKeys layer_keys(std::vector<Key<S>> keys) {
  static_assert(std::is_base_of_v<LayerSettings, S>, "a layer type's settings derive from LayerSettings");
  struct AsS {
    S& operator()(LayerSettings& b) const { return dynamic_cast<S&>(b); }
    const S& operator()(const LayerSettings& b) const { return dynamic_cast<const S&>(b); }
  };
  LayerKeys out;
  for (const Key<S>& k : keys) out.keys.push_back(rebind<LayerSettings>(k, AsS{}));
  out.make = [keys]() -> std::shared_ptr<LayerSettings> {
    auto s = std::make_shared<S>();
    for (const Key<S>& k : keys)
      if (k.info.def) k.set(*s, *k.info.def);
    return s;
  };
  return out;
}

struct LayerType {
  std::string name;     // the deck's `type`
  std::string doc;      // what it computes (docs/DECK.md, docs/MODELS.md)
  std::string pytorch;  // its exact PyTorch equivalent (docs/MODELS.md)
  LayerKeys keys;       // deck keys besides type and name (layer_keys<S>)
  bool loss = false;    // a loss: the last layer of the chain
  // Splits across the ranks of a tensor group (parallel.tensor): Model gives such a layer its
  // part (LayerSpec::tensor_parts, tensor_rank); every other layer is replicated there.
  bool splits_tensor = false;
  // Build the layer for its input shape; a shape that does not fit is a located error
  // (require_input helps); prev_desc says what produced the input.
  std::function<std::unique_ptr<Layer>(const LayerSpec&, const Shape& in, const std::string& prev_desc)> make;
};

bool register_layer_type(LayerType t);
#define PT_REGISTER_LAYER(id, ...) \
  namespace { [[maybe_unused]] const bool pt_layer_registered_##id = ::pt::register_layer_type(__VA_ARGS__); }
const LayerType* find_layer_type(const std::string& name);
std::vector<const LayerType*> layer_types();  // in registration-independent order (by name)
std::vector<std::string> known_layer_types();   // their names

// A layer's keys for its type with their values (defaults filled in), in the type's order:
// what weights.h5 records per layer and the effective deck prints.
std::vector<std::pair<std::string, KeyValue>> layer_settings(const LayerSpec& l);
// The value of one of them (tests, tools); a key its type does not have is an internal error.
KeyValue layer_setting(const LayerSpec& l, const std::string& key);
template <class T>
T layer_setting(const LayerSpec& l, const std::string& key) {
  return std::get<T>(layer_setting(l, key));
}

// For factories: the input must have this rank ("a flat [F]", "an image [C, H, W]"), else
// a located error naming the layer, the producer and its shape.
void require_input(const LayerSpec& s, const Shape& in, int rank, const char* what, const std::string& prev_desc);

// Build a layer for its input shape; a shape that does not fit is a located error.
std::unique_ptr<Layer> make_layer(const LayerSpec& spec, const Shape& in, const std::string& prev_desc);

}  // namespace pt
