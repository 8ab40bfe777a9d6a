// Token plus learned position embedding, the first layer of a language model: T token ids
// ([T] tokens, exact floats) -> [T, D] = weight[token] + pos[position]. Parameters weight
// [V, D] (V = the data's vocabulary, Model's classes) and pos [T, D], GPT-2's N(0, 0.02)
// keyed by (seed, layer, tensor). Backward has no input gradient (token ids are not
// differentiable: dx, if asked for, is zero) and a deterministic scatter-add into the token
// rows; it splits as I = nothing, W = the scatter-add. Under parallel.tensor = t it is
// vocabulary-parallel (Megatron's VocabParallelEmbedding): tensor rank k holds the token rows
// [k V/t, (k + 1) V/t) and the whole position table; its forward writes its rows' tokens
// (zero for the others), rank 0 adds the positions, and the group's sum gives every rank the
// whole [T, D] (at most two non-zero terms per element: the one-process bits). Its backward
// scatters into its own rows only; the position gradient is equal on every rank (dy is).
#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct EmbeddingSettings : LayerSettings {
  int64_t dim = 0;
};

class Embedding final : public Layer {
 public:
  Embedding(const LayerSpec& s, Shape in)
      : Layer(s, in), V_(s.classes / s.tensor_parts), D_(s.settings_as<EmbeddingSettings>().dim), v0_(s.tensor_rank * V_) {
    out_ = Shape::seq(in.T(), D_);
  }

  std::vector<ParamTensor> params() const override {
    const int64_t T = in_.T();
    return {cut_tensor({"weight", {V_, D_}, 0, V_ * D_}, 0, 1, {spec_.classes, D_}), {"pos", {T, D_}, V_ * D_, T * D_}};
  }
  void init_params(float* host, uint64_t seed) const override {
    if (spec_.tensor_parts > 1) return init_part_of_whole(*this, host, seed);
    int t = 0;
    for (auto& p : params()) init_normal(host + p.offset, p.size, 0.02f, seed, index(), t++);
  }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float*, int64_t n) const override {
    const bool pos = spec_.tensor_rank == 0;  // rank 0 adds the positions once
    c.be.embedding_forward(n, in_.T(), D_, x, v0_, V_, w, pos ? w + V_ * D_ : nullptr, y);
    if (spec_.tensor_parts > 1) tensor_sum(c, y, n * out_.numel());
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    backward_input(c, w, x, y, dy, dx, dw, nullptr, n);
    backward_weight(c, w, x, y, dy, dw, aux, n);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView, const float*, const float*, const float*, float* dx, float*,
                      float*, int64_t n) const override {
    if (dx) c.be.fill(dx, 0.0f, static_cast<size_t>(n * in_.numel()));
  }
  void backward_weight(const LayerCtx& c, ParamView, const float* x, const float*, const float* dy, float* dw,
                       const float*, int64_t n) const override {
    c.be.embedding_backward(n, in_.T(), D_, x, v0_, V_, dy, dw, dw + V_ * D_);
  }
  double flops_forward() const override { return static_cast<double>(out_.numel()); }
  double flops_backward() const override { return 2.0 * out_.numel(); }
  // the forward's sum of [T, D] (none backward: the simulator costs one each way)
  int tensor_sums() const override { return spec_.tensor_parts > 1 ? 1 : 0; }
  int64_t tensor_sum_floats() const override { return spec_.tensor_parts > 1 ? out_.numel() : 0; }

 private:
  int64_t V_, D_, v0_;  // this part's vocabulary rows [v0_, v0_ + V_)
};

LayerType embedding_type() {
  LayerType t;
  t.name = "embedding";
  t.doc = "token embedding (vocabulary = the data's classes) plus learned position embedding: [T] tokens -> [T, dim]";
  t.pytorch = "torch.nn.Embedding(V, dim)(tokens) + torch.nn.Embedding(T, dim)(arange(T)) (GPT-2's wte + wpe)";
  t.keys = layer_keys<EmbeddingSettings>({required_key("dim", &EmbeddingSettings::dim, key_gt(0), "model width D")});
  t.splits_tensor = true;
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    if (!in.is_tokens)
      fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (embedding): expects [T] tokens input (data.source = \"text\" or \"tokens\"), but " +
                                prev + " outputs " + in.str(), true);
    require_vocabulary(s, 1);
    require_vocabulary_split(s);
    return std::make_unique<Embedding>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(embedding, embedding_type())

}  // namespace pt::layers
