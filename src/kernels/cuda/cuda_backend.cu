// CUDA backend: device choice, streams and handles, memory, GEMM on cuBLAS (bf16 precision:
// cuda_bf16.cu), the region
// timer on CUDA events, and the entry points make_cuda_backend / cuda_backend_compiled
// (a build without CUDA=1 links src/kernels/cuda_stub.cpp instead).
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"

namespace pt {

namespace cuda {

void fail_call(const char* call, const std::string& why, const char* file, int line) {
  fail(Exit::internal, std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " + why);
}

const char* cublas_status_name(cublasStatus_t s) {
  switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "cuBLAS error";
  }
}

PinnedBuffer::~PinnedBuffer() {
  if (p_) cudaFreeHost(p_);
}

void* PinnedBuffer::reserve(size_t bytes) {
  if (bytes > cap_) {
    if (p_) PT_CU_CHECK(cudaFreeHost(p_));
    p_ = nullptr;
    cap_ = 0;
    const size_t want = std::max<size_t>(bytes, 4096);
    PT_CU_CHECK(cudaMallocHost(&p_, want));
    cap_ = want;
  }
  return p_;
}

namespace {

bool env_flag(const char* name) {
  const char* v = std::getenv(name);
  return v && *v && std::strcmp(v, "0") != 0;
}

}  // namespace

DeviceChoice choose_device(int device_index) {
  DeviceChoice c;
  const cudaError_t e = cudaGetDeviceCount(&c.count);
  if (e != cudaSuccess || c.count == 0) {
    cudaGetLastError();  // clear the sticky "no device" state
    fail(Exit::bad_input,
         std::string("run.device = \"cuda\": no CUDA device is visible to this process (cudaGetDeviceCount: ") +
             (e != cudaSuccess ? cudaGetErrorString(e) : "0 devices") + ")");
  }
  // node-local rank: collective over MPI_COMM_WORLD on the first call, cached after
  static int local_rank = -1, local_size = 1;
  if (local_rank < 0) {
    int init = 0, fin = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&fin);
    local_rank = 0;
    if (init && !fin) {
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
      MPI_Comm_rank(node, &local_rank);
      MPI_Comm_size(node, &local_size);
      MPI_Comm_free(&node);
    }
  }
  c.local_rank = local_rank;
  c.local_size = local_size;
  const int base = device_index < 0 ? 0 : device_index;
  c.device = (base + local_rank) % c.count;
  return c;
}

CudaBackend::CudaBackend(int device, int local_rank, int local_size)
    : device_(device), local_rank_(local_rank), local_size_(local_size) {
  PT_CU_CHECK(cudaSetDevice(device_));
  cudaDeviceProp prop;
  PT_CU_CHECK(cudaGetDeviceProperties(&prop, device_));
  name_ = prop.name;
  cc_major_ = prop.major;
  cc_minor_ = prop.minor;
  total_mem_ = prop.totalGlobalMem;
  tf32_ = env_flag("PT_CUDA_TF32");
  ws_limit_ = size_t{512} << 20;
  if (const char* v = std::getenv("PT_CUDNN_WORKSPACE_MB")) ws_limit_ = static_cast<size_t>(std::atoll(v)) << 20;

  PT_CU_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  PT_CU_CHECK(cudaStreamCreateWithFlags(&copy_, cudaStreamNonBlocking));
  PT_CUBLAS_CHECK(cublasCreate(&blas_));
  PT_CUBLAS_CHECK(cublasSetStream(blas_, compute_));
  PT_CUBLAS_CHECK(cublasSetPointerMode(blas_, CUBLAS_POINTER_MODE_HOST));
  PT_CUBLAS_CHECK(cublasSetMathMode(blas_, tf32_ ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  PT_CUDNN_CHECK(cudnnCreate(&dnn_));
  PT_CUDNN_CHECK(cudnnSetStream(dnn_, compute_));
  PT_CU_CHECK(cudaEventCreate(&timer_[0]));
  PT_CU_CHECK(cudaEventCreate(&timer_[1]));
  PT_CU_CHECK(cudaMalloc(&red_dev_, sizeof(double) * (kRedBlocks + 1)));
  PT_CU_CHECK(cudaMalloc(&cnt_dev_, sizeof(unsigned long long)));
  red_host_.reserve(64);
  uploads_.resize(8);
  for (auto& u : uploads_) PT_CU_CHECK(cudaEventCreateWithFlags(&u.done, cudaEventDisableTiming));
}

CudaBackend::~CudaBackend() {
  // must not throw: errors at teardown are ignored
  cudaSetDevice(device_);
  cudaStreamSynchronize(compute_);
  cudaStreamSynchronize(copy_);
  release_dnn_plans();
  if (ws_) cudaFree(ws_);
  if (bn_scratch_) cudaFree(bn_scratch_);
  for (auto& b : bf16_scratch_)
    if (b.p) cudaFree(b.p);
  for (auto& u : uploads_)
    if (u.done) cudaEventDestroy(u.done);
  if (red_dev_) cudaFree(red_dev_);
  if (cnt_dev_) cudaFree(cnt_dev_);
  for (auto& e : timer_)
    if (e) cudaEventDestroy(e);
  if (dnn_) cudnnDestroy(dnn_);
  if (blas_) cublasDestroy(blas_);
  if (copy_) cudaStreamDestroy(copy_);
  if (compute_) cudaStreamDestroy(compute_);
}

void CudaBackend::make_current() const { PT_CU_CHECK(cudaSetDevice(device_)); }

std::string CudaBackend::describe() const {
  char b[512];
  int rt = 0;
  cudaRuntimeGetVersion(&rt);
  const size_t dnn = cudnnGetVersion();
  int blas = 0;
  cublasGetVersion(blas_, &blas);
  std::snprintf(b, sizeof b,
                "cuda:%d (%s, sm_%d%d, %.0f GiB; node-local rank %d of %d; CUDA %d.%d, cuBLAS %d.%d, cuDNN %zu.%zu.%zu; %s)",
                device_, name_.c_str(), cc_major_, cc_minor_, static_cast<double>(total_mem_) / (1u << 30), local_rank_,
                local_size_, rt / 1000, rt % 1000 / 10, blas / 10000, blas / 100 % 100, dnn / 10000, dnn / 100 % 100,
                dnn % 100, tf32_ ? "TF32 allowed" : "FP32 FMA");
  return b;
}

// ---- memory ---------------------------------------------------------------------------

float* CudaBackend::alloc(size_t n) {
  float* p = nullptr;
  if (n == 0) return nullptr;
  const cudaError_t e = cudaMalloc(&p, n * sizeof(float));
  if (e != cudaSuccess) {
    cudaGetLastError();
    fail(Exit::internal, "cuda:" + std::to_string(device_) + ": cannot allocate " + std::to_string(n * sizeof(float)) +
                             " bytes of device memory (" + cudaGetErrorString(e) + ")");
  }
  PT_CU_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), compute_));
  return p;
}

// Frees are rare (buffers live for the run): wait for both streams so no queued kernel or
// copy still uses the memory, rather than rely on cudaFree's implicit synchronisation.
void CudaBackend::release(float* p) {
  if (!p) return;
  synchronize();
  PT_CU_CHECK(cudaFree(p));
}

int32_t* CudaBackend::alloc_int(size_t n) {
  int32_t* p = nullptr;
  if (n == 0) return nullptr;
  PT_CU_CHECK(cudaMalloc(&p, n * sizeof(int32_t)));
  PT_CU_CHECK(cudaMemsetAsync(p, 0, n * sizeof(int32_t), compute_));
  return p;
}

void CudaBackend::release_int(int32_t* p) {
  if (!p) return;
  synchronize();
  PT_CU_CHECK(cudaFree(p));
}

void CudaBackend::copy(float* dst, const float* src, size_t n) {
  if (dst == src || n == 0) return;
  PT_CU_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, compute_));
}

void CudaBackend::to_host(float* host, const float* src, size_t n) {
  if (n == 0) return;
  PT_CU_CHECK(cudaMemcpyAsync(host, src, n * sizeof(float), cudaMemcpyDeviceToHost, compute_));
  PT_CU_CHECK(cudaStreamSynchronize(compute_));
}

// Host -> device without stalling the host: the data goes through a ring of pinned
// buffers; a buffer is reused once its previous copy has completed.
void CudaBackend::upload(void* dst, const void* host, size_t bytes) {
  if (bytes == 0) return;
  if (bytes > kMaxStagedUpload) {  // rare and large (initial weights): no pinned copy kept
    PT_CU_CHECK(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, compute_));
    PT_CU_CHECK(cudaStreamSynchronize(compute_));
    return;
  }
  Upload& u = uploads_[next_upload_];
  next_upload_ = (next_upload_ + 1) % uploads_.size();
  if (u.pending) PT_CU_CHECK(cudaEventSynchronize(u.done));
  void* stage = u.buf.reserve(bytes);
  std::memcpy(stage, host, bytes);
  PT_CU_CHECK(cudaMemcpyAsync(dst, stage, bytes, cudaMemcpyHostToDevice, compute_));
  PT_CU_CHECK(cudaEventRecord(u.done, compute_));
  u.pending = true;
}

void CudaBackend::from_host(float* dst, const float* host, size_t n) { upload(dst, host, n * sizeof(float)); }

void CudaBackend::labels_from_host(int32_t* dst, const int32_t* host, size_t n) {
  upload(dst, host, n * sizeof(int32_t));
}

void CudaBackend::synchronize() {
  PT_CU_CHECK(cudaStreamSynchronize(compute_));
  PT_CU_CHECK(cudaStreamSynchronize(copy_));
}

void CudaBackend::timer_start() { PT_CU_CHECK(cudaEventRecord(timer_[0], compute_)); }

double CudaBackend::timer_stop() {
  PT_CU_CHECK(cudaEventRecord(timer_[1], compute_));
  PT_CU_CHECK(cudaEventSynchronize(timer_[1]));
  float ms = 0.0f;
  PT_CU_CHECK(cudaEventElapsedTime(&ms, timer_[0], timer_[1]));
  return static_cast<double>(ms) * 1e-3;
}

// ---- GEMM -----------------------------------------------------------------------------

// Row-major C = alpha op(A) op(B) + beta C is column-major C^T = alpha op(B)^T op(A)^T:
// cuBLAS sees each row-major matrix as its transpose with the same leading dimension.
void CudaBackend::gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
                       int64_t ldb, float beta, float* C, int64_t ldc, Precision p) {
  PT_CHECK(p == Precision::bf16 || (!A.bf16() && !B.bf16()), "gemm: a bf16 operand in an fp32 product");
  PT_CHECK((!A.bf16() && !B.bf16()) || (lda == (ta ? M : K) && ldb == (tb ? K : N) && ldc == N),
           "gemm: with a bf16 operand, every operand must be dense (lda " << lda << ", ldb " << ldb << ", ldc " << ldc << ")");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // C = beta C (cuBLAS would reject the leading dimension of an empty operand)
    PT_CHECK(ldc == N, "gemm with K = 0 wants a contiguous C: ldc " << ldc << " vs " << N);
    scale(static_cast<size_t>(M * N), beta, C);
    return;
  }
  PT_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
               ldc <= INT32_MAX,
           "gemm dimensions exceed cuBLAS's int: M " << M << ", N " << N << ", K " << K);
  if (A.bf16() || B.bf16()) return gemm_views_bf16(ta, tb, M, N, K, alpha, A, B, beta, C);
  if (p == Precision::bf16) {
    gemm_bf16(ta, tb, M, N, K, alpha, A.data, lda, 0, B.data, ldb, 0, beta, C, ldc, 0, 1);
    return;
  }
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  PT_CUBLAS_CHECK(cublasSgemm(blas_, op_b, op_a, static_cast<int>(N), static_cast<int>(M), static_cast<int>(K), &alpha,
                              B.data, static_cast<int>(ldb), A.data, static_cast<int>(lda), &beta, C,
                              static_cast<int>(ldc)));
}

void CudaBackend::gemm_strided_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                                       int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b,
                                       float beta, float* C, int64_t ldc, int64_t stride_c, int64_t batch, Precision p) {
  if (M == 0 || N == 0 || batch == 0) return;
  if (K == 0) {
    for (int64_t b = 0; b < batch; ++b) gemm(ta, tb, M, N, 0, alpha, A, lda, B, ldb, beta, C + b * stride_c, ldc, p);
    return;
  }
  PT_CHECK(M <= INT32_MAX && N <= INT32_MAX && K <= INT32_MAX && lda <= INT32_MAX && ldb <= INT32_MAX &&
               ldc <= INT32_MAX && batch <= INT32_MAX,
           "batched gemm dimensions exceed cuBLAS's int: M " << M << ", N " << N << ", K " << K << ", batch " << batch);
  if (p == Precision::bf16) {
    gemm_bf16(ta, tb, M, N, K, alpha, A, lda, stride_a, B, ldb, stride_b, beta, C, ldc, stride_c, batch);
    return;
  }
  const cublasOperation_t op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  // the row-major trick of gemm(), per batch entry
  PT_CUBLAS_CHECK(cublasSgemmStridedBatched(blas_, op_b, op_a, static_cast<int>(N), static_cast<int>(M),
                                            static_cast<int>(K), &alpha, B, static_cast<int>(ldb), stride_b, A,
                                            static_cast<int>(lda), stride_a, &beta, C, static_cast<int>(ldc), stride_c,
                                            static_cast<int>(batch)));
}

}  // namespace cuda

// ---- entry points ---------------------------------------------------------------------

bool cuda_backend_compiled() { return true; }

std::unique_ptr<Backend> make_cuda_backend(int device_index) {
  const cuda::DeviceChoice c = cuda::choose_device(device_index);
  return std::make_unique<cuda::CudaBackend>(c.device, c.local_rank, c.local_size);
}

}  // namespace pt
