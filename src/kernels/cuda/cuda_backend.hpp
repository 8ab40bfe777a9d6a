// The CUDA backend's class declaration, shared by its translation units (backend, kernels,
// cuDNN, transport). One device per process, chosen from the node-local rank; every op is
// queued on the rank's compute stream; the copy stream carries the transport's staging
// copies. Only host code sees this header (nvcc compiles it as host C++).
#pragma once
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "pipetrain/backend.hpp"

namespace pt::cuda {

// A pinned host buffer that grows on demand (cudaMallocHost), for staging copies.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept : p_(o.p_), cap_(o.cap_) { o.p_ = nullptr; o.cap_ = 0; }
  void* reserve(size_t bytes);  // contents are not kept when it grows
  void* data() const { return p_; }
  size_t capacity() const { return cap_; }

 private:
  void* p_ = nullptr;
  size_t cap_ = 0;
};

// Geometry + batch size: the key of a cached cuDNN convolution or pooling plan.
struct GeomKey {
  std::array<int64_t, 9> v;
  bool operator<(const GeomKey& o) const { return v < o.v; }
};

struct ConvPlan;  // cuda_dnn.cu
struct PoolPlan;  // cuda_dnn.cu
struct BnPlan;    // cuda_dnn.cu

class CudaBackend;

// The CUDA backend's fused kernels (fused.hpp): linear + bias packing a bf16 output from
// device scratch (cuda_bf16.cu); no attention kernel (the layers compose it).
class CudaFused final : public FusedKernels {
 public:
  explicit CudaFused(CudaBackend& cb);
  // a bf16 y: the fp32 result in device scratch, then packed into y (its ceil(rows out / 2)
  // floats); an f32 y: the default composition
  void linear_forward(int64_t rows, int64_t in, int64_t out, CView x, CView w, const float* b, View y,
                      Precision p) override;

 private:
  CudaBackend& cb_;
};

class CudaBackend final : public Backend {
 public:
  // device: the CUDA device ordinal this process uses; local_rank/local_size: its place
  // among the ranks of its node (for describe()).
  CudaBackend(int device, int local_rank, int local_size);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  Device device() const override { return Device::cuda; }
  std::string describe() const override;

  float* alloc(size_t n) override;
  void release(float* p) override;
  void copy(float* dst, const float* src, size_t n) override;
  void to_host(float* host, const float* src, size_t n) override;
  void from_host(float* dst, const float* host, size_t n) override;
  void fill(float* x, float v, size_t n) override;
  void synchronize() override;
  void timer_start() override;
  double timer_stop() override;

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
            int64_t ldb, float beta, float* C, int64_t ldc, Precision p) override;
  void axpy(size_t n, float a, const float* x, float* y) override;
  void round_bf16(size_t n, const float* x, float* y) override;
  // bf16 operands on the device, no host staging and no per-call allocation (cuda_bf16.cu)
  void pack_bf16(size_t n, const float* x, float* packed) override;
  void unpack_bf16(size_t n, const float* packed, float* x) override;
  void scale(size_t n, float a, float* x) override;
  void bias_add_rows(float* y, const float* b, int64_t rows, int64_t cols) override;
  void bias_grad_rows(CView dy, float* db, int64_t rows, int64_t cols) override;  // bf16 dy: cuda_bf16.cu

  // Activations in NCHW only (conv_layout keeps the default: nchw); other layouts are refused.
  // x an f32 view only (conv_layout is nchw here, so no layer keeps a bf16 copy for it).
  void conv2d_forward(const WindowGeom& g, int64_t n, CView x, const float* w, const float* b, float* y, Precision p,
                      ConvLayouts io = {}) override;
  void conv2d_backward(const WindowGeom& g, int64_t n, CView x, const float* w, CView dy, float* dx, float* dw,
                       float* db, Precision p, ConvLayouts io = {}) override;
  void relayout(int64_t n, int64_t C, int64_t HW, ImageLayout from, const float* x, ImageLayout to,
                View y) override;
  void relu_backward_relayout(int64_t n, int64_t C, int64_t HW, const float* y, const float* dy, ImageLayout to,
                              float* dx) override;
  void maxpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y, int32_t* argmax) override;
  void maxpool_backward(const WindowGeom& g, int64_t n, const float* dy, const int32_t* argmax, float* dx) override;
  void avgpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y) override;
  void avgpool_backward(const WindowGeom& g, int64_t n, const float* x, const float* y, const float* dy,
                        float* dx) override;

  void relu_forward(size_t n, const float* x, float* y) override;
  void relu_backward(size_t n, CView y, const float* dy, float* dx) override;
  void gelu_forward(size_t n, CView x, View y) override;
  void gelu_backward(size_t n, CView x, const float* dy, View dx) override;
  // a bf16 y: each value's bf16 written directly (y needs only its ceil(n / 2) floats)
  void gelu_forward_deriv(size_t n, float* x, View y) override;
  void mul(size_t n, const float* a, const float* b, View y) override;
  void layernorm_forward(int64_t rows, int64_t cols, float eps, const float* x, const float* gamma,
                         const float* beta, float* y, float* stats) override;
  void layernorm_backward(int64_t rows, int64_t cols, const float* x, const float* gamma, const float* stats,
                          const float* dy, float* dx, float* dgamma, float* dbeta) override;
  void dropout_forward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0, const float* x,
                       float* y) override;
  void dropout_backward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0, const float* dy,
                        float* dx) override;
  void softmax_xent_forward(int64_t n, int64_t classes, const float* logits, const int32_t* labels, float* loss,
                            float* probs) override;
  void softmax_xent_backward(int64_t n, int64_t classes, const float* probs, const int32_t* labels, float scale,
                             float* dlogits) override;
  void softmax_xent_shard_max(int64_t n, int64_t classes, const float* logits, float* mx) override;
  void softmax_xent_shard_sums(int64_t n, int64_t classes, int64_t c0, const float* logits, const int32_t* labels,
                               const float* mx, float* sums) override;
  void softmax_xent_shard_finish(int64_t n, int64_t classes, const float* logits, const float* mx, const float* sums,
                                 float* loss, float* probs) override;
  void softmax_xent_shard_backward(int64_t n, int64_t classes, int64_t c0, const float* probs, const int32_t* labels,
                                   float scale, float* dlogits) override;
  int64_t count_correct(int64_t n, int64_t classes, const float* logits, const int32_t* labels) override;
  void gemm_strided_batched(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
                            int64_t lda, int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta,
                            float* C, int64_t ldc, int64_t stride_c, int64_t batch, Precision p) override;
  void heads_split(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* x, float* y) override;
  void heads_merge(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* y, float* x) override;
  void causal_softmax_forward(int64_t batches, int64_t T, const float* s, float* p) override;
  void causal_softmax_backward(int64_t batches, int64_t T, const float* p, const float* dp, float* ds) override;
  void embedding_forward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                         const float* wte, const float* wpe, float* y) override;
  void embedding_backward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                          const float* dy, float* dwte, float* dwpe) override;
  void mean_rows(int64_t rows, int64_t cols, const float* x, float* y) override;
  void mean_rows_backward(int64_t rows, int64_t cols, const float* dy, float* dx) override;
  void batchnorm_forward_training(int64_t n, int64_t C, int64_t HW, float eps, float momentum, const float* x,
                                  const float* gamma, const float* beta, float* y, float* save_mean, float* save_invstd,
                                  float* running_mean, float* running_var,
                                  ImageLayout layout = ImageLayout::nchw) override;
  void batchnorm_forward_inference(int64_t n, int64_t C, int64_t HW, float eps, const float* x, const float* gamma,
                                   const float* beta, const float* running_mean, const float* running_var,
                                   float* y, ImageLayout layout = ImageLayout::nchw) override;
  void batchnorm_backward(int64_t n, int64_t C, int64_t HW, float eps, const float* x, const float* gamma,
                          const float* save_mean, const float* save_invstd, const float* dy, View dx, float* dgamma,
                          float* dbeta, ImageLayout layout = ImageLayout::nchw) override;
  double sum(size_t n, const float* x) override;
  double sum_squares(size_t n, const float* x) override;
  bool all_finite(size_t n, const float* x) override;
  void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum, float weight_decay,
                  bool nesterov, float grad_scale) override;
  void adamw_update(size_t n, float* w, const float* g, float* m, float* v, double lr, double beta1, double beta2,
                    double eps, double weight_decay, int64_t step, float grad_scale) override;
  int32_t* alloc_int(size_t n) override;
  void release_int(int32_t* p) override;
  void labels_from_host(int32_t* dst, const int32_t* host, size_t n) override;

  // For the transport and the tests.
  int ordinal() const { return device_; }
  cudaStream_t compute_stream() const { return compute_; }
  cudaStream_t copy_stream() const { return copy_; }
  bool tf32() const { return tf32_; }
  void make_current() const;  // cudaSetDevice(ordinal())

 private:
  void upload(void* dst, const void* host, size_t bytes);  // async, through the pinned ring
  void* dnn_workspace(size_t bytes);
  void release_dnn_plans();
  ConvPlan& conv_plan(const WindowGeom& g, int64_t n, bool bf16);  // bf16: bf16 tensors, fp32 compute
  PoolPlan& pool_plan(const WindowGeom& g, int64_t n);  // average pooling
  BnPlan& bn_plan(int64_t n, int64_t C, int64_t HW);    // batch norm descriptors
  float* bn_scratch(size_t n);  // device scratch for the outputs a split half does not want
  // bf16 compute: device scratch slot (grows, contents not kept), the rounded bf16 copy of n
  // floats in a slot, widening, the bf16 GEMM (cuda_bf16.cu) and convolutions (cuda_dnn.cu).
  void* bf16_scratch(int slot, size_t bytes);
  const uint16_t* to_bf16(int slot, const float* x, size_t n);
  void zero_odd_tail(size_t n, View y);  // a bf16 y of odd n: the last word's upper half 0
  void from_bf16(const uint16_t* x, size_t n, float* y, bool accumulate);  // y = or += widened x
  void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
                 int64_t stride_a, const float* B, int64_t ldb, int64_t stride_b, float beta, float* C, int64_t ldc,
                 int64_t stride_c, int64_t batch);
  // a gemm with a bf16 view among its operands (dense, batch 1): bf16 views go to cuBLAS as
  // they are, f32 ones are rounded into scratch as gemm_bf16 does (cuda_bf16.cu)
  void gemm_views_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, CView B, float beta,
                       float* C);
  void bias_grad_rows_bf16(const float* dy, float* db, int64_t rows, int64_t cols);
  // the cuBLAS call of gemm_bf16 on operands already in bf16 (rounded or packed)
  void gemm_bf16_ops(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const uint16_t* a,
                     int64_t lda, int64_t stride_a, const uint16_t* b, int64_t ldb, int64_t stride_b, float beta,
                     float* C, int64_t ldc, int64_t stride_c, int64_t batch);
  double reduce_partials(unsigned parts);  // k_sum_final over red_dev_'s parts, to the host
  void conv2d_forward_bf16(const WindowGeom& g, int64_t n, const float* x, const float* w, const float* b, float* y);
  void conv2d_backward_bf16(const WindowGeom& g, int64_t n, const float* x, const float* w, const float* dy,
                            float* dx, float* dw, float* db);

  int device_ = 0, local_rank_ = 0, local_size_ = 1;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0;
  size_t total_mem_ = 0;
  bool tf32_ = false;          // PT_CUDA_TF32=1: cuBLAS/cuDNN may use TF32 tensor cores
  size_t ws_limit_ = 0;        // cuDNN workspace cap for algorithm choice (bytes)
  cudaStream_t compute_ = nullptr, copy_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  cudnnHandle_t dnn_ = nullptr;
  cudaEvent_t timer_[2] = {nullptr, nullptr};
  // reductions: device partials and result, pinned host result
  double* red_dev_ = nullptr;             // [kRedBlocks + 1] doubles
  unsigned long long* cnt_dev_ = nullptr;  // one counter
  PinnedBuffer red_host_;
  // upload ring: pinned buffers reused once their copy (event) completed
  struct Upload {
    PinnedBuffer buf;
    cudaEvent_t done = nullptr;
    bool pending = false;
  };
  std::vector<Upload> uploads_;
  size_t next_upload_ = 0;
  // cuDNN
  void* ws_ = nullptr;
  size_t ws_size_ = 0;
  std::map<GeomKey, ConvPlan*> conv_plans_;
  std::map<GeomKey, PoolPlan*> pool_plans_;
  std::map<GeomKey, BnPlan*> bn_plans_;
  float* bn_scratch_ = nullptr;
  size_t bn_scratch_size_ = 0;
  struct Scratch {
    void* p = nullptr;
    size_t bytes = 0;
  };
  std::array<Scratch, 4> bf16_scratch_{};  // 0: A / x, 1: B / w, 2: dy, 3: outputs
  friend class CudaFused;  // its linear packs from this backend's scratch
  CudaFused fused_{*this};

 public:
  FusedKernels& fused() override { return fused_; }
  static constexpr int kRedBlocks = 1024;
  static constexpr size_t kMaxStagedUpload = size_t{32} << 20;  // larger uploads copy synchronously
};

// The device this process uses: (device_index + node-local rank) modulo the visible GPU
// count. The node-local rank comes from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED) on
// MPI_COMM_WORLD (collective on the first call, cached); 0 without MPI.
struct DeviceChoice {
  int device = 0, count = 0, local_rank = 0, local_size = 1;
};
DeviceChoice choose_device(int device_index);

}  // namespace pt::cuda
