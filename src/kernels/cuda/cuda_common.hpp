// Shared by the CUDA backend's translation units: error checks that turn a failed CUDA,
// cuBLAS, cuDNN or NCCL call into a located pt::Error, and kernel launch geometry.
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <string>

#include "pipetrain/error.hpp"

namespace pt::cuda {

[[noreturn]] void fail_call(const char* call, const std::string& why, const char* file, int line);
const char* cublas_status_name(cublasStatus_t s);

constexpr int kThreads = 256;

#ifdef __CUDACC__
// x rounded to bf16 (ties to even, NaN -> 0x7FC0): bf16_bits (backend.hpp) on the device.
__device__ __forceinline__ uint16_t dev_bf16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
#endif

// Blocks for a grid-stride loop over n elements (at least 1, capped: the loop covers the rest).
inline unsigned blocks_for(size_t n, int threads = kThreads) {
  const size_t b = (n + static_cast<size_t>(threads) - 1) / static_cast<size_t>(threads);
  return static_cast<unsigned>(std::max<size_t>(1, std::min<size_t>(b, 8192)));
}

}  // namespace pt::cuda

// A grid-stride loop over [0, n) (in kernels).
#define GRID_STRIDE(i, n) \
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<size_t>(blockDim.x) * gridDim.x)

#define PT_CU_CHECK(call)                                                                   \
  do {                                                                                      \
    const cudaError_t pt_e_ = (call);                                                       \
    if (pt_e_ != cudaSuccess)                                                               \
      ::pt::cuda::fail_call(#call, cudaGetErrorString(pt_e_), __FILE__, __LINE__);          \
  } while (0)

#define PT_CUBLAS_CHECK(call)                                                               \
  do {                                                                                      \
    const cublasStatus_t pt_s_ = (call);                                                    \
    if (pt_s_ != CUBLAS_STATUS_SUCCESS)                                                     \
      ::pt::cuda::fail_call(#call, ::pt::cuda::cublas_status_name(pt_s_), __FILE__, __LINE__); \
  } while (0)

#define PT_CUDNN_CHECK(call)                                                                \
  do {                                                                                      \
    const cudnnStatus_t pt_s_ = (call);                                                     \
    if (pt_s_ != CUDNN_STATUS_SUCCESS)                                                      \
      ::pt::cuda::fail_call(#call, cudnnGetErrorString(pt_s_), __FILE__, __LINE__);         \
  } while (0)

// After a kernel launch: configuration errors surface here, execution errors at the next sync.
#define PT_CU_LAUNCHED() PT_CU_CHECK(cudaGetLastError())
