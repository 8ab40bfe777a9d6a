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
#pragma once

#include "pipetrain/device.hpp"

namespace pt {

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
struct CView {
  const float* data = nullptr;
  DType dtype = DType::f32;
  CView(const float* p) : data(p) {}  // NOLINT: a float pointer is an f32 view
  CView(const float* p, DType t) : data(p), dtype(t) {}
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

}  // namespace pt
