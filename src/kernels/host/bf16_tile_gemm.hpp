// Small bf16 products for the bf16 attention kernel (attention_kernel.cpp): C = op(A) B over
// one (sample, head), with bf16 operands read straight from the token-major buffers (any row
// stride) and fp32 accumulation, on AVX512-BF16's dot-product instruction (vdpbf16ps: per
// lane, acc + a0 b0 + a1 b1 over consecutive k). oneDNN 2.6 runs these shapes (T x dh x T,
// dh 32-64) with its gemm:jit at about a third of the core's bf16 rate (bench/kernels.sh,
// "attn" rows); here the causal structure is used too, so the products cost about half the
// multiply-adds of the full square:
//   - Causal::cols: row i of C needs only columns j <= i (the scores S = q k^T and dP = do v^T;
//     the softmax rows read no further): column blocks past the row tile's diagonal are
//     skipped, and C's entries above the diagonal are left unspecified;
//   - Causal::k_lower: op(A)[i][k] = 0 for k > i (P, dS as A: o = P v, dq = dS k): the k loop
//     of a row tile stops after its last row's diagonal;
//   - Causal::k_upper: op(A)[i][k] = 0 for k < i (P^T, dS^T as A: dv = P^T do, dk = dS^T q):
//     the k loop starts at the row tile's first row.
// Skipped terms are exact zeros, so the sums are those of the full products up to the sign of
// a zero. Numerics: every element is an fp32 sum in ascending k, two exact bf16 products per
// step (the instruction rounds once per step, to nearest even, and treats subnormal bf16
// inputs and outputs as zero, as oneDNN's avx512_core_bf16 kernels do), the same for every
// call: bitwise reproducible. Tested against a double reference (test_bf16_tile_gemm.cpp).
#pragma once
#include <cstdint>
#include <vector>

namespace pt::host {

struct TileGemm {
  enum class Causal { none, cols, k_lower, k_upper };
  int64_t M = 0, N = 0, K = 0;
  const uint16_t* A = nullptr;  // bf16: [M, K] row-major (lda), or with a_trans its transpose [K, M]
  int64_t lda = 0;
  bool a_trans = false;
  const uint16_t* B = nullptr;  // bf16: [K, N] row-major (ldb), or with b_trans its transpose [N, K]
  int64_t ldb = 0;
  bool b_trans = false;
  float* C = nullptr;  // [M, N], row stride ldc: fp32, or with c_bf16 bf16 values (uint16_t at C)
  int64_t ldc = 0;
  bool c_bf16 = false;
  Causal causal = Causal::none;
};

// Whether this build has the kernel (compiled for a CPU with AVX512-BF16); without it the
// caller keeps oneDNN's matmul.
bool tile_gemm_available();
// C = op(A) B (overwritten) as described above. `scratch` holds packed operands between calls
// (grown as needed). Any M, N, K >= 1.
void tile_gemm_bf16(const TileGemm& g, std::vector<uint32_t>& scratch);

}  // namespace pt::host
