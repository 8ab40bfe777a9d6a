// What a buffer holds, said by its type: DType, and the typed views (CView, View) that the
// Backend's kernels take where an operand may be fp32 or bf16.
//   f32  - one value per float slot;
//   bf16 - two bfloat16 values per 32-bit word, Backend::pack_bf16's layout: element i is the
//          i-th 16-bit half in memory order, so n values take ceil(n / 2) float slots, a
//          dense bf16 array.
// Backend buffers stay allocated in floats (Buffer); the view's dtype says how to read one.
// A float pointer converts to an f32 view implicitly, so fp32 calls read as they always did;
// a bf16 view is made explicitly (as_bf16, or View{p, dtype}), so nothing becomes bf16 by
// accident. The compute precision of a product is the caller's (Precision, device.hpp), never
// state of the backend: a bf16 operand is only legal in a bf16 product.
// ParamView: a layer's parameters as the layers read them, the fp32 values and (where the
// stage holds the weight version in bf16) the same values as a bf16 array, with the
// version's id; a product takes operand(dtype). No pointer registry maps one to the other.
// ImageLayout: how a batch of images lies (NCHW, or channel-minor as a convolution library
// takes it), for the operations that take image batches (Backend's convolution, batch norm).
#pragma once

#include <cstdint>
#include <type_traits>

#include "pipetrain/device.hpp"

namespace pt {

// How a batch of n images of C channels and HW positions lies in memory. nchw: each channel's
// H W plane in turn. The other two need C % 16 == 0: channels in groups of 16, the 16 values
// of a group at one position consecutive; nchw16c (oneDNN's nChw16c): a group's HW positions
// 16 values apart, the groups of an image in turn; nhwc: an image's C values of one position
// consecutive (C values between positions). The convolution of the layer that keeps its
// activations so between its own operations (the residual block) asks conv_layout.
enum class ImageLayout : uint8_t { nchw, nchw16c, nhwc };
// The step between positions of a group of 16 channels (16 or C), 0 for nchw.
inline int64_t layout_step(ImageLayout l, int64_t C) {
  return l == ImageLayout::nchw ? 0 : l == ImageLayout::nchw16c ? 16 : C;
}
// A convolution's activations: x and dx in `in`, y and dy in `out`.
struct ConvLayouts {
  ImageLayout in = ImageLayout::nchw, out = ImageLayout::nchw;
};

enum class DType : unsigned char { f32, bf16 };

// The dtype a layer keeps the operands that only its products read in, under a precision
// policy: bf16 under train.precision = "bf16" (the products round them to bf16 anyway),
// f32 otherwise.
inline DType operand_dtype(Precision p) { return p == Precision::bf16 ? DType::bf16 : DType::f32; }

// Float slots that count values of dtype t take (bf16: two per slot, ceil(count / 2)). A
// layer carves a kept bf16 tensor of count values per sample as n * operand_floats(count)
// floats, which hold the n * count packed values.
inline int64_t operand_floats(int64_t count, DType t) { return t == DType::bf16 ? (count + 1) / 2 : count; }

// A read-only view of values in a backend's memory.
// version: nonzero for a weight version's compute copy (ParamView::operand), whose values stay
// as they are while (data, version) does: a backend may keep what it derives from them (a
// copy in its GEMM's own layout) keyed by both. 0: any other operand.
struct CView {
  const float* data = nullptr;
  DType dtype = DType::f32;
  uint64_t version = 0;
  CView(const float* p) : data(p) {}  // NOLINT: a float pointer is an f32 view
  CView(const float* p, DType t, uint64_t v = 0) : data(p), dtype(t), version(v) {}
  bool bf16() const { return dtype == DType::bf16; }
};

// A writable view: where a result goes, and in which dtype it is written.
struct View {
  float* data = nullptr;
  DType dtype = DType::f32;
  View(float* p) : data(p) {}  // NOLINT: a float pointer is an f32 view
  View(float* p, DType t) : data(p), dtype(t) {}
  bool bf16() const { return dtype == DType::bf16; }
  operator CView() const { return {data, dtype}; }  // NOLINT
};

inline CView as_bf16(const float* p) { return {p, DType::bf16}; }
inline View as_bf16(float* p) { return {p, DType::bf16}; }

// A layer's parameters (or a slice of them) as the layers read them: the fp32 values, which a
// float pointer converts to and from implicitly (norms, biases, embeddings, convolutions read
// them so), and, where the stage holds the weight version in bf16 (WeightStore::read), the
// same values as a dense bf16 array and that version's id. An offset (w + k) moves both. A
// product reads operand(dtype): the bf16 array under a bf16 operand policy where there is one,
// else the fp32 values (which a bf16 product rounds to the same bf16 values: the same result
// bit for bit, for a conversion the array saves).
class ParamView {
 public:
  ParamView(const float* f32 = nullptr) : f32_(f32) {}  // NOLINT: fp32 values only
  ParamView(const float* f32, const float* bf16, uint64_t version)
      : f32_(f32), bf16_(reinterpret_cast<const unsigned char*>(bf16)), version_(version) {}
  operator const float*() const { return f32_; }  // NOLINT: the fp32 values
  template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
  ParamView operator+(I k) const {
    ParamView v = *this;
    v.f32_ += k;
    if (bf16_) v.bf16_ += 2 * static_cast<int64_t>(k);
    return v;
  }
  CView operand(DType t) const {
    if (t == DType::bf16 && bf16_) return {reinterpret_cast<const float*>(bf16_), DType::bf16, version_};
    return {f32_};
  }
  bool has_bf16() const { return bf16_ != nullptr; }

 private:
  const float* f32_ = nullptr;
  const unsigned char* bf16_ = nullptr;  // element k at byte 2 k (any k: a view may start mid-word)
  uint64_t version_ = 0;
};

}  // namespace pt
