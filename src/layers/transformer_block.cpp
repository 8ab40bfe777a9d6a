// The pre-LN transformer block, one composite link of the chain with its residual graph
// inside: h = x + dropout(attn(ln1(x))), y = h + dropout(fc2(gelu(fc1(ln2(h))))), fc1 D ->
// mlp_ratio D, causal multi-head attention (attention_core.hpp). Parameters in this order
// (a PyTorch module with these attribute names loads them): ln1.weight, ln1.bias,
// attn.in_proj_weight, attn.in_proj_bias, attn.out_proj.weight, attn.out_proj.bias,
// ln2.weight, ln2.bias, mlp.0.weight, mlp.0.bias, mlp.2.weight, mlp.2.bias.
// Residual dropout streams: slot 1 (attention branch) and 2 (MLP branch), keyed by (seed,
// layer, sample, position, feature). Backward = input half (every inner output gradient
// into `keep`) then weight half, so the fused and the split backward are bitwise equal.
// Selective recomputation (LayerCtx::selective) keeps neither the attention probabilities
// (attention_core.hpp) nor the MLP's hidden activations gelu'(f) and gelu(f), f = fc1(ln2(h)):
// the input half recomputes fc1 and the GELU from the kept ln2 output with the forward's
// kernels, and keeps gelu(f) in the split region for the weight half (fc2's weight gradient).
// Sequence parallelism (key sequence_parallel, under a tensor split; Megatron's SP): the two
// norms, both dropouts and both residual adds run on this part's 1/t of the rows [n T, D]
// only, and keep only those rows (ln1 and ln2 outputs, their statistics, h). Before each
// column-parallel product the normed rows are all-gathered; each row-parallel product is
// reduce-scattered (RowLinear::scatter) instead of summed; the block's output is gathered
// whole, so its input and output (the chain's boundaries) stay whole on every rank.
// Backward: the conjugates (the column-parallel input gradients reduce-scattered, dh
// gathered before the attention, dx gathered at the end); the weight half gathers ln1 and
// ln2 outputs again, and the norms' weight gradients (from this part's rows) are summed
// over the group. The dropout masks are the whole block's (keyed by element), so the
// results equal the unsplit block's within the sums' rounding.
#include <algorithm>

#include "attention_core.hpp"

namespace pt::layers {
namespace {

struct TransformerSettings : LayerSettings {
  int64_t heads = 0, mlp_ratio = 4;
  double dropout = 0;
  bool sequence_parallel = false;
};

class TransformerBlock final : public Layer {
 public:
  TransformerBlock(const LayerSpec& s, Shape in) : TransformerBlock(s, in, s.settings_as<TransformerSettings>()) {}
  TransformerBlock(const LayerSpec& s, Shape in, const TransformerSettings& k)
      : Layer(s, in), T_(in.T()), D_(in.D()), F_(k.mlp_ratio * in.D() / s.tensor_parts),
        seq_(k.sequence_parallel && s.tensor_parts > 1), Ts_(seq_ ? T_ / s.tensor_parts : T_),
        p_(static_cast<float>(k.dropout)),
        attn_(in.T(), in.D(), k.heads, p_, s.index, s.tensor_parts, s.tensor_rank, seq_), ln_{D_, 1e-5f},
        fc1_{D_, F_, true, s.tensor_parts > 1 ? TensorSplit::column : TensorSplit::none},
        fc2_{F_, D_, true, s.tensor_parts > 1 ? TensorSplit::row : TensorSplit::none} {
    fc1_.scatter = fc2_.scatter = seq_;
    fc1_.part = fc2_.part = s.tensor_rank;
  }

  std::vector<ParamTensor> params() const override;
  void init_params(float* host, uint64_t seed) const override;
  // ln1 out, ln1 stats, the attention branch's output r (h = x + dropout(r) is recomputed:
  // residual_h), ln2 out, ln2 stats, gelu'(fc1 out) (bf16: fc1 out), gelu out, then the
  // attention's; under a bf16 policy all but the statistics are bf16 views in half the floats
  // (r is the out_proj output rounded to bf16, as autocast's linear returns it; mlp_hidden,
  // attention_core.hpp); sequence-parallel: the first five of this part's T / t rows only
  int64_t kept_floats(bool selective, DType op) const override {
    const int64_t TD = Ts_ * D_, TF = T_ * F_;
    return 3 * operand_floats(TD, op) + 4 * Ts_ + (selective ? 0 : 2 * operand_floats(TF, op)) +
           attn_.saved_per_sample(selective, op);
  }
  int64_t aux_per_sample() const override { return kept_floats(false, DType::f32); }
  // output gradients of fc2, fc1, ln2, the attention, its in_proj, ln1
  int64_t split_aux_per_sample() const override { return 4 * T_ * D_ + T_ * F_ + attn_.keep_per_sample(); }
  // and h (carve_work); sequence-parallel: and a whole [T, D] for the gathered norm outputs
  // (gathered()) plus the norms' partial weight gradients
  int64_t workspace_per_sample() const override {
    const int64_t fwd = T_ * D_ + attn_.forward_work();
    const int64_t bwd = split_aux_per_sample() + T_ * D_ + std::max(T_ * F_, attn_.backward_work());
    return std::max(fwd, bwd) + front_work();
  }
  // selective: no gelu'(f), gelu(f) (2 T F) and no probabilities; gelu(f) is recomputed into
  // the split region; the scratch holds f, gelu(f) in the forward and gelu'(f) in the backward
  bool recomputes_selectively() const override { return true; }
  int64_t selective_aux_per_sample() const override { return kept_floats(true, DType::f32); }
  int64_t selective_split_aux_per_sample() const override { return split_aux_per_sample() + T_ * F_; }
  int64_t selective_workspace_per_sample() const override {
    const int64_t fwd = T_ * D_ + std::max(attn_.forward_work(), 2 * T_ * F_);
    const int64_t bwd = selective_split_aux_per_sample() + T_ * D_ + std::max(T_ * F_, attn_.backward_work()) + T_ * F_;
    return std::max(fwd, bwd) + front_work();
  }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    const KeepInWork k = keep_in_work(c, split_aux_floats(mode(c)), n);
    input_half(k.ctx, w, x, dy, dx, aux, k.keep, n);
    weight_half(k.ctx, w, x, dw, aux, k.keep, n, true);  // h still in the workspace (carve_work)
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float* x, const float*, const float* dy, float* dx, float*,
                      float* aux, int64_t n) const override {
    input_half(c, w, x, dy, dx, aux, aux + n * aux_floats(mode(c), c.precision), n);
  }
  void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float*, const float*, float* dw,
                       const float* aux, int64_t n) const override {
    weight_half(c, w, x, dw, aux, aux + n * aux_floats(mode(c), c.precision), n, false);
  }
  double flops_forward() const override {
    const double TD = static_cast<double>(T_ * D_);
    return attn_.flops_forward() + 4.0 * TD * F_ + 2 * 8.0 * TD + 20.0 * T_ * F_ + 2 * TD;
  }
  double flops_backward() const override { return 2.0 * flops_forward(); }
  double attention_model_flops() const override { return attn_.model_flops(); }
  int64_t product_weight_values() const override { return attn_.matrix_values() + 2 * D_ * F_; }
  // split: the attention's and the MLP's row-parallel outputs (backward: their inputs' gradients);
  // sequence-parallel: 3 all-gathers and 2 reduce-scatters of [T, D] forward, 4 and 2
  // backward, each about half a sum: costed as 3 sums
  int tensor_sums() const override { return spec_.tensor_parts > 1 ? (seq_ ? 3 : 2) : 0; }
  int64_t tensor_sum_floats() const override { return tensor_sums() * T_ * D_; }

 private:
  // Parameter offsets: ln1, attention, ln2, fc1, fc2.
  struct Offsets {
    int64_t ln1, attn, ln2, fc1, fc2;
  };
  Offsets off() const {
    Offsets o;
    o.ln1 = 0;
    o.attn = ln_.size();
    o.ln2 = o.attn + attn_.num_params();
    o.fc1 = o.ln2 + ln_.size();
    o.fc2 = o.fc1 + fc1_.size();
    return o;
  }
  static Recompute mode(const LayerCtx& c) { return c.selective ? Recompute::selective : Recompute::none; }
  // Sequence parallelism: this part's rows of the [n T, D] residual stream (all of them
  // unsplit), the workspace the gathers take per sample, and a context whose workspace
  // starts after it (G: the gather buffer; null unsplit).
  struct Rows {
    int64_t first, count;
  };
  Rows mine(int64_t n) const { return {seq_ ? spec_.tensor_rank * n * Ts_ : 0, n * Ts_}; }
  int64_t front_work() const { return Ts_ * D_ + (seq_ ? T_ * D_ + 2 * D_ : 0); }
  // The workspace's first n front_work() floats: H (this part's rows of h: residual_h), then
  // (sequence-parallel) G; the returned context's workspace starts after them.
  LayerCtx carve_work(const LayerCtx& c, int64_t n, float** H, float** G) const {
    LayerCtx lc = c;
    *H = c.work;
    *G = seq_ ? c.work + n * Ts_ * D_ : nullptr;
    lc.work = c.work + n * front_work();
    return lc;
  }
  // kept normed rows (this part's, in op) -> the whole [n T, D] of them in G (unsplit: as is)
  CView gathered(const LayerCtx& c, CView kept, float* G, int64_t n) const {
    if (!seq_) return kept;
    const DType op = kept.dtype;
    const Rows r = mine(n);
    const int64_t part = operand_floats(r.count * D_, op);
    c.be.copy(G + operand_floats(r.first * D_, op), kept.data, static_cast<size_t>(part));
    c.tensor->allgather(c.be, G, operand_floats(n * T_ * D_, op), part);
    return {G, op};
  }
  // rows [first, first + count) of x (count D floats at x) -> every part's rows, whole
  void gather_rows(const LayerCtx& c, float* x, int64_t n) const {
    if (seq_) c.tensor->allgather(c.be, x, n * T_ * D_, mine(n).count * D_);
  }
  // a residual branch's dropout on rows r of [n T, D] (the whole's mask: keyed by element),
  // x -> y (in place when equal)
  void dropout_rows(const LayerCtx& c, uint64_t slot, const float* x, float* y, Rows r) const {
    LayerCtx rc = c;
    rc.sample0 = c.sample0 * T_ + r.first;
    dropout_apply(rc, index(), slot, p_, D_, x, y, r.count);
  }
  // h = x + dropout(r) on rows rw into H, from the kept attention branch r (this part's rows
  // of x): the forward and the backward compute it alike, so it is never kept. The forward
  // keeps r from the branch's fp32 output m (its rows), in op: under a bf16 policy rounded
  // once into H and packed into r in one pass.
  float* keep_branch(const LayerCtx& c, const float* x, const float* m, View r, float* H, Rows rw) const {
    const size_t nd = static_cast<size_t>(rw.count * D_);
    if (!r.bf16()) {
      c.be.copy(r.data, m, nd);
      return add_branch(c, x, m, H, rw);
    }
    c.be.round_pack_bf16(nd, m, H, r.data);
    return add_branch(c, x, H, H, rw);
  }
  float* residual_h(const LayerCtx& c, const float* x, CView r, float* H, Rows rw) const {
    if (!r.bf16()) return add_branch(c, x, r.data, H, rw);
    c.be.unpack_bf16(static_cast<size_t>(rw.count * D_), r.data, H);
    return add_branch(c, x, H, H, rw);
  }
  // H = x + dropout(v), v the branch's fp32 values (H itself when they are already there)
  float* add_branch(const LayerCtx& c, const float* x, const float* v, float* H, Rows rw) const {
    dropout_rows(c, 1, v, H, rw);
    c.be.add(static_cast<size_t>(rw.count * D_), x, H, H);
    return H;
  }
  // a norm's weight gradient from rows r: into dw directly, or (sequence-parallel) from this
  // part's rows into scratch, summed over the group, then added
  void norm_weight_grad(const LayerCtx& c, const float* w_ln, const float* x, const float* st, const float* dy,
                        float* dw, float* scratch, Rows r) const {
    if (!seq_) return ln_.backward_weight(c.be, w_ln, x, st, dy, dw, r.count);
    c.be.fill(scratch, 0.0f, static_cast<size_t>(2 * D_));
    ln_.backward_weight(c.be, w_ln, x, st, dy, scratch, r.count);
    tensor_sum(c, scratch, 2 * D_);
    c.be.axpy(static_cast<size_t>(2 * D_), 1.0f, scratch, dw);
  }
  // The saved activations of n samples (selective: f and g are not saved, null); a1, r, b, f
  // and g in op (kept_floats).
  struct Saved {
    float *a1, *st1, *r, *b, *st2, *f, *g, *attn;
  };
  Saved saved(float* aux, int64_t n, bool selective, DType op) const {
    Carve s{aux, n};
    Saved v;
    v.a1 = s.take(operand_floats(Ts_ * D_, op)), v.st1 = s.take(2 * Ts_), v.r = s.take(operand_floats(Ts_ * D_, op));
    v.b = s.take(operand_floats(Ts_ * D_, op)), v.st2 = s.take(2 * Ts_);
    v.f = selective ? nullptr : s.take(operand_floats(T_ * F_, op));
    v.g = selective ? nullptr : s.take(operand_floats(T_ * F_, op));
    v.attn = s.take(attn_.saved_per_sample(selective, op));
    return v;
  }
  // ln(x) of the norm at w_ln kept in `kept` (fp32), or under a bf16 policy computed in the
  // scratch and kept packed (the same bf16 values the linears round it to)
  CView normed(const LayerCtx& c, const float* w_ln, const float* x, float* kept, float* st, float* scratch,
               int64_t rows) const {
    if (operand_dtype(c.precision) == DType::f32) {
      ln_.forward(c.be, w_ln, x, kept, st, rows);
      return kept;
    }
    ln_.forward(c.be, w_ln, x, scratch, st, rows);
    c.be.pack_bf16(static_cast<size_t>(rows * D_), scratch, kept);
    return as_bf16(kept);
  }
  // The kept output gradients of n samples (selective: and the recomputed gelu(f), g).
  struct Kept {
    float *dm, *df, *db, *da, *dqkv, *da1, *g;
  };
  Kept kept(float* keep, int64_t n, bool selective) const {
    Carve k{keep, n};
    Kept v;
    v.dm = k.take(T_ * D_), v.df = k.take(T_ * F_), v.db = k.take(T_ * D_), v.da = k.take(T_ * D_);
    v.dqkv = k.take(attn_.keep_per_sample()), v.da1 = k.take(T_ * D_);
    v.g = selective ? k.take(T_ * F_) : nullptr;
    return v;
  }
  // f = fc1(b) and g = gelu(f) from the kept ln2 output b as the forward computes them. fp32:
  // f then holds gelu'(f) (Backend::gelu_forward_deriv), so the backward is one multiply.
  // bf16: f is kept as the bf16 of fc1's output (as autocast keeps the GELU's bf16 input, in
  // half the floats) and g is gelu of those values, a bf16 view; the backward computes gelu'
  // from them again (gelu_grad).
  void mlp_hidden(const LayerCtx& c, ParamView w_fc1, CView b, float* f, float* g, int64_t rows) const {
    const size_t n = static_cast<size_t>(rows * F_);
    if (c.precision == Precision::fp32) {
      fc1_.forward(c, w_fc1, b, f, rows);
      return c.be.gelu_forward_deriv(n, f, g);  // f becomes gelu'(f)
    }
    fc1_.forward(c, w_fc1, b, as_bf16(f), rows);
    c.be.gelu_forward(n, as_bf16(f), as_bf16(g));
  }
  // df = dg gelu'(f) into the kept buffer (a bf16 view under a bf16 policy), from what
  // mlp_hidden left in f
  void gelu_grad(const LayerCtx& c, const float* dg, const float* f, float* df, int64_t rows) const {
    const size_t n = static_cast<size_t>(rows * F_);
    if (c.precision == Precision::fp32) return c.be.mul(n, dg, f, df);
    c.be.gelu_backward(n, as_bf16(f), dg, as_bf16(df));
  }
  // a residual branch's output gradient through its dropout into a kept buffer, a bf16 view
  // under a bf16 policy (one pass without dropout)
  CView branch_grad(const LayerCtx& c, uint64_t slot, const float* g, float* keep, int64_t n) const {
    const DType op = operand_dtype(c.precision);
    if (op == DType::bf16 && p_ == 0.0f) {
      c.be.pack_bf16(static_cast<size_t>(n * T_ * D_), g, keep);
      return {keep, op};
    }
    dropout_grad(c, index(), slot, p_, T_ * D_, g, keep, n);
    return to_dtype_in_place(c.be, op, keep, n * T_ * D_);
  }
  void input_half(const LayerCtx& c, ParamView w, const float* x, const float* dy, float* dx, const float* aux,
                  float* keep, int64_t n) const;
  // h_ready: input_half just left h in the same workspace (the fused backward)
  void weight_half(const LayerCtx& c, ParamView w, const float* x, float* dw, const float* aux, const float* keep,
                   int64_t n, bool h_ready) const;

  int64_t T_, D_, F_;
  bool seq_;    // sequence parallelism (key sequence_parallel under a tensor split)
  int64_t Ts_;  // the positions per sample whose norms, dropout and adds this part runs
  float p_;
  AttentionCore attn_;
  RowNorm ln_;
  RowLinear fc1_, fc2_;
};

std::vector<ParamTensor> TransformerBlock::params() const {
  const Offsets o = off();
  const int64_t D = D_, F = F_, t = spec_.tensor_parts;
  std::vector<ParamTensor> p = {{"ln1.weight", {D}, o.ln1, D}, {"ln1.bias", {D}, o.ln1 + D, D}};
  for (ParamTensor& a : attn_.params("attn.", o.attn)) p.push_back(a);
  ParamTensor w1{"mlp.0.weight", {F, D}, o.fc1, F * D}, b1{"mlp.0.bias", {F}, o.fc1 + F * D, F};
  ParamTensor w2{"mlp.2.weight", {D, F}, o.fc2, D * F};
  if (t > 1)  // the MLP: fc1 column-parallel (rows of the hidden units), fc2 row-parallel (their columns)
    w1 = cut_tensor(w1, 0, 1, {F * t, D}), b1 = cut_tensor(b1, 0, 1, {F * t}), w2 = cut_tensor(w2, 1, 1, {D, F * t});
  for (const ParamTensor& x : {ParamTensor{"ln2.weight", {D}, o.ln2, D}, ParamTensor{"ln2.bias", {D}, o.ln2 + D, D}, w1,
                               b1, w2, ParamTensor{"mlp.2.bias", {D}, o.fc2 + D * F, D}})
    p.push_back(x);
  return p;
}

// Norms (1, 0); weights N(0, 0.02) keyed by (seed, layer, tensor index above); biases 0. A
// tensor-parallel part: the whole block's values, cut.
void TransformerBlock::init_params(float* host, uint64_t seed) const {
  if (spec_.tensor_parts > 1) return init_part_of_whole(*this, host, seed);
  const Offsets o = off();
  for (int64_t ln : {o.ln1, o.ln2}) {
    init_constant(host + ln, D_, 1.0f);
    init_constant(host + ln + D_, D_, 0.0f);
  }
  attn_.init_params(host + o.attn, seed, index(), 2);
  init_normal(host + o.fc1, F_ * D_, 0.02f, seed, index(), 8);
  init_constant(host + o.fc1 + F_ * D_, F_, 0.0f);
  init_normal(host + o.fc2, D_ * F_, 0.02f, seed, index(), 10);
  init_constant(host + o.fc2 + D_ * F_, D_, 0.0f);
}

void TransformerBlock::forward(const LayerCtx& c0, ParamView w, const float* x, float* y, float* aux,
                               int64_t n) const {
  float *H, *G;
  const LayerCtx c = carve_work(c0, n, &H, &G);
  Backend& be = c.be;
  const Offsets o = off();
  const DType op = operand_dtype(c.precision);  // of a1, r, b and g
  Saved s = saved(aux, n, c.selective, op);
  const int64_t rows = n * T_;
  const Rows r = mine(n);  // the rows this part norms, drops and adds
  const size_t nd = static_cast<size_t>(r.count * D_);
  const int64_t at = r.first * D_;
  float* m = c.work;  // a norm's fp32 output (bf16 policy), then a branch's output, dropped in place
  LayerCtx lc = c;
  lc.work = c.work + n * T_ * D_;
  if (c.selective) s.f = lc.work, s.g = lc.work + rows * F_;  // after the attention, in its scratch
  const CView a1 = gathered(c, normed(c, w + o.ln1, x + at, s.a1, s.st1, m, r.count), G, n);
  attn_.forward(lc, w + o.attn, a1, m, s.attn, n);
  const float* h = keep_branch(c, x + at, m + at, View{s.r, op}, H, r);
  mlp_hidden(c, w + o.fc1, gathered(c, normed(c, w + o.ln2, h, s.b, s.st2, m, r.count), G, n), s.f, s.g, rows);
  fc2_.forward(c, w + o.fc2, CView{s.g, op}, m, rows);
  dropout_rows(c, 2, m + at, m + at, r);
  be.add(nd, h, m + at, y + at);
  gather_rows(c, y, n);
}

void TransformerBlock::input_half(const LayerCtx& c0, ParamView w, const float* x, const float* dy, float* dx,
                                  const float* aux, float* keep, int64_t n) const {
  float *H, *G;
  const LayerCtx c = carve_work(c0, n, &H, &G);
  Backend& be = c.be;
  const Offsets o = off();
  const DType op = operand_dtype(c.precision);  // of dm, df, da and the attention's dqkv: read by linears only
  Saved s = saved(const_cast<float*>(aux), n, c.selective, op);
  const Kept k = kept(keep, n, c.selective);
  const int64_t rows = n * T_;
  const Rows r = mine(n);
  const size_t nd = static_cast<size_t>(r.count * D_);
  const int64_t at = r.first * D_;
  float* dh = c.work;                    // gradient of h
  float* dg = c.work + n * T_ * D_;      // gradient of the gelu output, then the attention's scratch
  LayerCtx lc = c;
  lc.work = dg;
  if (c.selective) {  // gelu'(f) after the attention's scratch, gelu(f) kept for the weight half
    s.f = dg + n * std::max(T_ * F_, attn_.backward_work()), s.g = k.g;
    mlp_hidden(c, w + o.fc1, gathered(c, CView{s.b, op}, G, n), s.f, s.g, rows);
  }
  fc2_.backward_input(c, w + o.fc2, branch_grad(c, 2, dy, k.dm, n), dg, rows);
  gelu_grad(c, dg, s.f, k.df, rows);
  fc1_.backward_input(c, w + o.fc1, CView{k.df, op}, k.db, rows);
  const float* h = residual_h(c, x + at, CView{s.r, op}, H, r);
  ln_.backward_input(be, w + o.ln2, h, s.st2, k.db + at, dh + at, r.count);
  be.axpy(nd, 1.0f, dy + at, dh + at);
  gather_rows(c, dh, n);
  attn_.input_half(lc, w + o.attn, branch_grad(c, 1, dh, k.da, n), k.da1, s.attn, k.dqkv, n);
  if (!dx) return;
  ln_.backward_input(be, w + o.ln1, x + at, s.st1, k.da1 + at, dx + at, r.count);
  be.axpy(nd, 1.0f, dh + at, dx + at);
  gather_rows(c, dx, n);
}

void TransformerBlock::weight_half(const LayerCtx& c0, ParamView w, const float* x, float* dw, const float* aux,
                                   const float* keep, int64_t n, bool h_ready) const {
  float *H, *G;
  const LayerCtx c = carve_work(c0, n, &H, &G);
  const Offsets o = off();
  const DType op = operand_dtype(c.precision);
  const Saved s = saved(const_cast<float*>(aux), n, c.selective, op);
  const Kept k = kept(const_cast<float*>(keep), n, c.selective);
  const int64_t rows = n * T_;
  const Rows r = mine(n);
  const int64_t at = r.first * D_;
  float* scratch = G ? G + n * T_ * D_ : nullptr;  // the norms' partial weight gradients
  fc2_.backward_weight(c, CView{c.selective ? k.g : s.g, op}, CView{k.dm, op}, dw + o.fc2, rows);
  fc1_.backward_weight(c, gathered(c, CView{s.b, op}, G, n), CView{k.df, op}, dw + o.fc1, rows);
  const float* h = h_ready ? H : residual_h(c, x + at, CView{s.r, op}, H, r);
  norm_weight_grad(c, w + o.ln2, h, s.st2, k.db + at, dw + o.ln2, scratch, r);
  attn_.weight_half(c, gathered(c, CView{s.a1, op}, G, n), CView{k.da, op}, dw + o.attn, s.attn, k.dqkv, n);
  norm_weight_grad(c, w + o.ln1, x + at, s.st1, k.da1 + at, dw + o.ln1, scratch, r);
}

LayerType transformer_block_type() {
  LayerType t;
  t.name = "transformer_block";
  t.doc = "pre-LN transformer block on [T, D]: x + attn(ln1(x)), then + mlp(ln2(.)), causal multi-head attention, "
          "MLP D -> mlp_ratio D -> D with exact GELU; one link of the chain";
  t.pytorch = "h = x + Dropout(p)(MultiheadAttention(D, heads, p, batch_first=True)(a, a, a, attn_mask=causal)[0]), a = "
              "LayerNorm(D)(x); y = h + Dropout(p)(Sequential(Linear(D, rD), GELU(), Linear(rD, D))(LayerNorm(D)(h)))";
  using S = TransformerSettings;
  t.keys = layer_keys<S>({required_key("heads", &S::heads, key_gt(0), "attention heads (must divide D)"),
                          key("mlp_ratio", &S::mlp_ratio, 4, key_gt(0), "MLP hidden width / D (default 4)"),
                          key("dropout", &S::dropout, 0.0, key_between(0, 1, true),
                              "dropout of the attention probabilities and both residual branches (default 0)"),
                          key("sequence_parallel", &S::sequence_parallel, false,
                              "under parallel.tensor > 1: norms, residual dropout and adds on 1/t of the sequence per "
                              "rank, reduce-scatter/all-gather in place of the sums; keeps 1/t of those activations "
                              "(default false; docs/ARCHITECTURE.md \"Sequence parallelism\")")});
  t.splits_tensor = true;
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 2, "a sequence [T, D]", prev);
    const S& k = s.settings_as<S>();
    check_heads(s, k.heads, in);
    if ((k.mlp_ratio * in.D()) % s.tensor_parts != 0)
      key_error(s, "mlp_ratio", "the MLP's " + std::to_string(k.mlp_ratio * in.D()) + " hidden units do not split over " +
                                    "parallel.tensor = " + std::to_string(s.tensor_parts) + " ranks");
    if (k.sequence_parallel && s.tensor_parts > 1 && (in.T() % s.tensor_parts != 0 || in.D() % 2 != 0))
      key_error(s, "sequence_parallel",
                "the sequence of " + std::to_string(in.T()) + " positions does not split over parallel.tensor = " +
                    std::to_string(s.tensor_parts) + " ranks (or D = " + std::to_string(in.D()) + " is odd)");
    return std::make_unique<TransformerBlock>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(transformer_block, transformer_block_type())

}  // namespace pt::layers
