// The host backend's oneDNN kernels (Debian's oneDNN 2.6, OpenMP runtime): matmul for gemm and
// batched gemm, convolution forward / backward data / backward weights (+ bias), in fp32 and
// bf16 (inputs rounded to bfloat16 exactly as PyTorch, fp32 accumulation, fp32 outputs).
// Contract:
//   - Operands are the Backend interface's: row-major matrices with leading dimensions and
//     batch strides, NCHW fp32 tensors, weights [c_out, c_in, k, k]. Results equal
//     Backend::gemm / conv2d_* semantics (C = alpha op(A) op(B) + beta C; dx overwritten, dw
//     and db accumulated).
//   - Primitives, their reorders and the scratch they need are created on the first call for
//     a shape and precision and cached in this object (one per backend); later calls with
//     the same shape only execute. Nothing here depends on timing: a shape runs the same
//     implementation on every rank and every run, and with one thread (the default: one
//     OpenMP thread per rank unless OMP_NUM_THREADS says otherwise) the same arithmetic, so
//     results are bitwise reproducible.
//   - dnnl.hpp stays behind this header (pimpl), so the rest of the backend does not see it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "pipetrain/backend.hpp"

namespace pt::host {

// y[i] = bf16_bits(x[i]) for i < n (vectorised; PyTorch's rounding, see backend.hpp).
void to_bf16(size_t n, const float* x, uint16_t* y);

// NCHW fp32 -> a channel-minor layout, bf16, for `groups` = N C / 16 groups of 16 channels
// of hw positions each, positions `step` values apart: 16 for oneDNN's nChw16c (aBcd16b), C
// for NHWC (acdb); y = bf16_bits of each value (blocked_layout.cpp): a bf16 convolution's
// input where its primitive chose one of them.
void nchw_to_c16_bf16(int64_t groups, int64_t hw, int64_t step, const float* x, uint16_t* y);
// The same move for an fp32 input, an exact copy.
void nchw_to_c16(int64_t groups, int64_t hw, int64_t step, const float* x, float* y);
// The way back for fp32 outputs: nChw16c or NHWC -> NCHW, an exact copy.
void c16_to_nchw(int64_t groups, int64_t hw, int64_t step, const float* x, float* y);
// Moves with an elementwise operation in the same pass (the residual block's way in and out):
//  - relu_backward_to_c16: NCHW y and dy -> dx = (y > 0 ? dy : 0) in the channel-minor layout;
//  - normalise_c16_to_nchw: a batch norm's normalisation of a channel-minor x (C channels,
//    statistics and affine per channel as BnNorm says), + add (channel-minor, fp32 or bf16,
//    when given), then ReLU (relu), written to y in NCHW: the float operations of the
//    unmoved pass.
void relu_backward_to_c16(int64_t groups, int64_t hw, int64_t step, const float* y, const float* dy, float* dx);
struct BnNorm;  // vec_math.hpp
void normalise_c16_to_nchw(int64_t groups, int64_t hw, int64_t step, const BnNorm& bn, const float* x, CView add,
                           bool relu, float* y);

// One strided-batched GEMM: C_b = alpha op(A_b) op(B_b) + beta C_b, row-major, b < batch,
// X_b = X + b * stride_x. batch == 1 is a plain gemm (strides unused).
struct GemmArgs {
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f, beta = 0.0f;
  const float* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const float* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
  const float* bias = nullptr;  // [N] added to every row of C (fp32; batch 1 only)
  // bf16 only: the operand is already a bf16 array (Backend::pack_bf16's layout; its element
  // (r, c) at r * lda + c, or ldb; batch 1), read as is instead of being converted
  bool a_bf16 = false, b_bf16 = false;
  // bf16 only: C is written as a bf16 array with row stride ldc (oneDNN rounds the fp32
  // result, bias included, to nearest even; beta = 0)
  bool c_bf16 = false;
  // A dense bf16 B (b_bf16, batch 1) that is a weight: its values change only with its version
  // (non-zero, a new one for every change: CView::version of a weight version's bf16 array). oneDNN then
  // keeps B reordered into the layout its matmul prefers for the shape, and reorders again only
  // when the version changes: the same values, so the same result bit for bit.
  uint64_t b_version = 0;
  const void* b_key = nullptr;  // the weight's identity for its kept copy (its bf16 array's address)
};

enum class ConvPass;  // below

// Whether this CPU's oneDNN has bf16 kernels (2.6: AVX512 and later; asked once, by creating a
// small bf16 matmul). Without them a bf16 product or convolution is computed by the fp32
// primitive on its operands' bf16 values (widened to fp32, exactly), with the fp32
// accumulation a bf16 kernel has, and a bf16 result is rounded from its fp32 one: bf16's
// arithmetic at fp32's speed (and with fp32-sized operand copies). PT_BF16_KERNELS=widened
// asks for that on any CPU (read when a OneDnn is made; tests compare the two).
bool onednn_bf16_native();

class OneDnn {
 public:
  OneDnn();
  ~OneDnn();
  OneDnn(const OneDnn&) = delete;
  OneDnn& operator=(const OneDnn&) = delete;

  // Requires M, N, K >= 1 (the backend handles the empty cases).
  void gemm(Precision p, const GemmArgs& a);
  // Activations as io says (Backend::conv2d_forward).
  void conv_forward(Precision p, const WindowGeom& g, int64_t n, CView x, const float* w, const float* b, float* y,
                    ConvLayouts io = {});
  void conv_backward_data(Precision p, const WindowGeom& g, int64_t n, const float* w, CView dy, float* dx,
                          ConvLayouts io = {});
  // dw += dL/dw when dw is not null; db += dL/db when db is not null.
  void conv_backward_weights(Precision p, const WindowGeom& g, int64_t n, CView x, CView dy, float* dw,
                             float* db, ConvLayouts io = {});
  // Both: the data pass, then the weights pass reading the data pass's converted dy where the
  // two primitives take it in the same layout (one conversion instead of two; bitwise the two
  // calls above).
  void conv_backward(Precision p, const WindowGeom& g, int64_t n, CView x, const float* w, CView dy,
                     float* dx, float* dw, float* db, ConvLayouts io = {});
  // Backend::conv_layout: the layout every pass's primitive picks for x, y, dx and dy, where
  // that is one of nChw16c and NHWC for all of them (else nchw).
  ImageLayout conv_layout(Precision p, const WindowGeom& g, int64_t n);

  // What a convolution's plan keeps for one pass (its ports' layout copies, bf16 input copies
  // and accumulators: make_port's allocations), from the primitive descriptors the plan would
  // build, without building it; *scratchpad: the pass's scratchpad (oneDNN's global
  // scratchpad grows to the largest; zero in oneDNN's default scratchpad mode, which the
  // convolutions use: each primitive then holds its own); *held (when given): the heap the
  // plan keeps for the pass besides its ports (the primitive with its scratchpad, and for the
  // forward the plan's hint descriptor), measured once per process, shape and pass.
  // conv_plans_bytes: the ports' bytes over the plans built so far.
  int64_t conv_pass_bytes(Precision p, const WindowGeom& g, int64_t n, ConvPass pass, bool bias, int64_t* scratchpad,
                          ConvLayouts io = {}, int64_t* held = nullptr) const;
  int64_t conv_plans_bytes() const;

  // Implementation names (primitive_desc::impl_info_str) of the primitives this object uses
  // for a shape: creates (and caches) them when needed.
  std::string gemm_impl(Precision p, const GemmArgs& a);
  // "fwd <impl>, bwd_data <impl>, bwd_weights <impl>"
  std::string conv_impl(Precision p, const WindowGeom& g, int64_t n);

  // Forget the kept weight layouts whose plain operand lies in [lo, hi) (its buffer is about
  // to be freed or reused). kept_weight_bytes: the bytes of the ones kept now.
  void forget_weights(const void* lo, const void* hi);
  void set_kept_layouts(bool on);  // default: kept_weight_layouts() (tests turn it on and off)
  int64_t kept_weight_bytes() const;
  // bf16 computed by the fp32 primitives on widened operands (onednn_bf16_native)
  bool widens_bf16() const;
  // Bytes the widened copies hold (at most 3 x 4 MiB: larger products run in blocks)
  int64_t widened_bytes() const;

  // Seconds in this object's calls so far: preparing operands (bf16 rounding, reorders in and
  // out) and executing the primitives.
  struct Clock {
    double prepare_s = 0, execute_s = 0;
  };
  const Clock& clock() const { return clock_; }

  struct Impl;

 private:
  void gemm_widened(const GemmArgs& a);
  void gemm_widened_whole(const GemmArgs& a);
  void gemm_widened_block(const GemmArgs& a, int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t kb);
  std::unique_ptr<Impl> impl_;
  Clock clock_;
};

// Seconds since the last lap (or construction): the oneDNN and BLAS calls split their time with it.
class Lap {
 public:
  Lap();
  double operator()();

 private:
  double t_;
};

// The oneDNN effective ISA as oneDNN names it ("avx512_core_bf16", "avx512_core_amx", ...).
std::string onednn_isa_name();
// "2.6.3"
std::string onednn_version();
// Applies the one-thread default (OMP_NUM_THREADS unset: one OpenMP thread for oneDNN).
void onednn_threads_default();

// ---- the fp32 kernel rule (kernel_choice.cpp; measured by bench/kernels.sh) -----------------
// true: the fp32 gemm of this shape runs on oneDNN; false: OpenBLAS through KokkosBlas.
// A pure function of the shape and of the CPU's class (avx512: oneDNN's effective ISA is an
// AVX-512 one; the classes differ without): the same on every rank and every run of a machine.
bool onednn_has_avx512();
bool onednn_wins_gemm_fp32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch,
                           bool avx512 = onednn_has_avx512());
// The three passes of a convolution; the rule may pick a different library for each (they
// are independent computations, so the split backward stays bitwise the fused one).
enum class ConvPass { forward, backward_data, backward_weights };
// true: this fp32 convolution pass runs on oneDNN; false: im2col + OpenBLAS.
bool onednn_wins_conv_fp32(const WindowGeom& g, int64_t n, ConvPass pass);
// The rule in words, for the banner and docs.
std::string fp32_rule_description();

}  // namespace pt::host
