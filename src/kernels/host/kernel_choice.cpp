// The fp32 kernel rule of the host backend: which library runs an fp32 GEMM or convolution
// pass of a given shape. Contract: a pure function of the shape and of whether oneDNN runs
// AVX-512 here (never of a timing taken at run time), so every rank and every run of a job on
// one machine type makes the same choice and results stay bitwise reproducible and equal
// between a pipeline and one process. bf16 always runs on
// oneDNN and does not consult it. The rule comes from bench/kernels.sh (bench/README.md,
// "oneDNN kernels"; docs/PRECISION.md): OpenBLAS (SkylakeX core) against oneDNN 2.6
// (brg:avx512_core matmul, jit:avx512_core convolutions), one thread, timed in thread CPU
// time, on this project's AMD EPYC (AVX-512); a shape class goes to OpenBLAS only where it
// measured faster there.
#include "onednn.hpp"

namespace pt::host {

// GEMM. oneDNN is as fast (within 4%) or faster (up to 1.4x) for every GEMM outside the
// classes below: the MLP's, the transformer's linears and attention scores and P V, the CNN's
// first dense layer. (One shape stays on oneDNN with its class: the MLP's first weight
// gradient at batch 32, [512x32]x[32x784], where OpenBLAS is 8% faster while the next layer's,
// [512x32]x[32x512], is a tie.) OpenBLAS is faster for the small GEMMs of a
// classifier head (N = 10 classes): its input gradient (K <= 16: 1.07-1.28x), and at batch
// <= 32 (M <= 32) its forward (N <= 16: 1.4-1.7x) and weight gradient (K <= 32: 1.13-1.3x);
// and for batched products with a transposed A (attention's dV = P^T dO and dK = dS^T Q: a
// loop of OpenBLAS GEMMs, 1.24-1.27x). And for a wide output over a long reduction read from
// a plain B (N >= 2048, K >= 512, B not transposed): gpt2_small's MLP down-projection, whose
// weight gradient [768x1024]x[1024x3072] runs 1.42x faster on OpenBLAS (95 against 67
// GFLOP/s; 1.41x at 4096 rows) and whose input gradient at 4096 rows [4096x768]x[768x3072]
// 1.35x (101 against 75; a tie at 1024 rows), on a Zen 4 EPYC (2026-12-03). Forwards (x W^T,
// B transposed) of the same widths are ties, and the CNN's first dense layer (N = 3136 over
// K = 128) is 1.13-1.17x faster on oneDNN. And for an input gradient over a long reduction
// (dY W: neither operand transposed, K >= 2048, N >= 512): gpt2_small's qkv and MLP
// up-projection input gradients, [1024x2304]x[2304x768] and [1024x3072]x[3072x768], run
// 1.24x and 1.38x faster on OpenBLAS on a Zen 5 EPYC (183 against 147, 184 against 133
// GFLOP/s; 2026-12-04), where oneDNN's brg:avx512_core reaches 0.72-0.79 of that machine's
// fp32 peak (bench/README.md, "Issue 24 on an AMD EPYC, Zen 5").
// Without AVX-512 (oneDNN 2.6's gemm:jit for avx2 against OpenBLAS's Haswell core) the weight
// gradients (dY^T X: A transposed, B plain, one product) run 1.13-1.98x faster on OpenBLAS
// where the output has more than 16 rows: the MLP's second layer 1.68x, tinygpt's
// up-projection 1.98x, down-projection 1.25x and qkv 1.20x, gpt2_small's 256-class head 1.27x,
// the CNN's first dense layer 1.13x; gpt2_small's other weight gradients are ties, and a
// 10-class head's (10 rows) is faster on oneDNN. Every other class was a tie there (a Zen 3
// EPYC, 2026-12-07; bench/README.md, "Issue 24 on an AMD EPYC, Zen 3").
bool onednn_wins_gemm_fp32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch, bool avx512) {
  if (K <= 16 || (M <= 32 && (N <= 16 || K <= 32))) return false;
  if (!avx512 && ta && !tb && batch == 1 && M > 16) return false;
  if (batch > 1 && ta) return false;
  if (!tb && N >= 2048 && K >= 512) return false;
  if (!ta && !tb && K >= 2048 && N >= 512) return false;
  return true;
}

// Convolution. oneDNN's direct kernels are 1.5-2.1x faster on every pass of the CNN's second
// layer (32 -> 64 channels) and 1.9-4.3x on the weight pass of every layer measured. On a
// layer with a tiny reduction (a first layer on 1-3 channels) oneDNN keeps the input in its
// plain layout, and im2col + OpenBLAS is faster for the data pass when c_in k^2 < 32 (1.6-7x:
// 1 and 3 channels, k = 3) and for the forward when c_in k^2 < 16 (1.2-1.7x: 1 channel; at 3
// channels oneDNN is 1.1x faster).
bool onednn_wins_conv_fp32(const WindowGeom& g, int64_t n, ConvPass pass) {
  (void)n;
  const int64_t reduction = g.c_in * g.kernel * g.kernel;
  switch (pass) {
    case ConvPass::forward: return reduction >= 16;
    case ConvPass::backward_data: return reduction >= 32;
    default: return true;
  }
}

bool onednn_has_avx512() {
  static const bool on = onednn_isa_name().rfind("avx512", 0) == 0;
  return on;
}

std::string fp32_rule_description() {
  return std::string("oneDNN; OpenBLAS for GEMMs with K <= 16 or M <= 32 and (N <= 16 or K <= 32), for batched GEMMs "
                     "with a transposed A, for GEMMs with N >= 2048 and K >= 512 and B not transposed and for GEMMs with "
                     "K >= 2048 and N >= 512 and neither operand transposed") +
         (onednn_has_avx512() ? "" : ", for weight gradients (A transposed, B not) with M > 16 (no AVX-512)") +
         "; im2col + OpenBLAS for convolution forwards with c_in k^2 < 16 and data passes with c_in k^2 < 32";
}

}  // namespace pt::host
