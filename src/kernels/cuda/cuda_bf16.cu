// bf16 compute on the CUDA backend (Backend::set_precision(Precision::bf16); docs/PRECISION.md).
// Contract: GEMM inputs are rounded to bf16 by k_to_bf16 (the host's and PyTorch's
// round-to-nearest-even, NaN -> 0x7FC0; bit-identical to bf16_bits in backend.hpp) into
// device scratch, then cublasGemmEx / cublasGemmStridedBatchedEx multiply them with
// CUBLAS_COMPUTE_32F (fp32 accumulation on tensor cores, CUBLAS_GEMM_DEFAULT_TENSOR_OP) into
// the fp32 C, alpha and beta as in Backend::gemm. A strided operand is converted over its
// whole extent, gaps included, so leading dimensions and batch strides carry over unchanged.
// round_bf16 (the Backend op) and the widening used by the bf16 convolutions (cuda_dnn.cu)
// live here too. Everything is queued on the compute stream.
#include <algorithm>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"

namespace pt::cuda {
namespace {

__device__ __forceinline__ uint16_t dev_bf16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float dev_widen(uint16_t b) { return __uint_as_float(static_cast<uint32_t>(b) << 16); }

__global__ void k_to_bf16(size_t n, const float* x, uint16_t* y) { GRID_STRIDE(i, n) y[i] = dev_bf16_bits(x[i]); }
__global__ void k_round_bf16(size_t n, const float* x, float* y) { GRID_STRIDE(i, n) y[i] = dev_widen(dev_bf16_bits(x[i])); }
__global__ void k_widen(size_t n, const uint16_t* x, float* y) { GRID_STRIDE(i, n) y[i] = dev_widen(x[i]); }
__global__ void k_widen_add(size_t n, const uint16_t* x, float* y) { GRID_STRIDE(i, n) y[i] += dev_widen(x[i]); }

// Elements spanned by a [batch] x rows x cols operand with row stride ld and batch stride.
size_t extent(int64_t batch, int64_t rows, int64_t cols, int64_t ld, int64_t stride) {
  return static_cast<size_t>((batch - 1) * stride + (rows - 1) * ld + cols);
}

}  // namespace

void CudaBackend::round_bf16(size_t n, const float* x, float* y) {
  if (n == 0) return;
  k_round_bf16<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
}

void* CudaBackend::bf16_scratch(int slot, size_t bytes) {
  Scratch& s = bf16_scratch_.at(static_cast<size_t>(slot));
  if (bytes > s.bytes) {
    if (s.p) PT_CU_CHECK(cudaFree(s.p));  // waits for kernels that used the old one
    s.p = nullptr;
    s.bytes = 0;
    PT_CU_CHECK(cudaMalloc(&s.p, bytes));
    s.bytes = bytes;
  }
  return s.p;
}

const uint16_t* CudaBackend::to_bf16(int slot, const float* x, size_t n) {
  auto* y = static_cast<uint16_t*>(bf16_scratch(slot, std::max<size_t>(n, 1) * sizeof(uint16_t)));
  if (n == 0) return y;
  k_to_bf16<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
  return y;
}

void CudaBackend::from_bf16(const uint16_t* x, size_t n, float* y, bool accumulate) {
  if (n == 0) return;
  if (accumulate) k_widen_add<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  else k_widen<<<blocks_for(n), kThreads, 0, compute_>>>(n, x, y);
  PT_CU_LAUNCHED();
}

// The row-major trick of gemm(): cuBLAS computes C^T = op(B)^T op(A)^T in column-major.
void CudaBackend::gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                            int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                            float* C, int64_t ldc, int64_t stride_c, int64_t batch) {
  const uint16_t* a = to_bf16(0, A, extent(batch, ta ? K : M, ta ? M : K, lda, stride_a));
  const uint16_t* b = to_bf16(1, B, extent(batch, tb ? N : K, tb ? K : N, ldb, stride_b));
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int m = static_cast<int>(N), n = static_cast<int>(M), k = static_cast<int>(K);
  if (batch == 1) {
    PT_CUBLAS_CHECK(cublasGemmEx(blas_, op_b, op_a, m, n, k, &alpha, b, CUDA_R_16BF, static_cast<int>(ldb), a,
                                 CUDA_R_16BF, static_cast<int>(lda), &beta, C, CUDA_R_32F, static_cast<int>(ldc),
                                 CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
    return;
  }
  PT_CUBLAS_CHECK(cublasGemmStridedBatchedEx(blas_, op_b, op_a, m, n, k, &alpha, b, CUDA_R_16BF, static_cast<int>(ldb),
                                             stride_b, a, CUDA_R_16BF, static_cast<int>(lda), stride_a, &beta, C,
                                             CUDA_R_32F, static_cast<int>(ldc), stride_c, static_cast<int>(batch),
                                             CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP));
}

}  // namespace pt::cuda
