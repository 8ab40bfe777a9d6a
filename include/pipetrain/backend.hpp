// The ops interface: every numerical kernel a layer, loss or optimizer needs, on raw
// pointers in the backend's memory. The host backend implements it with Kokkos and
// KokkosBlas; the CUDA backend with cuBLAS, cuDNN and CUDA kernels. Layers never see
// which one runs them.
//
// Primitives (= 0) are what every backend implements on its own memory. The few virtuals
// with a body are compositions of primitives (round + pack, add); fused kernels (linear + bias,
// the attention core) are apart, in fused.hpp, handed out by fused(). None of the defaults
// allocates or copies through the host, so a backend that runs a model on its device never
// falls back to the host on a hot path. A backend that lacks a bf16 primitive does not
// compile (the CUDA backend implements every one, cuda_bf16.cu).
//
// Types say what the data is (dtype.hpp): an operand that may be bf16 is a CView or View,
// whose dtype says how it is stored; a product's compute precision is an argument of the
// call (Precision), never state of the backend. fp32 products are IEEE fp32; bf16 products
// round their fp32 operands to bf16 as PyTorch's autocast does (ties to even), read bf16
// operands as they are, and accumulate in fp32.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "pipetrain/device.hpp"
#include "pipetrain/dtype.hpp"
#include "pipetrain/fused.hpp"

namespace pt {

// x rounded to the nearest bfloat16 (ties to even), returned as the float of equal value:
// exactly PyTorch's float -> torch.bfloat16 conversion (c10::BFloat16's round_to_nearest_even;
// a NaN stays a NaN, the quiet NaN 0x7FC0; subnormals are rounded, never flushed).
inline uint16_t bf16_bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;  // NaN
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_to_float(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float x;
  std::memcpy(&x, &u, sizeof x);
  return x;
}
inline float bf16_round(float x) { return bf16_to_float(bf16_bits(x)); }

// Geometry of a 2-D convolution or pooling window over NCHW batches.
struct WindowGeom {
  int64_t c_in = 0, h_in = 0, w_in = 0;   // input per sample
  int64_t c_out = 0, h_out = 0, w_out = 0; // output per sample
  int64_t kernel = 1, stride = 1, padding = 0;
};

// What a backend's kernels keep for themselves once a convolution of n samples has run (the
// memory model's `workspace`): buffers cached with the shape's plan (layout copies, bf16
// copies, accumulators), what the library's primitives hold themselves (their kernels' tables
// and buffers: `held`), the library's scratchpad (one, grown to the largest) and the
// backend's own scratch (one, grown to the largest).
struct ConvKernelBytes {
  int64_t kept = 0, held = 0, scratchpad = 0, scratch = 0;
};


class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;
  virtual std::string describe() const = 0;  // e.g. "cpu (Kokkos Serial, OpenBLAS SkylakeX)"

  // Memory in the backend's space. alloc() returns zeroed memory.
  virtual float* alloc(size_t n) = 0;
  virtual void release(float* p) = 0;
  virtual void copy(float* dst, const float* src, size_t n) = 0;        // within the backend
  virtual void to_host(float* host, const float* src, size_t n) = 0;    // backend -> host
  virtual void from_host(float* dst, const float* host, size_t n) = 0;  // host -> backend
  virtual void fill(float* x, float v, size_t n) = 0;
  virtual void synchronize() {}  // wait for queued work (CUDA); no-op on the host

  // Timing a region of queued work (the profiler times each layer with it): timer_start()
  // marks the start, timer_stop() waits for the work queued since and returns its seconds.
  // Host: a steady clock; CUDA: events on the compute stream.
  virtual void timer_start() {
    synchronize();
    timer_t0_ = std::chrono::steady_clock::now();
  }
  virtual double timer_stop() {
    synchronize();
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - timer_t0_).count();
  }

  // Where this backend's time went, cumulative since it was made: inside the matrix-product
  // and convolution libraries (product_s), and preparing their operands (convert_s: bf16
  // rounding and layout reorders on the way in and out). `pipetrain profile` prints each
  // layer's shares. The host measures both; other backends report zeros (not measured).
  struct KernelClock {
    double product_s = 0, convert_s = 0;
  };
  virtual KernelClock kernel_clock() const { return {}; }

  // C[M,N] = alpha * op(A) * op(B) + beta * C, row-major, op(X) = X or X^T, computed in
  // precision p. A and B may be bf16 views (p = bf16 only; then dense: lda = ta ? M : K,
  // ldb = tb ? K : N), read as they are: the same result, bit for bit, as the f32 view of
  // their values. C is fp32.
  virtual void gemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, CView A, int64_t lda,
                    CView B, int64_t ldb, float beta, float* C, int64_t ldc, Precision p) = 0;
  virtual void axpy(size_t n, float a, const float* x, float* y) = 0;  // y += a x
  // y = a + b (a residual sum); y may alias a or b. Default: copy, then axpy (the same bits).
  virtual void add(size_t n, const float* a, const float* b, float* y);
  // y[i] = bf16_round(x[i]) (fp32 storage, bf16 values: compute copies of weights, bf16
  // messages); y may alias x.
  virtual void round_bf16(size_t n, const float* x, float* y) = 0;
  // Both of round_bf16(x -> y) and pack_bf16(x -> packed) (a weight version's fp32 compute
  // copy and its bf16 array: WeightStore), in one pass where the backend can. Default: the two calls.
  virtual void round_pack_bf16(size_t n, const float* x, float* y, float* packed);
  virtual void scale(size_t n, float a, float* x) = 0;

  // Linear helpers: y[r, :] += b; db += column sums of dy (an f32 or bf16 view; the sums in
  // fp32, in the same order either way).
  virtual void bias_add_rows(float* y, const float* b, int64_t rows, int64_t cols) = 0;
  virtual void bias_grad_rows(CView dy, float* db, int64_t rows, int64_t cols) = 0;

  // Convolution over n samples in precision p. w: [c_out, c_in, k, k]; b may be null. The
  // activations lie as `io` says (the same values, bit for bit, in any layout). x may be a
  // bf16 view (p = bf16, io.in the layout conv_layout names for the shape, so the kernels read
  // it as it is): the same result, bit for bit, as the f32 view of its values.
  virtual void conv2d_forward(const WindowGeom& g, int64_t n, CView x, const float* w, const float* b, float* y,
                              Precision p, ConvLayouts io = {}) = 0;
  // dw, db accumulate (+=); dx is overwritten. Any of dx, dw, db may be null: the split
  // backward asks for dx alone (I) and for dw, db alone (W), each bitwise as in one call.
  // dy may be a bf16 view on the same terms as x (io.out conv_layout's), read as it is.
  virtual void conv2d_backward(const WindowGeom& g, int64_t n, CView x, const float* w, CView dy, float* dx,
                               float* dw, float* db, Precision p, ConvLayouts io = {}) = 0;
  // The layout this backend's kernels for the convolution g of n samples take their input and
  // output in, where a caller keeping its activations so saves the moves around every pass
  // (host: the one oneDNN picks, nchw16c or nhwc, where every pass's primitive picks it for x,
  // y, dx and dy and C % 16 == 0); nchw where there is none (the default).
  virtual ImageLayout conv_layout(const WindowGeom& g, int64_t n, Precision p) { return ImageLayout::nchw; }
  // y = x moved from layout `from` to `to` (n images of C channels, HW positions; exact). A
  // bf16 y (from nchw into a layout conv_layout names) holds each value's bf16_bits: a bf16
  // convolution's input, moved and rounded in one pass.
  virtual void relayout(int64_t n, int64_t C, int64_t HW, ImageLayout from, const float* x, ImageLayout to,
                        View y) = 0;

  // Pooling. Max pooling stores the flat input index of each maximum in `argmax`.
  // ConvKernelBytes of a convolution of n samples with (bias) a bias: its forward, and with
  // `train` its weight pass and (data) its data pass, in precision p, its activations as io
  // says; nothing by default.
  virtual ConvKernelBytes conv_kernel_bytes(const WindowGeom& g, int64_t n, bool bias, bool train, bool data,
                                            Precision p, ConvLayouts io = {}) {
    return {};
  }
  virtual void maxpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y, int32_t* argmax) = 0;
  virtual void maxpool_backward(const WindowGeom& g, int64_t n, const float* dy, const int32_t* argmax, float* dx) = 0;
  virtual void avgpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y) = 0;
  // x and y (the forward's input and output) are for cuDNN's pooling backward, whose API
  // takes them; the host kernel does not read them.
  virtual void avgpool_backward(const WindowGeom& g, int64_t n, const float* x, const float* y, const float* dy,
                                float* dx) = 0;

  // Elementwise activations over n values.
  virtual void relu_forward(size_t n, const float* x, float* y) = 0;
  // y may be a bf16 view: the mask y > 0 of its values (where y is the bf16 of an fp32
  // output, a positive value below 2^-134 rounds to +0 and masks its gradient, the one
  // difference from the fp32 output's mask).
  virtual void relu_backward(size_t n, CView y, const float* dy, float* dx) = 0;
  // The same over n NCHW images of C channels and HW positions, dx written in layout `to`
  // (the move in the same pass; a backend whose conv_layout names no such layout need only
  // take to = nchw).
  virtual void relu_backward_relayout(int64_t n, int64_t C, int64_t HW, const float* y, const float* dy,
                                      ImageLayout to, float* dx) = 0;
  // Exact (erf) GELU, y = x Phi(x), and its backward dx = dy (Phi(x) + x phi(x)), of x's
  // values (an f32 or bf16 view: a bf16 policy keeps the GELU's input as bf16, as autocast
  // does); a bf16 y or dx is written as the bf16 of each fp32 value.
  virtual void gelu_forward(size_t n, CView x, View y) = 0;
  virtual void gelu_backward(size_t n, CView x, const float* dy, View dx) = 0;
  // GELU forward that keeps what its backward needs: y = gelu(x), and x replaced by
  // gelu'(x) = Phi(x) + x phi(x) (the factor gelu_backward applies), so the backward is
  // mul(dy, x): one multiply instead of the normal CDF again. Bitwise what gelu_forward and
  // gelu_backward (of ones) give. A bf16 y (an operand only products read) is written as the
  // bf16 of each fp32 value; x stays fp32.
  virtual void gelu_forward_deriv(size_t n, float* x, View y) = 0;
  virtual void mul(size_t n, const float* a, const float* b, View y) = 0;  // y = a * b elementwise (f32 or bf16 y)

  // Layer norm over `cols` features of each of `rows` samples; stats holds (mean, rstd) per row.
  virtual void layernorm_forward(int64_t rows, int64_t cols, float eps, const float* x, const float* gamma,
                                 const float* beta, float* y, float* stats) = 0;
  // dx, or dgamma and dbeta (together), may be null (the split backward's halves).
  virtual void layernorm_backward(int64_t rows, int64_t cols, const float* x, const float* gamma,
                                  const float* stats, const float* dy, float* dx, float* dgamma, float* dbeta) = 0;

  // Inverted dropout: element j of sample s is kept when uniform(key, (sample0+s)*features+j) >= p,
  // and scaled by 1/(1-p). The mask is recomputed in backward from the same key.
  virtual void dropout_forward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0, const float* x,
                               float* y) = 0;
  virtual void dropout_backward(int64_t n, int64_t features, float p, uint64_t key, int64_t sample0,
                                const float* dy, float* dx) = 0;

  // Softmax cross entropy: loss[i] = -log softmax(logits[i])[label[i]]; probs kept for backward
  // (probs may alias logits: the probabilities overwrite them).
  virtual void softmax_xent_forward(int64_t n, int64_t classes, const float* logits, const int32_t* labels,
                                    float* loss, float* probs) = 0;
  // dlogits = scale * (probs - onehot(labels)); dlogits may alias probs.
  virtual void softmax_xent_backward(int64_t n, int64_t classes, const float* probs, const int32_t* labels,
                                     float scale, float* dlogits) = 0;
  // Softmax cross entropy over classes split across ranks (a vocabulary-parallel head): this
  // rank holds columns [c0, c0 + classes) of every row, and three local passes around two
  // all-reduces (the caller's) give every rank the loss and its columns' probabilities without
  // gathering the logits:
  //   shard_max:    mx[i] = the shard's row maximum                 -> MAX over the ranks;
  //   shard_sums:   sums[i] = sum_c exp(logits[i, c] - mx[i]) over the shard, sums[n + i] =
  //                 the label's logit where the label lies in the shard, else 0 -> SUM;
  //   shard_finish: loss[i] = log(sums[i]) + mx[i] - sums[n + i], probs = exp(logits - mx) /
  //                 sums[i] on the shard (probs may alias logits).
  // One rank (c0 = 0, all classes) gives softmax_xent_forward's values up to the order of the
  // sums. shard_backward: dlogits = scale (probs - onehot(labels - c0)) on the shard (a label
  // outside it adds nothing); dlogits may alias probs.
  virtual void softmax_xent_shard_max(int64_t n, int64_t classes, const float* logits, float* mx) = 0;
  virtual void softmax_xent_shard_sums(int64_t n, int64_t classes, int64_t c0, const float* logits,
                                       const int32_t* labels, const float* mx, float* sums) = 0;
  virtual void softmax_xent_shard_finish(int64_t n, int64_t classes, const float* logits, const float* mx,
                                         const float* sums, float* loss, float* probs) = 0;
  virtual void softmax_xent_shard_backward(int64_t n, int64_t classes, int64_t c0, const float* probs,
                                           const int32_t* labels, float scale, float* dlogits) = 0;
  // Number of rows whose argmax equals the label (ties: lowest index).
  virtual int64_t count_correct(int64_t n, int64_t classes, const float* logits, const int32_t* labels) = 0;

  // ---- sequences (embedding, attention, language-model head) -------------------------------

  // Batched GEMM: for b in [0, batch), C_b = alpha op(A_b) op(B_b) + beta C_b with
  // X_b = X + b * strideX, row-major as gemm (the host backend wants contiguous operands).
  virtual void gemm_strided_batched(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha,
                                    const float* A, int64_t lda, int64_t stride_a, const float* B, int64_t ldb,
                                    int64_t stride_b, float beta, float* C, int64_t ldc, int64_t stride_c,
                                    int64_t batch, Precision p) = 0;
  // Head-major permutation: x [n, T, parts, H, dh] -> y [parts, n, H, T, dh] (split) and
  // back (merge). Pure copies.
  virtual void heads_split(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* x, float* y) = 0;
  virtual void heads_merge(int64_t n, int64_t T, int64_t parts, int64_t H, int64_t dh, const float* y, float* x) = 0;
  // Causal softmax over the rows of `batches` [T, T] matrices: p[b, i, j] = softmax over
  // j <= i of s[b, i, :], 0 for j > i; max and sum in fp32. p may alias s.
  virtual void causal_softmax_forward(int64_t batches, int64_t T, const float* s, float* p) = 0;
  // ds = p * (dp - sum_j p * dp) row by row (0 above the diagonal); ds may alias dp.
  virtual void causal_softmax_backward(int64_t batches, int64_t T, const float* p, const float* dp, float* ds) = 0;
  // y[s, t, :] = wte[tokens[s, t], :] + wpe[t, :] (tokens are exact floats in [0, V)). A
  // vocabulary-parallel part holds the rows [v0, v0 + rows) of the token table (wte: its
  // row 0 is token v0): a token outside them adds nothing, and wpe may be null (no position
  // term). The whole table is v0 = 0, rows = V.
  virtual void embedding_forward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                 const float* wte, const float* wpe, float* y) = 0;
  // dwte[tokens[s, t] - v0, :] += dy[s, t, :] (tokens in the part's rows only) and
  // dwpe[t, :] += dy[s, t, :], every element's additions in (s, t) order on every backend
  // (deterministic, no atomics).
  virtual void embedding_backward(int64_t n, int64_t T, int64_t D, const float* tokens, int64_t v0, int64_t rows,
                                  const float* dy, float* dwte, float* dwpe) = 0;
  // y[r] = mean of x[r, 0..cols) (global average pooling, per-sample mean of token losses);
  // backward: dx[r, c] = dy[r] / cols.
  virtual void mean_rows(int64_t rows, int64_t cols, const float* x, float* y) = 0;
  virtual void mean_rows_backward(int64_t rows, int64_t cols, const float* dy, float* dx) = 0;

  // ---- batch normalisation over image batches, per channel (spatial), fp32 statistics --------
  // x, y, dy and dx lie in `layout` (the same bits in any).

  // Training: batch mean and biased variance over (n, H, W) normalise x; save_mean and
  // save_invstd ([C]) keep (mean, 1/sqrt(var + eps)) for backward; when running_mean is not
  // null, running = (1 - momentum) running + momentum batch, the variance unbiased (PyTorch).
  virtual void batchnorm_forward_training(int64_t n, int64_t C, int64_t HW, float eps, float momentum, const float* x,
                                          const float* gamma, const float* beta, float* y, float* save_mean,
                                          float* save_invstd, float* running_mean, float* running_var,
                                          ImageLayout layout = ImageLayout::nchw) = 0;
  // Evaluation: y = (x - running_mean) / sqrt(running_var + eps) * gamma + beta.
  virtual void batchnorm_forward_inference(int64_t n, int64_t C, int64_t HW, float eps, const float* x,
                                           const float* gamma, const float* beta, const float* running_mean,
                                           const float* running_var, float* y,
                                           ImageLayout layout = ImageLayout::nchw) = 0;
  // dx is overwritten; dgamma and dbeta accumulate; dx, or dgamma and dbeta (together), may
  // be null (the split backward's halves; each bitwise as in the full call). A bf16 dx holds
  // the fp32 result rounded to nearest even (bf16_bits), as the product that reads it would
  // round it (the host backend; others may refuse it).
  virtual void batchnorm_backward(int64_t n, int64_t C, int64_t HW, float eps, const float* x, const float* gamma,
                                  const float* save_mean, const float* save_invstd, const float* dy, View dx,
                                  float* dgamma, float* dbeta, ImageLayout layout = ImageLayout::nchw) = 0;

  // Reductions returned to the host.
  virtual double sum(size_t n, const float* x) = 0;
  virtual bool all_finite(size_t n, const float* x) = 0;
  // Sum of the squares of n floats in double, in a fixed order (element k on lane k mod 16,
  // then the lanes in order): the same bits for the same values whatever the layout (the
  // global gradient norm, train.clip_grad_norm). A backend may sum in another fixed order
  // (the CUDA backend: a fixed tree that depends on n alone), so long as the same values give
  // the same bits whatever the buffer they lie in.
  virtual double sum_squares(size_t n, const float* x) = 0;

  // Optimizer updates on flat buffers (PyTorch semantics, see src/optim/optimizer.cpp).
  virtual void sgd_update(size_t n, float* w, const float* g, float* momentum_buf, float lr, float momentum,
                          float weight_decay, bool nesterov, float grad_scale) = 0;
  // AdamW scalars are doubles: 1 - beta, 1 - lr*wd and the bias corrections are formed in double
  // (as PyTorch does with Python floats) and rounded once.
  virtual void adamw_update(size_t n, float* w, const float* g, float* m, float* v, double lr, double beta1,
                            double beta2, double eps, double weight_decay, int64_t step, float grad_scale) = 0;

  // bf16 stage messages (train.precision = "bf16") and bf16 operands: pack_bf16 stores
  // n floats as ceil(n/2) 32-bit words, two bf16 per word (half the bytes), each rounded with
  // bf16_bits (exact for values that are bf16 already: round_bf16 above); element i is the
  // i-th 16-bit half in memory order, so the words are a dense bf16 array. packed may equal x
  // (in place); an odd n leaves the last word's upper half 0. unpack_bf16 restores the values
  // exactly, in place or not.
  virtual void pack_bf16(size_t n, const float* x, float* packed) = 0;
  virtual void unpack_bf16(size_t n, const float* packed, float* x) = 0;
  // Integer label buffers live in the backend too (copied from the data loader).
  virtual int32_t* alloc_int(size_t n) = 0;
  virtual void release_int(int32_t* p) = 0;
  virtual void labels_from_host(int32_t* dst, const int32_t* host, size_t n) = 0;

  // The fused kernels this backend offers (fused.hpp): its own where it fuses, else the
  // default compositions of the primitives above.
  virtual FusedKernels& fused() { return default_fused_; }

 private:
  std::chrono::steady_clock::time_point timer_t0_{};
  FusedKernels default_fused_{*this};
};

// The host backend (Kokkos Serial + OpenBLAS through KokkosBlas).
std::unique_ptr<Backend> make_host_backend();
// Bytes a host buffer of `bytes` keeps resident once written (the host backend writes every
// buffer it allocates): buffers of 2 MiB or more sit on 2 MiB pages while huge pages are on
// (PT_HUGE_PAGES is not 0 and the kernel's transparent huge pages are not "never") and take
// whole ones; other buffers of 128 KiB or more take whole 4 KiB pages; smaller ones their bytes.
// huge_pages = false: an allocation that never asks for them (labels, std::vector).
int64_t host_resident_bytes(int64_t bytes, bool huge_pages = true);
// Whether the host backend keeps each bf16 weight matrix (a weight version's bf16 array,
// CView::version) that the input gradient dx = dy W reads also in the layout oneDNN's matmul
// prefers for that product, reordered once per weight version: off unless PT_KEPT_LAYOUTS=1
// in the environment (docs/JOBS.md). The memory model counts those copies
// (Layer::product_weight_values).
bool kept_weight_layouts();
// The CUDA backend; throws a clear error in a build without CUDA=1.
std::unique_ptr<Backend> make_cuda_backend(int device_index);
bool cuda_backend_compiled();

// ---- kernel measurements (src/kernels/host/kernel_info.cpp) --------------------------------

// GFLOP/s of this backend's gemm at M = N = K = 1024 in precision p: median of `reps` timed
// calls after one warm-up. On the CPU this
// is the oneDNN matmul (the kernel every 1024^3 fp32 and bf16 gemm uses); on a GPU cuBLAS.
// The profiler's and bench/kernels.sh's "peak" for the achieved fractions.
double matmul_peak_gflops(Backend& be, Precision p, int reps = 5);
// Achieved GFLOP/s of work of `flops` floating-point operations done in `seconds` (0 when
// either is not positive).
double achieved_gflops(double flops, double seconds);
// One line for the run banner: oneDNN's version, effective ISA (dnnl_get_effective_cpu_isa)
// and the implementation names of the matmul chosen for a representative shape (the MLP's
// [128, 784] x [784, 512]) in fp32 and bf16, e.g. "oneDNN 2.6.3 avx512_core_bf16 (matmul
// 128x784x512: fp32 brg:avx512_core, bf16 brg:avx512_core_bf16)"; on an AMX Xeon the bf16
// name is brg:avx512_core_amx. blas_description() (commands.hpp) appends it to OpenBLAS's.
std::string onednn_description();

// An owning buffer in a backend's memory.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& be, size_t n) : be_(&be), n_(n), p_(n ? be.alloc(n) : nullptr) {}
  ~Buffer() { reset(); }
  Buffer(Buffer&& o) noexcept : be_(o.be_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; o.n_ = 0; }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) { reset(); be_ = o.be_; n_ = o.n_; p_ = o.p_; o.p_ = nullptr; o.n_ = 0; }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  void reset() { if (p_) be_->release(p_); p_ = nullptr; n_ = 0; }
  float* data() { return p_; }
  const float* data() const { return p_; }
  size_t size() const { return n_; }
  size_t bytes() const { return n_ * sizeof(float); }

 private:
  Backend* be_ = nullptr;
  size_t n_ = 0;
  float* p_ = nullptr;
};

}  // namespace pt
