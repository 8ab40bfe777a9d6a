// The host backend's class declaration, shared by its kernel files.
#pragma once
#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "onednn.hpp"
#include "pipetrain/backend.hpp"

namespace pt::host {

// Which library runs the fp32 GEMMs and convolutions: the measured per-shape rule
// (kernel_choice.cpp, the default), or one family for every shape (tests and
// bench/kernels.sh compare them). bf16 always runs on oneDNN.
enum class Fp32Kernels { rule, openblas, onednn };

class HostBackend;

// The host's fused kernels (fused.hpp): linear + bias on oneDNN's matmul (host_gemm.cpp), the
// causal attention core (attention_kernel.cpp) and batch norm + add + ReLU (batchnorm.cpp).
class HostFused final : public FusedKernels {
 public:
  explicit HostFused(HostBackend& hb);
  void linear_forward(int64_t rows, int64_t in, int64_t out, CView x, CView w, const float* b, View y,
                      Precision p) override;
  // the kernel unless PT_FUSED_ATTENTION=0 (then the layers compose: heads_split, batched
  // oneDNN GEMMs, softmax, heads_merge; docs/JOBS.md)
  bool attention() const override { return attention_; }
  void attention_forward(const AttentionGeom& g, CView qkv, View P, View o) override;
  void attention_backward(const AttentionGeom& g, CView qkv, CView P, const float* dout, View dqkv) override;
  // the epilogue in the normalisation's pass (batchnorm.cpp)
  void batchnorm_forward(bool training, const BnArgs& a, const float* x, View y, CView add,
                         bool relu) override;

 private:
  // bf16: the products on oneDNN's matmul
  void attention_forward_bf16(const AttentionGeom& g, CView qkv, View P, View o);
  void attention_backward_bf16(const AttentionGeom& g, CView qkv, CView P, const float* dout, View dqkv);
  HostBackend& hb_;
  bool attention_ = true;
};

class HostBackend final : public Backend {
 public:
  HostBackend();
  Device device() const override { return Device::cpu; }
  std::string describe() const override;

  KernelClock kernel_clock() const override;  // oneDNN's clock plus the OpenBLAS GEMMs

  float* alloc(size_t n) override;
  void release(float* p) override;
  void copy(float* dst, const float* src, size_t n) override;
  void to_host(float* host, const float* src, size_t n) override;
  void from_host(float* dst, const float* host, size_t n) override;
  void fill(float* x, float v, size_t n) override;

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda, CView B,
            int64_t ldb, float beta, float* C, int64_t ldc, Precision p) override;
  void axpy(size_t n, float a, const float* x, float* y) override;
  void round_bf16(size_t n, const float* x, float* y) override;
  void scale(size_t n, float a, float* x) override;
  void pack_bf16(size_t n, const float* x, float* packed) override;
  void unpack_bf16(size_t n, const float* packed, float* x) override;
  void round_pack_bf16(size_t n, const float* x, float* y, float* packed) override;
  void bias_add_rows(float* y, const float* b, int64_t rows, int64_t cols) override;
  void bias_grad_rows(CView dy, float* db, int64_t rows, int64_t cols) override;
  void gelu_forward_deriv(size_t n, float* x, View y) override;
  void mul(size_t n, const float* a, const float* b, View y) override;
  void add(size_t n, const float* a, const float* b, float* y) override;

  void conv2d_forward(const WindowGeom& g, int64_t n, CView x, const float* w, const float* b, float* y, Precision p,
                      ConvLayouts io = {}) override;
  void conv2d_backward(const WindowGeom& g, int64_t n, CView x, const float* w, CView dy, float* dx, float* dw,
                       float* db, Precision p, ConvLayouts io = {}) override;
  ImageLayout conv_layout(const WindowGeom& g, int64_t n, Precision p) override;
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
  bool all_finite(size_t n, const float* x) override;
  double sum_squares(size_t n, const float* x) override;
  void sgd_update(size_t n, float* w, const float* g, float* buf, float lr, float momentum, float weight_decay,
                  bool nesterov, float grad_scale) override;
  void adamw_update(size_t n, float* w, const float* g, float* m, float* v, double lr, double beta1, double beta2,
                    double eps, double weight_decay, int64_t step, float grad_scale) override;
  int32_t* alloc_int(size_t n) override;
  void release_int(int32_t* p) override;
  void labels_from_host(int32_t* dst, const int32_t* host, size_t n) override;

  ConvKernelBytes conv_kernel_bytes(const WindowGeom& g, int64_t n, bool bias, bool train, bool data,
                                    Precision p, ConvLayouts io = {}) override;
  void set_fp32_kernels(Fp32Kernels k) { fp32_kernels_ = k; }
  Fp32Kernels fp32_kernels() const { return fp32_kernels_; }
  OneDnn& onednn();  // created on first use

 private:
  float* workspace(size_t n);  // grows once to the largest request, reused afterwards
  // today's kernels: KokkosBlas (OpenBLAS) GEMM on contiguous operands, im2col convolution
  void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, const float* B,
                 float beta, float* C);
  void im2col_conv_forward(const WindowGeom& g, int64_t n, const float* x, const float* w, const float* b, float* y);
  void im2col_conv_backward(const WindowGeom& g, int64_t n, const float* x, const float* w, const float* dy,
                            float* dx, float* dw, float* db);
  bool onednn_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch, Precision p) const;
  bool onednn_conv(const WindowGeom& g, int64_t n, ConvPass pass, Precision p) const;
  struct ImCopies;  // conv_pool.cpp: NCHW copies around an im2col pass
  std::vector<float> layout_ws_;  // their memory (grown once)
  // a weight version's bf16 B (CView::version) read by a single product: oneDNN may keep it in
  // that product's layout, keyed by (address, version)
  static void key_weight(GemmArgs& a, CView B);

  static constexpr size_t kHugePage = size_t{2} << 20;
  bool huge_pages_ = true;            // large buffers on 2 MiB pages (PT_HUGE_PAGES=0: off)
  std::unordered_set<float*> huge_;  // buffers from alloc on 2 MiB pages (posix_memalign)
  std::unordered_map<const float*, size_t> bytes_;  // every live buffer's bytes: release forgets
                                                    // what oneDNN kept from it
  std::vector<float> ws_;
  std::unique_ptr<OneDnn> dnn_;
  double blas_s_ = 0;  // seconds in blas_gemm
  Fp32Kernels fp32_kernels_ = Fp32Kernels::rule;
  friend class HostFused;  // its kernels run on this backend's oneDNN and GEMM rule
  HostFused fused_{*this};

 public:
  FusedKernels& fused() override { return fused_; }
};

}  // namespace pt::host
