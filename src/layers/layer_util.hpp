// Internal to src/layers: helpers the layer files share. The row maps (RowLinear, RowNorm)
// are the linear and layer-norm kernels of one layer applied to `rows` rows (samples, or
// every position of every sample), split into the halves of the split backward; the
// linear and layernorm layers and the composite blocks all use them, so a block's inner
// pieces compute exactly what the standalone layers do.
#pragma once
#include <cstdint>

#include "pipetrain/enum_names.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/layers.hpp"

namespace pt::layers {

// PyTorch's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), keyed by (seed, layer, tensor).
void init_uniform(float* host, int64_t count, float bound, uint64_t seed, int layer, int tensor);
// N(0, std^2) (GPT-2's initialisation: std 0.02), Box-Muller on two rng_uniform draws per
// value, keyed by (seed, layer, tensor).
void init_normal(float* host, int64_t count, float std, uint64_t seed, int layer, int tensor);
void init_constant(float* host, int64_t count, float v);

// The settings of a square window (conv2d, pooling): kernel, stride, padding.
struct WindowSettings : LayerSettings {
  int64_t kernel = 0, stride = 0, padding = 0;
};
// Their keys for a settings struct S with those members: kernel (required), stride (with
// its default) and padding (default 0), each with its doc.
template <class S>
std::vector<Key<S>> window_keys(const char* kernel_doc, int64_t stride_default, const char* stride_doc,
                                const char* padding_doc) {
  return {required_key<S>("kernel", &S::kernel, key_gt(0), kernel_doc),
          key<S>("stride", &S::stride, stride_default, key_gt(0), stride_doc),
          key<S>("padding", &S::padding, 0, key_ge(0), padding_doc)};
}
// Geometry of a square window over an image input; c_out = channels (0: c_in). A window that
// does not fit is a located shape error naming the layer.
WindowGeom window_geom(const LayerSpec& s, const WindowSettings& k, const Shape& in, int64_t channels);

// A square window over an image [c_in, h, w] with c_out output channels.
WindowGeom square_window(int64_t c_in, int64_t h, int64_t w, int64_t c_out, int64_t kernel, int64_t stride,
                         int64_t padding);

// The data must declare a vocabulary (embedding, lm_head): else a located error.
void require_vocabulary(const LayerSpec& s, int64_t at_least);
// A vocabulary-parallel layer (embedding, lm_head under parallel.tensor = t): V a multiple
// of t, else a located error.
void require_vocabulary_split(const LayerSpec& s);

// The batch-norm settings (batchnorm2d, residual_block): momentum and eps, and their keys
// for a settings struct S with those members.
struct BatchNormSettings : LayerSettings {
  double momentum = 0.1, eps = 1e-5;
};
template <class S>
std::vector<Key<S>> batchnorm_keys() {
  return {key<S>("momentum", &S::momentum, 0.1, key_between(0, 1), "running-statistics momentum (default 0.1)"),
          key<S>("eps", &S::eps, 1e-5, key_ge(1e-5), "epsilon (default 1e-5, cuDNN's minimum)")};
}
// Keys one after another (a type's own and a shared group).
template <class S>
std::vector<Key<S>> concat_keys(std::vector<Key<S>> a, std::vector<Key<S>> b) {
  for (Key<S>& k : b) a.push_back(std::move(k));
  return a;
}

// A located deck error about one key of a layer: "<where>: layer i 'name' (type): key
// 'model.layers[i].<key>': <msg>".
[[noreturn]] void key_error(const LayerSpec& s, const char* key, const std::string& msg);

// The fused backward of a composite: its split region (keep_per_sample floats per sample)
// at the start of the workspace, the context of its halves with the workspace after it.
struct KeepInWork {
  LayerCtx ctx;
  float* keep;
};
inline KeepInWork keep_in_work(const LayerCtx& c, int64_t keep_per_sample, int64_t n) {
  LayerCtx lc = c;
  lc.work = c.work + n * keep_per_sample;
  return {lc, c.work};
}

// Consecutive regions of n samples each in a buffer (aux, work, the split region).
struct Carve {
  float* p;
  int64_t n;
  float* take(int64_t per_sample) {
    float* r = p;
    p += n * per_sample;
    return r;
  }
};

// In bf16 a layer keeps the activations that only its linears read (their inputs, which the
// GEMMs round anyway) as bf16 views (operand_dtype(c.precision), dtype.hpp), written by their
// producer or converted in place by Backend::pack_bf16: the forward and the weight gradient
// then read 2-byte operands and convert nothing; the values are the same bf16 ones.
// x as a view of dtype t, converted in place first when t is bf16.
inline View to_dtype_in_place(Backend& be, DType t, float* x, int64_t count) {
  if (t == DType::bf16) be.pack_bf16(static_cast<size_t>(count), x, x);
  return {x, t};
}

// Megatron's split of a linear over a tensor group (parallel.tensor = t; LayerCtx::tensor).
// Column-parallel: this rank holds out rows of W (and of the bias), reads the whole input and
// writes its part of the output; its input gradient is its share of dx, summed over the group
// (the backward of Megatron's f operator). Row-parallel: it holds in columns of W, reads its
// part of the input, and its output is the group's sum (Megatron's g operator) plus the whole
// bias, which every rank holds. Within a layer a column-parallel linear feeds a row-parallel
// one, so one sum runs forward and one backward.
enum class TensorSplit { none, column, row };

}  // namespace pt::layers
namespace pt {
template <>
struct EnumNames<layers::TensorSplit> {
  static constexpr const char* names[] = {"none", "column", "row"};
};
}  // namespace pt
namespace pt::layers {

// x (count floats) <- its sum over the tensor group (TensorGroup::sum); an internal error
// when the layer is split and the context has no group.
void tensor_sum(const LayerCtx& c, float* x, int64_t count);
// x ([rows, cols], row-major) <- rows [part R, (part + 1) R) of its sum over the tensor group,
// R = rows / t (TensorGroup::sum_part; rows a multiple of t), the other rows unspecified.
// Returns those rows' first float.
float* tensor_sum_rows(const LayerCtx& c, float* x, int64_t rows, int64_t cols, int part);

// A split layer's part (LayerSpec::tensor_parts > 1) initialised as the whole layer is, then
// cut (take_shard): tensor-parallel runs start from the one-process weights.
void init_part_of_whole(const Layer& l, float* host, uint64_t seed);

// Parameter tensor p cut along dim into chunks x parts (ParamTensor::split_dim), whole shape `full`.
ParamTensor cut_tensor(ParamTensor p, int dim, int chunks, std::vector<int64_t> full);

// y[r, :] = x[r, :] W^T + b for W [out, in] (PyTorch layout), b [out] after W when bias;
// in and out are this rank's under a tensor split.
struct RowLinear {
  int64_t in = 0, out = 0;
  bool bias = true;
  TensorSplit split = TensorSplit::none;
  // Sequence parallelism (a transformer_block's sequence_parallel): the group's sum (a
  // row-parallel output, a column-parallel input gradient) is reduce-scattered over the rows,
  // so only part `part` of the t equal row blocks holds it (TensorGroup::sum_part) and the
  // other rows are left unspecified; a row-parallel bias is added to those rows only.
  bool scatter = false;
  int part = 0;
  int64_t size() const { return in * out + (bias ? out : 0); }
  // Products in c.precision; x, dy and y are f32 or bf16 views (bf16 under a bf16 policy only);
  // w is the weight, then the bias; the products read w.operand(the policy's operand dtype).
  void forward(const LayerCtx& c, ParamView w, CView x, View y, int64_t rows) const;
  void backward_input(const LayerCtx& c, ParamView w, CView dy, float* dx, int64_t rows) const;  // dx = dy W
  void backward_weight(const LayerCtx& c, CView x, CView dy, float* dw, int64_t rows) const;  // dW += dy^T x, db += column sums of dy
};

// Layer norm of each row over `cols` features, weight then bias [cols]; stats: 2 per row.
struct RowNorm {
  int64_t cols = 0;
  float eps = 1e-5f;
  int64_t size() const { return 2 * cols; }
  void forward(Backend& be, const float* w, const float* x, float* y, float* stats, int64_t rows) const {
    be.layernorm_forward(rows, cols, eps, x, w, w + cols, y, stats);
  }
  void backward_input(Backend& be, const float* w, const float* x, const float* stats, const float* dy, float* dx,
                      int64_t rows) const {
    if (dx) be.layernorm_backward(rows, cols, x, w, stats, dy, dx, nullptr, nullptr);
  }
  void backward_weight(Backend& be, const float* w, const float* x, const float* stats, const float* dy, float* dw,
                       int64_t rows) const {
    be.layernorm_backward(rows, cols, x, w, stats, dy, nullptr, dw, dw + cols);
  }
};

// Batch norm of NCHW batches per channel, weight then bias [C]; stats: 2 C floats per call
// (batch mean, 1/std); state: running mean then running variance [C] (null in training:
// not updated; inference needs it). Defined in batchnorm2d.cpp.
struct ChannelNorm {
  int64_t C = 0, HW = 0;
  float eps = 1e-5f, momentum = 0.1f;
  ImageLayout layout = ImageLayout::nchw;  // of x, y, dy, dx (and add)
  int64_t size() const { return 2 * C; }
  void init_state(float* host) const;  // mean 0, variance 1
  // y = bn(x), then + add (n C HW values, when given), then ReLU (relu): FusedKernels::
  // batchnorm_forward, one pass over y on the host
  // (y_nchw: y in NCHW while x and add lie in `layout`, BnArgs::y_nchw; y and add may be
  // bf16 views where FusedKernels::batchnorm_forward takes them)
  void forward(const LayerCtx& c, ParamView w, const float* x, View y, float* stats, float* state, int64_t n,
               CView add = CView(nullptr), bool relu = false, bool y_nchw = false) const;
  void backward_input(Backend& be, const float* w, const float* x, const float* stats, const float* dy, View dx,
                      int64_t n) const;
  void backward_weight(Backend& be, const float* w, const float* x, const float* stats, const float* dy, float* dw,
                       int64_t n) const;
  // both halves in one call (one pass for their channel sums; the same bits as the two
  // calls): dx (a bf16 view: Backend::batchnorm_backward's), and dweight, dbias into dw
  // (skipped when dw is null)
  void backward(Backend& be, const float* w, const float* x, const float* stats, const float* dy, View dx, float* dw,
                int64_t n) const;
};

// Inverted dropout of `features` values per sample with the stream (seed, layer, slot):
// slot 0 is the dropout layer's; composites use 1, 2, ... for their inner dropouts.
// p = 0 or evaluation: y = x (a copy unless in place). A split layer's part (part k of
// `parts`, its features the k-th equal slice of the whole layer's per sample: the heads of an
// attention part) draws the whole layer's mask for its slice: element j of sample s is the
// whole's element k features + j, i.e. the backend's element j of "sample" (s parts + k).
void dropout_apply(const LayerCtx& c, int layer, uint64_t slot, float p, int64_t features, const float* x, float* y,
                   int64_t n, int part = 0, int parts = 1);
void dropout_grad(const LayerCtx& c, int layer, uint64_t slot, float p, int64_t features, const float* dy, float* dx,
                  int64_t n, int part = 0, int parts = 1);

}  // namespace pt::layers
