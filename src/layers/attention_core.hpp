// Internal to src/layers: causal multi-head self-attention on [T, D] sequences, shared by
// the attention layer and transformer_block. Parameters (PyTorch nn.MultiheadAttention
// layout): in_proj weight [3D, D] and bias [3D] (q, k, v stacked), out_proj weight [D, D]
// and bias [D]. Per sample it saves q, k, v (3 T D; token-major on the backend's fused
// path, head-major on the composed one), the attention probabilities before dropout (H T T)
// and the merged head outputs (T D). Under a bf16 policy all three are kept as bf16 views in
// half the floats (saved_per_sample(., bf16)): q, k, v and the merged outputs are read by
// products only (which round them to those values anyway), and the probabilities are rounded
// once after the softmax, as autocast's softmax of bf16 scores returns them, and read so by
// the P.V and dV products and by the softmax backward. The fused path writes them so; the
// composed one computes in fp32 in its workspace and packs into the kept slots, and unpacks
// q, k, v and P into its workspace in the backward. The input half of
// backward leaves the in_proj output gradient (3 T D) in `keep` for the weight half.
// Probability dropout is keyed by (seed, layer, stream slot 3, sample, head/query/key
// position) and recomputed in backward; a tensor-parallel part draws the whole layer's mask
// for its heads (dropout_apply's part), so a split equals the whole with dropout too. Selective recomputation (LayerCtx::selective) saves
// no probabilities: the backward recomputes them from the saved q and k with the forward's
// own kernels (the fused kernel per head in its tiles, or the composed scores product and
// softmax into the workspace), so they are bitwise the forward's.
#pragma once
#include "layer_util.hpp"

namespace pt::layers {

// `heads` must divide the input's D, and under a tensor split (LayerSpec::tensor_parts = t)
// be a multiple of t: else a located error naming the layer, key and values.
void check_heads(const LayerSpec& s, int64_t heads, const Shape& in);

class AttentionCore {
 public:
  // parts > 1: this rank's part of a tensor-parallel split (parallel.tensor): heads / parts
  // heads, in_proj column-parallel (its q, k and v rows of those heads), out_proj row-parallel
  // (their columns; the output summed over the tensor group, then the whole bias added).
  // scatter (sequence parallelism, a split only): the output and the input gradient are the
  // group's sums on this part's rows only (RowLinear::scatter); x is still whole.
  AttentionCore(int64_t T, int64_t D, int64_t heads, float p, int layer, int parts = 1, int rank = 0,
                bool scatter = false);

  int64_t num_params() const { return qkv_.size() + proj_.size(); }
  int64_t matrix_values() const { return qkv_.in * qkv_.out + proj_.in * proj_.out; }  // in_proj and out_proj weights
  void init_params(float* host, uint64_t seed, int layer, int first_tensor) const;  // N(0, 0.02), zero biases
  double model_flops() const { return 12.0 * static_cast<double>(T_) * static_cast<double>(T_) * static_cast<double>(E_); }
  // selective: without the probabilities (H T T), which the backward recomputes; op: the
  // dtype q, k, v, the probabilities and the merged head outputs are kept in
  // (operand_dtype(c.precision))
  int64_t saved_per_sample(bool selective = false, DType op = DType::f32) const {
    return operand_floats(3 * T_ * E_, op) + (selective ? 0 : operand_floats(H_ * T_ * T_, op)) +
           operand_floats(T_ * E_, op);
  }
  int64_t keep_per_sample() const { return 3 * T_ * E_; }
  // The in_proj and out_proj tensors (in_proj weight, bias, out_proj weight, bias) at offset
  // `at` of the layer, named with `prefix`, with their tensor-parallel cut.
  std::vector<ParamTensor> params(const std::string& prefix, int64_t at) const;
  // per sample, enough for either dtype of the kept operands and for selective recomputation
  int64_t forward_work() const;
  int64_t backward_work() const;  // input half

  // x: the input, an f32 view or (bf16 policy) a bf16 one; under a bf16 policy the merged
  // head outputs are saved as a bf16 view too
  void forward(const LayerCtx& c, ParamView w, CView x, float* y, float* saved, int64_t n) const;
  // dx (may be null) = dL/dx; keep = the in_proj output gradient. c.work: backward_work().
  // dy: the output gradient's view. Under a bf16 policy the in_proj output gradient in `keep`
  // is left a bf16 view for the weight half.
  void input_half(const LayerCtx& c, ParamView w, CView dy, float* dx, const float* saved, float* keep,
                  int64_t n) const;
  void weight_half(const LayerCtx& c, CView x, CView dy, float* dw, const float* saved, const float* keep,
                   int64_t n) const;
  double flops_forward() const;

 private:
  // batched [T, *] products over the n * H heads
  void heads_gemm(const LayerCtx& c, bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                  const float* B, float* C, int64_t n) const;
  const float* dropped(const LayerCtx& c, const float* P, float* buf, int64_t n) const;
  // the composed path's probabilities from head-major q and k: scores, then causal softmax,
  // rounded to bf16 values under a bf16 policy
  void probabilities(const LayerCtx& c, const float* q, const float* k, float* P, int64_t n) const;
  // the composed forward: head-major q, k, v kept in `qkv`, the probabilities in P (null:
  // selective), outputs merged into O
  void composed_forward(const LayerCtx& c, ParamView w, CView x, float* qkv, View P, View O, int64_t n) const;
  // the backend's fused kernel (FusedKernels::attention_forward) where it has one and the
  // probabilities have no dropout; else the composition of batched GEMMs and softmax
  bool fused(Backend& be) const { return be.fused().attention() && p_ == 0.0f; }
  // the fused kernel's geometry, in c's precision
  AttentionGeom geom(const LayerCtx& c, int64_t n) const;
  // this part's place among the heads (LayerSpec::tensor_rank; 0 unsplit)
  int part() const { return rank_; }
  int64_t T_, D_, E_, H_, dh_;  // D the model width, E = D / parts the width of this part's heads
  float p_, scale_;
  int layer_, parts_, rank_;
  RowLinear qkv_, proj_;
};

}  // namespace pt::layers
