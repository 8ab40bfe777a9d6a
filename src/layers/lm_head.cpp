// The language-model head, a loss layer: the final layer norm over D, the linear map to
// the vocabulary V (the data's classes), and softmax cross entropy of every position
// against its next-token label (LayerCtx::labels: n * T ids). The per-sample output is the
// mean over the T positions of the token loss, so the trainer's mean over samples is the
// mean token loss in nats; backward ignores dy and scales by loss_scale / T. Parameters:
// norm.weight [D], norm.bias [D], weight [V, D], then bias [V] when `bias = true`. With
// `tie = "<embedding layer>"` its weight mirrors that embedding's token weight: its own
// copy, initialised with the embedding's key (seed, that layer, tensor 0); tied_to(2)
// names it and the runtime sums the two gradients. Backward splits: the input half keeps
// the norm's output gradient; the weight half recomputes the logits' gradient from the
// saved probabilities (the same kernel: bitwise). Under a bf16 policy the logits are a bf16
// tensor, as autocast's head product is, and the layer keeps them instead of the fp32
// probabilities (half the bytes); the backward computes the probabilities again from them
// (the forward's kernel on the same values: the same probabilities, bit for bit).
// Under parallel.tensor = t it is vocabulary-parallel (Megatron's parallel cross entropy):
// tensor rank k holds the rows [k V/t, (k + 1) V/t) of the weight (and bias), a column-
// parallel linear, and computes its logits only; the loss comes from the shard primitives
// (backend.hpp) around the group's maximum and one sum of the row sums and the label's logit,
// which it keeps (3 floats per token) so that the backward recomputes no collective. Its
// input gradient is the group's sum (the column split's f). Every rank holds the same loss.
#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct LmHeadSettings : LayerSettings {
  std::string tie;
  bool bias = false;
  double eps = 1e-5;
  std::string tie_name() const override { return tie; }
};

class LmHead final : public Layer {
 public:
  LmHead(const LayerSpec& s, Shape in)
      : Layer(s, in), k_(s.settings_as<LmHeadSettings>()), T_(in.T()), D_(in.D()), V_(s.classes / s.tensor_parts),
        c0_(s.tensor_rank * V_), split_(s.tensor_parts > 1), norm_{D_, static_cast<float>(k_.eps)},
        lin_{D_, V_, k_.bias, split_ ? TensorSplit::column : TensorSplit::none} {
    out_ = Shape::vec(1);
  }

  bool is_loss() const override { return true; }
  int64_t loss_classes() const override { return spec_.classes; }
  int64_t labels_per_sample() const override { return T_; }
  std::string tied_to(int tensor) const override { return tensor == 2 ? k_.tie : ""; }

  std::vector<ParamTensor> params() const override {
    const int64_t V = spec_.classes;
    std::vector<ParamTensor> p = {{"norm.weight", {D_}, 0, D_}, {"norm.bias", {D_}, D_, D_},
                                  cut_tensor({"weight", {V_, D_}, 2 * D_, V_ * D_}, 0, 1, {V, D_})};
    if (k_.bias) p.push_back(cut_tensor({"bias", {V_}, 2 * D_ + V_ * D_, V_}, 0, 1, {V}));
    return p;
  }
  // norm (1, 0); weight N(0, 0.02), keyed as the tied embedding's token weight when tied;
  // bias 0
  void init_params(float* host, uint64_t seed) const override {
    if (split_) return init_part_of_whole(*this, host, seed);
    init_constant(host, D_, 1.0f);
    init_constant(host + D_, D_, 0.0f);
    if (spec_.tie_layer >= 0) init_normal(host + 2 * D_, V_ * D_, 0.02f, seed, spec_.tie_layer, 0);
    else init_normal(host + 2 * D_, V_ * D_, 0.02f, seed, index(), 2);
    if (k_.bias) init_constant(host + 2 * D_ + V_ * D_, V_, 0.0f);
  }
  // norm output (read by the linear only: a bf16 view in half the floats under a bf16
  // policy), norm stats, the probabilities (fp32) or the bf16 logits, token losses; split:
  // the group's row maxima, row sums and label logits
  int64_t kept_floats(bool, DType op) const override {
    return operand_floats(T_ * D_, op) + 2 * T_ + operand_floats(T_ * V_, op) + T_ + (split_ ? 3 * T_ : 0);
  }
  int64_t aux_per_sample() const override { return kept_floats(false, DType::f32); }
  int64_t split_aux_per_sample() const override { return T_ * D_; }
  int64_t workspace_per_sample() const override { return T_ * V_ + T_ * D_ + T_; }

  // the workspace: the logits (T V), then the split region of the fused backward (T D), which
  // under a bf16 policy first holds the norm's fp32 output, packed into the kept z, then the
  // token losses of the backward's recomputed probabilities (T; bf16 only)
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const override {
    const DType op = operand_dtype(c.precision);
    Carve s{aux, n};
    float* z = s.take(operand_floats(T_ * D_, op));
    float* st = s.take(2 * T_);
    float* pl = s.take(operand_floats(T_ * V_, op));  // probabilities, or bf16 logits
    float* tok = s.take(T_);
    float* normed = op == DType::bf16 ? c.work + n * T_ * V_ : z;
    norm_.forward(c.be, w, x, normed, st, n * T_);
    if (op == DType::bf16) c.be.pack_bf16(static_cast<size_t>(n * T_ * D_), normed, z);
    if (split_) {
      lin_.forward(c, w + 2 * D_, CView{z, op}, op == DType::bf16 ? View{pl, op} : View{c.work, op}, n * T_);
      if (op == DType::bf16) c.be.unpack_bf16(static_cast<size_t>(n * T_ * V_), pl, c.work);
      shard_loss(c, s.take(3 * T_), tok, op == DType::bf16 ? c.work : pl, n);
    } else if (op == DType::bf16) {
      lin_.forward(c, w + 2 * D_, CView{z, op}, View{pl, op}, n * T_);
      probabilities(c, pl, tok, n);
    } else {
      lin_.forward(c, w + 2 * D_, CView{z, op}, c.work, n * T_);  // logits
      c.be.softmax_xent_forward(n * T_, V_, c.work, c.labels, tok, pl);
    }
    c.be.mean_rows(n, T_, tok, y);
  }
  void eval_loss(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n, double* loss_sum,
                 int64_t* correct) const override {
    forward(c, w, x, y, aux, n);
    *loss_sum = c.be.sum(static_cast<size_t>(n), y);
    if (split_) return shard_correct(c, aux, n, correct);
    // the fp32 logits forward left in the workspace, or the kept bf16 ones' values
    if (operand_dtype(c.precision) == DType::bf16)
      c.be.unpack_bf16(static_cast<size_t>(n * T_ * V_), kept(c, aux, n), c.work);
    *correct = c.be.count_correct(n * T_, V_, c.work, c.labels);
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float*, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    float* keep = c.work + n * T_ * V_;
    input_half(c, w, x, dx, aux, keep, n);
    weight_half(c, w, x, dw, aux, keep, n, false);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float* x, const float*, const float*, float* dx, float*,
                      float* aux, int64_t n) const override {
    input_half(c, w, x, dx, aux, aux + n * aux_floats(Recompute::none, c.precision), n);
  }
  void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float*, const float*, float* dw,
                       const float* aux, int64_t n) const override {
    weight_half(c, w, x, dw, aux, aux + n * aux_floats(Recompute::none, c.precision), n, true);
  }
  double flops_forward() const override {
    return 8.0 * T_ * D_ + 2.0 * T_ * D_ * V_ + 4.0 * T_ * V_;
  }
  double flops_backward() const override { return 12.0 * T_ * D_ + 4.0 * T_ * D_ * V_ + 2.0 * T_ * V_; }
  int64_t product_weight_values() const override { return V_ * D_; }
  // the input gradient's sum of [T, D] backward (forward: the 3 T floats of the loss; the
  // simulator costs one [T, D] each way)
  int tensor_sums() const override { return split_ ? 1 : 0; }
  int64_t tensor_sum_floats() const override { return split_ ? T_ * D_ : 0; }

 private:
  // the kept norm output's floats per sample (z), then the stats and the probabilities
  int64_t z_floats(const LayerCtx& c) const { return operand_floats(T_ * D_, operand_dtype(c.precision)); }
  const float* kept(const LayerCtx& c, const float* aux, int64_t n) const { return aux + n * (z_floats(c) + 2 * T_); }
  // the probabilities of the bf16 logits into the workspace (their fp32 values, then softmax
  // in place), the token losses into tok
  void probabilities(const LayerCtx& c, const float* logits, float* tok, int64_t n) const {
    c.be.unpack_bf16(static_cast<size_t>(n * T_ * V_), logits, c.work);
    c.be.softmax_xent_forward(n * T_, V_, c.work, c.labels, tok, c.work);
  }
  // the group's row maxima, then its row sums and label logits (split_: 3 n T floats)
  const float* stats(const LayerCtx& c, const float* aux, int64_t n) const {
    return kept(c, aux, n) + n * (operand_floats(T_ * V_, operand_dtype(c.precision)) + T_);
  }
  // The loss of this part's fp32 logits (n T rows of V_) across the group: the row maxima
  // and sums into st (kept), the token losses into tok, this part's probabilities into probs
  // (may alias the logits).
  void shard_loss(const LayerCtx& c, float* st, float* tok, float* probs, int64_t n) const {
    const int64_t r = n * T_;
    PT_CHECK(c.tensor, "the vocabulary-parallel head ran without its tensor group");
    c.be.softmax_xent_shard_max(r, V_, c.work, st);
    c.tensor->max(c.be, st, r);
    c.be.softmax_xent_shard_sums(r, V_, c0_, c.work, c.labels, st, st + r);
    tensor_sum(c, st + r, 2 * r);
    c.be.softmax_xent_shard_finish(r, V_, c.work, st, st + r, tok, probs);
  }
  // Tokens whose label's logit is the row's maximum over the group (an exact tie counts as
  // correct; the unsplit count takes the lowest index).
  void shard_correct(const LayerCtx& c, const float* aux, int64_t n, int64_t* correct) const {
    const int64_t r = n * T_;
    std::vector<float> h(static_cast<size_t>(3 * r));
    c.be.to_host(h.data(), stats(c, aux, n), h.size());
    *correct = 0;
    for (int64_t i = 0; i < r; ++i) *correct += h[static_cast<size_t>(2 * r + i)] >= h[static_cast<size_t>(i)];
  }
  // dlogits = loss_scale / T * (probs - onehot(labels)) into the workspace
  void logits_grad(const LayerCtx& c, const float* aux, int64_t n) const {
    const float scale = c.loss_scale / static_cast<float>(T_);
    if (split_) return shard_logits_grad(c, aux, n, scale);
    if (operand_dtype(c.precision) == DType::f32)
      return c.be.softmax_xent_backward(n * T_, V_, kept(c, aux, n), c.labels, scale, c.work);
    probabilities(c, kept(c, aux, n), c.work + n * (T_ * V_ + T_ * D_), n);
    c.be.softmax_xent_backward(n * T_, V_, c.work, c.labels, scale, c.work);
  }
  // split_: the probabilities of this part (kept in fp32, or from the kept bf16 logits and the
  // group's kept maxima and sums: no collective), then their gradient, into the workspace
  void shard_logits_grad(const LayerCtx& c, const float* aux, int64_t n, float scale) const {
    const int64_t r = n * T_;
    const float* probs = kept(c, aux, n);
    if (operand_dtype(c.precision) == DType::bf16) {
      const float* st = stats(c, aux, n);
      c.be.unpack_bf16(static_cast<size_t>(r * V_), probs, c.work);
      c.be.softmax_xent_shard_finish(r, V_, c.work, st, st + r, c.work + n * (T_ * V_ + T_ * D_), c.work);
      probs = c.work;
    }
    c.be.softmax_xent_shard_backward(r, V_, c0_, probs, c.labels, scale, c.work);
  }
  void input_half(const LayerCtx& c, ParamView w, const float* x, float* dx, const float* aux, float* dz,
                  int64_t n) const {
    logits_grad(c, aux, n);
    lin_.backward_input(c, w + 2 * D_, c.work, dz, n * T_);
    norm_.backward_input(c.be, w, x, aux + n * z_floats(c), dz, dx, n * T_);
  }
  void weight_half(const LayerCtx& c, ParamView w, const float* x, float* dw, const float* aux, const float* dz,
                   int64_t n, bool recompute) const {
    if (recompute) logits_grad(c, aux, n);
    lin_.backward_weight(c, CView{aux, operand_dtype(c.precision)}, c.work, dw + 2 * D_, n * T_);
    norm_.backward_weight(c.be, w, x, aux + n * z_floats(c), dz, dw, n * T_);
  }

  LmHeadSettings k_;
  int64_t T_, D_, V_, c0_;  // this part's vocabulary rows [c0_, c0_ + V_)
  bool split_;
  RowNorm norm_;
  RowLinear lin_;
};

LayerType lm_head_type() {
  LayerType t;
  t.name = "lm_head";
  t.doc = "language-model head and loss on [T, D]: layer norm, linear to the vocabulary, next-token cross entropy "
          "averaged over the T positions";
  t.pytorch = "F.cross_entropy(Linear(D, V, bias)(LayerNorm(D, eps)(x)).view(-1, V), labels.view(-1)) (mean over tokens)";
  t.loss = true;
  t.splits_tensor = true;
  using S = LmHeadSettings;
  t.keys = layer_keys<S>(
      {key("tie", &S::tie, "", "name of the embedding layer whose token weight this head's weight mirrors (default \"\": untied)"),
       key("bias", &S::bias, false, "add a bias to the logits (default false)"),
       key("eps", &S::eps, 1e-5, key_gt(0), "layer-norm epsilon (default 1e-5)")});
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 2, "a sequence [T, D]", prev);
    require_vocabulary(s, 2);
    require_vocabulary_split(s);
    return std::make_unique<LmHead>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(lm_head, lm_head_type())

}  // namespace pt::layers
