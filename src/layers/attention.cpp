// Causal multi-head self-attention: the shared core (attention_core.hpp) and the
// `attention` layer on [T, D] (no residual, no norm: torch.nn.MultiheadAttention with a
// causal mask). Backward splits: dx (I) and the projection gradients (W); the in_proj
// output gradient is kept between them.
#include <algorithm>
#include <cmath>

#include "attention_core.hpp"

namespace pt::layers {

namespace {
constexpr uint64_t kProbDropout = 3;  // dropout stream slot of the attention probabilities
}

AttentionCore::AttentionCore(int64_t T, int64_t D, int64_t heads, float p, int layer, int parts, int rank,
                             bool scatter)
    : T_(T), D_(D), E_(D / parts), H_(heads / parts), dh_(D / heads), p_(p),
      scale_(1.0f / std::sqrt(static_cast<float>(D / heads))), layer_(layer), parts_(parts), rank_(rank),
      qkv_{D, 3 * (D / parts), true, parts > 1 ? TensorSplit::column : TensorSplit::none},
      proj_{D / parts, D, true, parts > 1 ? TensorSplit::row : TensorSplit::none} {
  qkv_.scatter = proj_.scatter = scatter && parts > 1;
  qkv_.part = proj_.part = rank;
}

void AttentionCore::init_params(float* host, uint64_t seed, int layer, int first_tensor) const {
  PT_CHECK(E_ == D_, "AttentionCore::init_params of a tensor-parallel part (init_part_of_whole initialises those)");
  init_normal(host, 3 * D_ * D_, 0.02f, seed, layer, first_tensor);
  init_constant(host + 3 * D_ * D_, 3 * D_, 0.0f);
  float* w = host + qkv_.size();
  init_normal(w, D_ * D_, 0.02f, seed, layer, first_tensor + 2);
  init_constant(w + D_ * D_, D_, 0.0f);
}

std::vector<ParamTensor> AttentionCore::params(const std::string& pre, int64_t at) const {
  const int64_t D = D_, E = E_;
  std::vector<ParamTensor> p = {{pre + "in_proj_weight", {3 * E, D}, at, 3 * E * D},
                                {pre + "in_proj_bias", {3 * E}, at + 3 * E * D, 3 * E},
                                {pre + "out_proj.weight", {D, E}, at + qkv_.size(), D * E},
                                {pre + "out_proj.bias", {D}, at + qkv_.size() + D * E, D}};
  if (E == D) return p;
  p[0] = cut_tensor(p[0], 0, 3, {3 * D, D});  // q, k and v rows of this part's heads
  p[1] = cut_tensor(p[1], 0, 3, {3 * D});
  p[2] = cut_tensor(p[2], 1, 1, {D, D});      // their columns of the output projection
  return p;
}

// The composed path's workspace, one size for every case: fp32 probabilities there (under a
// bf16 policy before they are packed, or unpacked; under selective recomputed there), and
// under a bf16 policy 3 T D more for the fp32 head-major q, k, v and T D for the merged
// outputs before they are packed (the fused kernel needs none of it).
int64_t AttentionCore::forward_work() const {
  const int64_t TT = H_ * T_ * T_, TD = T_ * E_;
  return 3 * TD + std::max(3 * TD, TT + (p_ > 0 ? TT : 0) + 2 * TD);
}
int64_t AttentionCore::backward_work() const { return 8 * T_ * E_ + (p_ > 0 ? 3 : 2) * H_ * T_ * T_; }

void AttentionCore::heads_gemm(const LayerCtx& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                               const float* A, const float* B, float* C, int64_t n) const {
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  c.be.gemm_strided_batched(ta, tb, M, N, K, alpha, A, lda, M * K, B, ldb, K * N, 0.0f, C, N, M * N, n * H_, c.precision);
}

// The probabilities after dropout: P itself, or its dropped copy in buf.
const float* AttentionCore::dropped(const LayerCtx& c, const float* P, float* buf, int64_t n) const {
  if (!c.training || p_ == 0.0f) return P;
  dropout_apply(c, layer_, kProbDropout, p_, H_ * T_ * T_, P, buf, n, part(), parts_);
  return buf;
}

void AttentionCore::probabilities(const LayerCtx& c, const float* q, const float* k, float* P, int64_t n) const {
  heads_gemm(c, false, true, T_, T_, dh_, scale_, q, k, P, n);  // scores
  c.be.causal_softmax_forward(n * H_, T_, P, P);
  if (c.precision == Precision::bf16) c.be.round_bf16(static_cast<size_t>(n * H_ * T_ * T_), P, P);
}

AttentionGeom AttentionCore::geom(const LayerCtx& c, int64_t n) const {
  AttentionGeom g;
  g.n = n, g.T = T_, g.H = H_, g.dh = dh_, g.scale = scale_, g.precision = c.precision;
  return g;
}

// The saved q, k, v are token-major [n, T, 3, H, dh] on the fused path and head-major
// [3, n, H, T, dh] on the composed one (bf16 views in half the floats under a bf16 policy:
// products' operands only); fused() is fixed per backend and layer, so forward and backward
// agree.
void AttentionCore::forward(const LayerCtx& c, ParamView w, CView x, float* y, float* saved, int64_t n) const {
  Backend& be = c.be;
  const int64_t TD = T_ * E_;
  const DType op = operand_dtype(c.precision);
  Carve s{saved, n};
  float* qkv = s.take(operand_floats(3 * TD, op));
  const View P{c.selective ? nullptr : s.take(operand_floats(H_ * T_ * T_, op)), op};  // selective: not kept
  const View O{s.take(operand_floats(TD, op)), op};
  if (fused(be)) {
    qkv_.forward(c, w, x, View{qkv, op}, n * T_);
    be.fused().attention_forward(geom(c, n), CView{qkv, op}, P, O);
  } else {
    composed_forward(c, w, x, qkv, P, O, n);
  }
  proj_.forward(c, w + qkv_.size(), O, y, n * T_);
}

void AttentionCore::composed_forward(const LayerCtx& c, ParamView w, CView x, float* qkv, View P, View O,
                                     int64_t n) const {
  Backend& be = c.be;
  const int64_t TD = T_ * E_;
  const bool bf16 = O.bf16();
  Carve in{c.work, n};
  float* qkvh = bf16 ? in.take(3 * TD) : qkv;  // head-major fp32 q, k, v
  float* proj = in.take(3 * TD);
  qkv_.forward(c, w, x, proj, n * T_);  // [n, T, 3, H, dh]
  be.heads_split(n, T_, 3, H_, dh_, proj, qkvh);
  if (bf16) be.pack_bf16(static_cast<size_t>(n * 3 * TD), qkvh, qkv);
  const float *q = qkvh, *k = qkvh + n * TD, *v = qkvh + 2 * n * TD;
  Carve wk{bf16 ? proj : c.work, n};  // the projections are consumed: that workspace is free again
  float* Pf = P.data && !bf16 ? P.data : wk.take(H_ * T_ * T_);  // the probabilities in fp32 slots
  probabilities(c, q, k, Pf, n);
  if (bf16 && P.data) be.pack_bf16(static_cast<size_t>(n * H_ * T_ * T_), Pf, P.data);
  float* pd_buf = p_ > 0 ? wk.take(H_ * T_ * T_) : nullptr;
  float* Oh = wk.take(TD);
  heads_gemm(c, false, false, T_, dh_, T_, 1.0f, dropped(c, Pf, pd_buf, n), v, Oh, n);
  float* merged = bf16 ? wk.take(TD) : O.data;
  be.heads_merge(n, T_, 1, H_, dh_, Oh, merged);
  if (bf16) be.pack_bf16(static_cast<size_t>(n * TD), merged, O.data);
}

void AttentionCore::input_half(const LayerCtx& c, ParamView w, CView dy, float* dx, const float* saved,
                               float* keep, int64_t n) const {
  Backend& be = c.be;
  const int64_t TD = T_ * E_, TT = T_ * T_;
  const DType op = operand_dtype(c.precision);
  const float* qkvh = saved;
  Carve wk{c.work, n};
  float* dO = wk.take(TD);
  float* dOh = wk.take(TD);
  float* dP = wk.take(H_ * TT);
  float* pd_buf = p_ > 0 ? wk.take(H_ * TT) : nullptr;
  float* dqkvh = wk.take(3 * TD);
  // selective: recomputed below (or in the fused kernel)
  const CView Pk{c.selective ? nullptr : saved + n * operand_floats(3 * TD, op), op};
  proj_.backward_input(c, w + qkv_.size(), dy, dO, n * T_);
  if (fused(be)) {
    be.fused().attention_backward(geom(c, n), CView{qkvh, op}, Pk, dO, View{keep, op});
    return qkv_.backward_input(c, w, CView{keep, op}, dx, n * T_);
  }
  if (op == DType::bf16) {  // the composed path reads fp32 head-major q, k, v
    float* unpacked = wk.take(3 * TD);
    be.unpack_bf16(static_cast<size_t>(n * 3 * TD), qkvh, unpacked);
    qkvh = unpacked;
  }
  const float *q = qkvh, *k = qkvh + n * TD, *v = qkvh + 2 * n * TD;
  const float* P = Pk.data;
  if (!P || Pk.bf16()) {  // fp32 probabilities: unpacked, or recomputed (selective)
    float* Pr = wk.take(H_ * TT);
    if (P) be.unpack_bf16(static_cast<size_t>(n * H_ * TT), P, Pr);
    else probabilities(c, q, k, Pr, n);
    P = Pr;
  }
  be.heads_split(n, T_, 1, H_, dh_, dO, dOh);
  heads_gemm(c, false, true, T_, T_, dh_, 1.0f, dOh, v, dP, n);                          // dPd = dO V^T
  heads_gemm(c, true, false, T_, dh_, T_, 1.0f, dropped(c, P, pd_buf, n), dOh, dqkvh + 2 * n * TD, n);  // dV = Pd^T dO
  if (c.training && p_ > 0) dropout_grad(c, layer_, kProbDropout, p_, H_ * TT, dP, dP, n, part(), parts_);
  be.causal_softmax_backward(n * H_, T_, P, dP, dP);                                       // dS
  heads_gemm(c, false, false, T_, dh_, T_, scale_, dP, k, dqkvh, n);                       // dQ = s dS K
  heads_gemm(c, true, false, T_, dh_, T_, scale_, dP, q, dqkvh + n * TD, n);               // dK = s dS^T Q
  be.heads_merge(n, T_, 3, H_, dh_, dqkvh, keep);
  qkv_.backward_input(c, w, to_dtype_in_place(be, op, keep, n * 3 * TD), dx, n * T_);
}

void AttentionCore::weight_half(const LayerCtx& c, CView x, CView dy, float* dw, const float* saved, const float* keep,
                                int64_t n) const {
  const DType op = operand_dtype(c.precision);
  const float* O = saved + n * (saved_per_sample(c.selective, op) - operand_floats(T_ * E_, op));
  proj_.backward_weight(c, CView{O, op}, dy, dw + qkv_.size(), n * T_);
  qkv_.backward_weight(c, x, CView{keep, op}, dw, n * T_);
}

double AttentionCore::flops_forward() const {
  const double T = static_cast<double>(T_), D = static_cast<double>(D_), E = static_cast<double>(E_);
  return 2 * T * D * 3 * E + 4 * T * T * E + 2 * T * E * D + 5.0 * H_ * T * T;
}

namespace {

struct AttentionSettings : LayerSettings {
  int64_t heads = 0;
  double dropout = 0;
};

class Attention final : public Layer {
 public:
  Attention(const LayerSpec& s, Shape in)
      : Layer(s, in),
        core_(in.T(), in.D(), s.settings_as<AttentionSettings>().heads,
              static_cast<float>(s.settings_as<AttentionSettings>().dropout), s.index, s.tensor_parts, s.tensor_rank) {}

  std::vector<ParamTensor> params() const override { return core_.params("", 0); }
  void init_params(float* host, uint64_t seed) const override {
    if (spec_.tensor_parts > 1) return init_part_of_whole(*this, host, seed);
    core_.init_params(host, seed, index(), 0);
  }
  int64_t aux_per_sample() const override { return core_.saved_per_sample(); }
  int64_t kept_floats(bool selective, DType op) const override { return core_.saved_per_sample(selective, op); }
  int64_t split_aux_per_sample() const override { return core_.keep_per_sample(); }
  int64_t workspace_per_sample() const override {
    return std::max(core_.forward_work(), core_.keep_per_sample() + core_.backward_work());
  }
  // selective: the probabilities are recomputed (AttentionCore), in the same workspace
  bool recomputes_selectively() const override { return true; }
  int64_t selective_aux_per_sample() const override { return core_.saved_per_sample(true); }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const override {
    core_.forward(c, w, x, y, aux, n);
  }
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    const KeepInWork k = keep_in_work(c, core_.keep_per_sample(), n);
    core_.input_half(k.ctx, w, dy, dx, aux, k.keep, n);
    core_.weight_half(k.ctx, x, dy, dw, aux, k.keep, n);
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float*, const float*, const float* dy, float* dx, float*,
                      float* aux, int64_t n) const override {
    core_.input_half(c, w, dy, dx, aux, aux + n * kept_floats(c.selective, operand_dtype(c.precision)), n);
  }
  void backward_weight(const LayerCtx& c, ParamView, const float* x, const float*, const float* dy, float* dw,
                       const float* aux, int64_t n) const override {
    core_.weight_half(c, x, dy, dw, aux, aux + n * kept_floats(c.selective, operand_dtype(c.precision)), n);
  }
  double flops_forward() const override { return core_.flops_forward(); }
  double flops_backward() const override { return 2.0 * core_.flops_forward(); }
  double attention_model_flops() const override { return core_.model_flops(); }
  int64_t product_weight_values() const override { return core_.matrix_values(); }
  int tensor_sums() const override { return spec_.tensor_parts > 1 ? 1 : 0; }
  int64_t tensor_sum_floats() const override { return spec_.tensor_parts > 1 ? in_.numel() : 0; }

 private:
  AttentionCore core_;
};

}  // namespace

void check_heads(const LayerSpec& s, int64_t heads, const Shape& in) {
  if (in.D() % heads != 0)
    key_error(s, "heads", "heads = " + std::to_string(heads) + " must divide the model width D = " +
                              std::to_string(in.D()) + " of its input " + in.str());
  const int t = s.tensor_parts;
  if (t > 1 && heads % t != 0)
    key_error(s, "heads", "heads = " + std::to_string(heads) + " must be a multiple of parallel.tensor = " +
                              std::to_string(t) + " (each tensor rank holds heads / t of them)");
}

namespace {

LayerType attention_type() {
  LayerType t;
  t.name = "attention";
  t.doc = "causal multi-head self-attention on [T, D] (softmax(q k^T / sqrt(D / heads)) v, then the output projection)";
  t.pytorch = "torch.nn.MultiheadAttention(D, heads, dropout, batch_first=True)(x, x, x, attn_mask=causal, need_weights=False)";
  using S = AttentionSettings;
  t.keys = layer_keys<S>({required_key("heads", &S::heads, key_gt(0), "attention heads (must divide D)"),
                          key("dropout", &S::dropout, 0.0, key_between(0, 1, true),
                              "dropout of the attention probabilities (default 0)")});
  t.splits_tensor = true;
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 2, "a sequence [T, D]", prev);
    check_heads(s, s.settings_as<S>().heads, in);
    return std::make_unique<Attention>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(attention, attention_type())

}  // namespace pt::layers
