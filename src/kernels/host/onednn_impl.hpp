// Inside OneDnn (onednn.hpp): the cached plans of the matmul and convolution primitives,
// shared by onednn_matmul.cpp and onednn_conv.cpp. Only those two files include dnnl.hpp.
// Contract: a plan is built once per key (shape, strides, precision, scalars) and then only
// executed; every dnnl::error becomes a pt::Error naming the operation and the shape.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <dnnl.hpp>

#include "onednn.hpp"
#include "pipetrain/error.hpp"

namespace pt::host {

// A tensor as one primitive argument: the caller's memory (user layout; for a bf16 input that
// the primitive takes in the caller's layout, a bf16 view as given or an fp32 tensor's
// rounded copy in `bf16`) and the primitive's
// (its preferred layout), with the move between them (user -> primitive for inputs, which
// also rounds a bf16 input; primitive -> user for outputs) when they differ: a bf16 input
// (or an fp32 input's exact copy) from NCHW to nChw16c or NHWC and an fp32 output back to
// NCHW by blocked_layout.cpp's kernels (`groups16` groups of 16 channels of `hw` positions,
// `step` values apart in the primitive's layout), any other pair by a oneDNN reorder.
struct Port {
  dnnl::memory user, prim;
  dnnl::reorder reorder;                   // empty when prim is user or groups16 moves it
  int64_t groups16 = 0, hw = 0, step = 0;  // groups16 > 0: blocked_layout.cpp moves it
  bool rounds = false;                     // that move rounds to bf16 (else an exact copy)
  // A bf16 input the primitive takes in the caller's layout: a caller's bf16 view is read as
  // given; an fp32 tensor is rounded into `bf16`, which the first such call allocates
  // (callers that pass bf16 views, as the residual block does, never make it).
  bool bf16_as_given = false;
  std::vector<uint16_t> bf16;
  std::vector<float> acc;           // accumulated outputs: the result before it is added
  std::vector<float> wide;          // widened bf16 (OneDnn::Impl::widen_bf16): the input's bf16 values
  bool reorders() const { return static_cast<bool>(reorder) || groups16 > 0; }
};

struct MatmulPlan {
  dnnl::matmul prim;
  dnnl::memory a, b, c, bias;  // handles set per call (bias: only in plans with one)
  std::string impl;
  // A weight B (GemmArgs::b_version) in the layout the primitive chose (format_tag::any) where
  // that differs from the plain one: b is then the plain bf16 source of to_layout, and each
  // weight keeps its reordered copy (OneDnn::Impl::kept).
  bool kept_layout = false;
  dnnl::memory::desc b_layout;
  dnnl::reorder to_layout;
};

// A weight's copy in its plan's layout and the version it holds (GemmArgs::b_version).
struct KeptWeight {
  dnnl::memory mem;
  uint64_t version = 0;
  int64_t bytes = 0;
};

// One convolution direction: forward (src = x, wei = w, dst = y, bias = b), backward data
// (src = dx, wei = w, dst = dy) or backward weights (src = x, wei = dw, dst = dy, bias = db).
struct ConvOp {
  dnnl::primitive prim;
  std::string impl;
  Port src, wei, dst;
  dnnl::memory bias;          // f32 [c_out]; forward: the caller's b; backward: into bias_acc
  std::vector<float> bias_acc;
  bool ready = false;
};

struct ConvPlan {
  ConvLayouts io;                                  // the caller's activations
  int layout = -1;                                 // OneDnn::conv_layout's answer, once asked
  dnnl::convolution_forward::primitive_desc hint;  // forward without bias: the backward's hint
  ConvOp fwd[2];      // [has bias]
  ConvOp data;        // backward data
  ConvOp weights[2];  // backward weights [with diff bias]
};

using MatmulKey = std::array<int64_t, 18>;
using ConvKey = std::array<int64_t, 13>;

// !onednn_bf16_native(), or PT_BF16_KERNELS=widened
bool bf16_widened_wanted();

struct OneDnn::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  std::map<MatmulKey, std::unique_ptr<MatmulPlan>> matmuls;
  std::map<ConvKey, std::unique_ptr<ConvPlan>> convs;
  std::vector<uint16_t> bf_a, bf_b;  // bf16 GEMM operands (dense)
  // no bf16 kernels (onednn_bf16_native): a bf16 product's operands as dense fp32 copies of
  // their bf16 values, and its fp32 result before a bf16 C is rounded from it
  bool widen_bf16 = bf16_widened_wanted();
  std::vector<float> wide_a, wide_b, wide_c;
  // The precision of the primitives that compute in precision p: fp32 for a widened bf16.
  Precision kernels(Precision p) const { return p == Precision::bf16 && widen_bf16 ? Precision::fp32 : p; }
  // weights in their plans' layouts, by (the plain operand's address, plan), while on
  bool keep_layouts = kept_weight_layouts();
  std::map<std::pair<const void*, const MatmulPlan*>, KeptWeight> kept;

  MatmulPlan& matmul_plan(Precision p, const GemmArgs& a);
  ConvPlan& conv_plan(Precision p, const WindowGeom& g, int64_t n, ConvLayouts io);
  ConvOp& conv_fwd(Precision p, ConvPlan& plan, const WindowGeom& g, int64_t n, bool bias);
  ConvOp& conv_data(Precision p, ConvPlan& plan, const WindowGeom& g, int64_t n);
  ConvOp& conv_weights(Precision p, ConvPlan& plan, const WindowGeom& g, int64_t n, bool bias);
};

// dnnl::error -> pt::Error with what was being done.
[[noreturn]] void onednn_fail(const std::string& what, const dnnl::error& e);

}  // namespace pt::host
