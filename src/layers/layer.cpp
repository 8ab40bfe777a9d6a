// The layer registry, the factory, and the pieces shared by all layers (initialisers,
// row maps, dropout streams, the default loss evaluation).
#include <algorithm>
#include <cmath>
#include <memory>

#include "pipetrain/error.hpp"
#include "layer_util.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/registry.hpp"
#include "pipetrain/rng.hpp"

namespace pt {
namespace {
NamedRegistry<LayerType>& registry() { return NamedRegistry<LayerType>::instance(); }
}  // namespace

bool register_layer_type(LayerType t) {
  PT_CHECK(t.make, "layer type '" << t.name << "' registered without a factory");
  return registry().add(std::move(t), "layer type");
}
const LayerType* find_layer_type(const std::string& name) { return registry().find(name); }
std::vector<const LayerType*> layer_types() { return registry().all(); }
std::vector<std::string> known_layer_types() { return registry().names(); }

std::vector<std::pair<std::string, KeyValue>> layer_settings(const LayerSpec& l) {
  const LayerType* t = find_layer_type(l.type);
  PT_CHECK(t && l.settings, "layer " << l.index << " '" << l.name << "': unregistered type " << l.type << " or no settings");
  std::vector<std::pair<std::string, KeyValue>> out;
  for (const Key<LayerSettings>& k : t->keys.keys) out.emplace_back(k.info.name, k.get(*l.settings));
  return out;
}

KeyValue layer_setting(const LayerSpec& l, const std::string& key) {
  for (auto& [k, v] : layer_settings(l))
    if (k == key) return v;
  PT_CHECK(false, "a " << l.type << " layer has no key '" << key << "'");
  return {};
}

int64_t Layer::num_params() const {
  int64_t n = 0;
  for (auto& p : params()) n += p.size;
  return n;
}

// The softmax cross entropy of flat logits x against one label per sample; aux holds the
// probabilities (the loss layer's saved extra).
void Layer::eval_loss(const LayerCtx& c, ParamView, const float* x, float* y, float* aux, int64_t n,
                      double* loss_sum, int64_t* correct) const {
  const int64_t classes = in_.numel();
  c.be.softmax_xent_forward(n, classes, x, c.labels, y, aux);
  *loss_sum = c.be.sum(static_cast<size_t>(n), y);
  *correct = c.be.count_correct(n, classes, x, c.labels);
}

void Layer::shape_error(const std::string& msg) const {
  fail(Exit::bad_input,
       spec_.where + ": layer " + std::to_string(spec_.index) + " '" + spec_.name + "' (" + spec_.type + "): " + msg,
       true);
}

void require_input(const LayerSpec& s, const Shape& in, int rank, const char* what, const std::string& prev_desc) {
  if (in.rank == rank && !in.is_tokens) return;
  fail(Exit::bad_input,
       s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): expects " + what +
           " input, but " + prev_desc + " outputs " + in.str() + (rank == 1 && !in.is_tokens ? "; add a flatten layer before it" : ""),
       true);
}

namespace {
// The contiguous runs of rank k's part of p: f(offset in the whole tensor, offset in the
// part, floats), in the part's order.
template <class F>
void shard_runs(const ParamTensor& p, int t, int k, F f) {
  const std::vector<int64_t>& full = p.full_shape.empty() ? p.shape : p.full_shape;
  if (p.split_dim < 0 || t == 1) return f(0, 0, p.size);
  const size_t dim = static_cast<size_t>(p.split_dim);
  int64_t outer = 1, inner = 1;
  for (size_t i = 0; i < full.size(); ++i) (i < dim ? outer : inner) *= i == dim ? 1 : full[i];
  const int64_t len = full[dim], chunk = len / p.split_chunks, part = chunk / t;
  PT_CHECK(part * t * p.split_chunks == len, "tensor " << p.name << ": dimension " << dim << " of " << len
                                                       << " does not cut into " << p.split_chunks << " x " << t);
  int64_t at = 0;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t ch = 0; ch < p.split_chunks; ++ch, at += part * inner)
      f((o * len + ch * chunk + k * part) * inner, at, part * inner);
  PT_CHECK(at == p.size, "tensor " << p.name << ": its part holds " << p.size << " floats, the cut " << at);
}
}  // namespace

void take_shard(const ParamTensor& p, int t, int k, const float* full, float* shard) {
  shard_runs(p, t, k, [&](int64_t f, int64_t s, int64_t n) { std::copy(full + f, full + f + n, shard + s); });
}
void place_shard(const ParamTensor& p, int t, int k, const float* shard, float* full) {
  shard_runs(p, t, k, [&](int64_t f, int64_t s, int64_t n) { std::copy(shard + s, shard + s + n, full + f); });
}

namespace {
// The tensors of a part and of the whole layer, pairwise.
std::pair<std::vector<ParamTensor>, std::vector<ParamTensor>> paired_tensors(const Layer& part, const Layer& whole) {
  std::pair<std::vector<ParamTensor>, std::vector<ParamTensor>> t{part.params(), whole.params()};
  PT_CHECK(t.first.size() == t.second.size(), "layer " << part.index() << ": its part and the whole differ in tensors");
  return t;
}
}  // namespace

void take_layer_part(const Layer& part, const Layer& whole, const float* whole_values, float* out) {
  const auto [ps, ws] = paired_tensors(part, whole);
  for (size_t i = 0; i < ps.size(); ++i)
    take_shard(ps[i], part.spec().tensor_parts, part.spec().tensor_rank, whole_values + ws[i].offset, out + ps[i].offset);
}

void place_layer_parts(const Layer& part, const Layer& whole, const std::vector<const float*>& parts, float* out) {
  const auto [ps, ws] = paired_tensors(part, whole);
  const int t = part.spec().tensor_parts;
  PT_CHECK(static_cast<int>(parts.size()) >= t, "layer " << part.index() << ": " << parts.size() << " parts of " << t);
  for (size_t i = 0; i < ps.size(); ++i)
    for (int k = 0; k < t; ++k) place_shard(ps[i], t, k, parts[static_cast<size_t>(k)] + ps[i].offset, out + ws[i].offset);
}

namespace layers {

void init_uniform(float* host, int64_t count, float bound, uint64_t seed, int layer, int tensor) {
  const uint64_t key = rng_key(seed, Stream::init, static_cast<uint64_t>(layer), static_cast<uint64_t>(tensor));
  for (int64_t i = 0; i < count; ++i) host[i] = (2.0f * rng_uniform(key, static_cast<uint64_t>(i)) - 1.0f) * bound;
}

void init_normal(float* host, int64_t count, float std, uint64_t seed, int layer, int tensor) {
  const uint64_t key = rng_key(seed, Stream::init, static_cast<uint64_t>(layer), static_cast<uint64_t>(tensor));
  const double two_pi = 6.283185307179586476925;
  for (int64_t i = 0; i < count; ++i) {
    const double u1 = 1.0 - static_cast<double>(rng_uniform(key, static_cast<uint64_t>(2 * i)));  // (0, 1]
    const double u2 = static_cast<double>(rng_uniform(key, static_cast<uint64_t>(2 * i + 1)));
    host[i] = static_cast<float>(std * std::sqrt(-2.0 * std::log(u1)) * std::cos(two_pi * u2));
  }
}

void init_constant(float* host, int64_t count, float v) {
  for (int64_t i = 0; i < count; ++i) host[i] = v;
}

void key_error(const LayerSpec& s, const char* key, const std::string& msg) {
  fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): key 'model.layers[" +
                            std::to_string(s.index) + "]." + key + "': " + msg, true);
}

// The weight as the policy's products read it (ParamView::operand: its bf16 array in bf16).
void RowLinear::forward(const LayerCtx& c, ParamView w, CView x, View y, int64_t rows) const {
  const float* b = bias ? static_cast<const float*>(w + out * in) : nullptr;
  const CView W = w.operand(operand_dtype(c.precision));
  if (split != TensorSplit::row) return c.be.fused().linear_forward(rows, in, out, x, W, b, y, c.precision);
  PT_CHECK(!y.bf16(), "a row-parallel linear writes fp32 (its output is summed over the tensor group)");
  c.be.fused().linear_forward(rows, in, out, x, W, nullptr, y, c.precision);
  if (scatter) {
    float* mine = tensor_sum_rows(c, y.data, rows, out, part);
    if (b) c.be.bias_add_rows(mine, b, rows / c.tensor->size(), out);
    return;
  }
  tensor_sum(c, y.data, rows * out);
  if (b) c.be.bias_add_rows(y.data, b, rows, out);
}
void RowLinear::backward_input(const LayerCtx& c, ParamView w, CView dy, float* dx, int64_t rows) const {
  if (!dx) return;
  c.be.gemm(false, false, rows, in, out, 1.0f, dy, out, w.operand(operand_dtype(c.precision)), in, 0.0f, dx, in,
            c.precision);
  if (split != TensorSplit::column) return;
  if (scatter) tensor_sum_rows(c, dx, rows, in, part);
  else tensor_sum(c, dx, rows * in);
}

void tensor_sum(const LayerCtx& c, float* x, int64_t count) {
  PT_CHECK(c.tensor, "a tensor-parallel layer ran without its tensor group (LayerCtx::tensor)");
  if (c.tensor->size() > 1) c.tensor->sum(c.be, x, count);
}

float* tensor_sum_rows(const LayerCtx& c, float* x, int64_t rows, int64_t cols, int part) {
  PT_CHECK(c.tensor, "a sequence-parallel layer ran without its tensor group (LayerCtx::tensor)");
  const int64_t t = c.tensor->size(), R = rows / t;
  PT_CHECK(rows % t == 0, "sequence parallelism: " << rows << " rows do not split over " << t << " tensor ranks");
  if (t > 1) c.tensor->sum_part(c.be, x, rows * cols, R * cols);
  return x + part * R * cols;
}

ParamTensor cut_tensor(ParamTensor p, int dim, int chunks, std::vector<int64_t> full) {
  p.split_dim = dim, p.split_chunks = chunks, p.full_shape = std::move(full);
  return p;
}

void init_part_of_whole(const Layer& l, float* host, uint64_t seed) {
  LayerSpec whole = l.spec();
  whole.tensor_parts = 1, whole.tensor_rank = 0;
  const std::unique_ptr<Layer> w = make_layer(whole, l.in_shape(), "the same input");
  std::vector<float> all(static_cast<size_t>(w->num_params()));
  w->init_params(all.data(), seed);
  take_layer_part(l, *w, all.data(), host);
}
void RowLinear::backward_weight(const LayerCtx& c, CView x, CView dy, float* dw, int64_t rows) const {
  c.be.gemm(true, false, out, in, rows, 1.0f, dy, out, x, in, 1.0f, dw, in, c.precision);
  if (bias) c.be.bias_grad_rows(dy, dw + out * in, rows, out);
}

void dropout_apply(const LayerCtx& c, int layer, uint64_t slot, float p, int64_t features, const float* x, float* y,
                   int64_t n, int part, int parts) {
  if (!c.training || p == 0.0f) return c.be.copy(y, x, static_cast<size_t>(n * features));
  const uint64_t key = rng_key(c.seed, Stream::dropout, static_cast<uint64_t>(layer), slot);
  if (parts == 1) return c.be.dropout_forward(n, features, p, key, c.sample0, x, y);
  for (int64_t s = 0; s < n; ++s)
    c.be.dropout_forward(1, features, p, key, (c.sample0 + s) * parts + part, x + s * features, y + s * features);
}

void dropout_grad(const LayerCtx& c, int layer, uint64_t slot, float p, int64_t features, const float* dy, float* dx,
                  int64_t n, int part, int parts) {
  if (p == 0.0f) return c.be.copy(dx, dy, static_cast<size_t>(n * features));
  const uint64_t key = rng_key(c.seed, Stream::dropout, static_cast<uint64_t>(layer), slot);
  if (parts == 1) return c.be.dropout_backward(n, features, p, key, c.sample0, dy, dx);
  for (int64_t s = 0; s < n; ++s)
    c.be.dropout_backward(1, features, p, key, (c.sample0 + s) * parts + part, dy + s * features, dx + s * features);
}

WindowGeom square_window(int64_t c_in, int64_t h, int64_t w, int64_t c_out, int64_t kernel, int64_t stride,
                         int64_t padding) {
  WindowGeom g;
  g.c_in = c_in, g.h_in = h, g.w_in = w, g.c_out = c_out;
  g.kernel = kernel, g.stride = stride, g.padding = padding;
  g.h_out = (h + 2 * padding - kernel) / stride + 1;
  g.w_out = (w + 2 * padding - kernel) / stride + 1;
  return g;
}

WindowGeom window_geom(const LayerSpec& s, const WindowSettings& k, const Shape& in, int64_t channels) {
  const int64_t hp = in.h() + 2 * k.padding, wp = in.w() + 2 * k.padding;
  if (k.kernel > hp || k.kernel > wp)
    fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): kernel " +
                              std::to_string(k.kernel) + " does not fit the input " + in.str() + " with padding " +
                              std::to_string(k.padding), true);
  return square_window(in.c(), in.h(), in.w(), channels > 0 ? channels : in.c(), k.kernel, k.stride, k.padding);
}

void require_vocabulary(const LayerSpec& s, int64_t at_least) {
  if (s.classes >= at_least) return;
  fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type +
                            "): the data declares no vocabulary of at least " + std::to_string(at_least) +
                            " tokens (classes = " + std::to_string(s.classes) + ")", true);
}

void require_vocabulary_split(const LayerSpec& s) {
  if (s.classes % s.tensor_parts == 0) return;
  fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type +
                            "): the vocabulary of " + std::to_string(s.classes) + " tokens (the data's classes) "
                            "must be a multiple of parallel.tensor = " + std::to_string(s.tensor_parts) +
                            " (each tensor rank holds V / t rows of it; pad the vocabulary)", true);
}

}  // namespace layers

std::unique_ptr<Layer> make_layer(const LayerSpec& s, const Shape& in, const std::string& prev_desc) {
  const LayerType* t = find_layer_type(s.type);
  PT_CHECK(t, "make_layer: unregistered type " << s.type);
  return t->make(s, in, prev_desc);
}

}  // namespace pt
