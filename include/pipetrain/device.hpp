// What the kernels run on and in: the device (run.device) and the compute precision
// (train.precision), enumerations the deck and profile files read by name once.
#pragma once
#include <string>

#include "pipetrain/enum_names.hpp"

namespace pt {

enum class Device { cpu, cuda };
template <>
struct EnumNames<Device> {
  static constexpr const char* names[] = {"cpu", "cuda"};
};

// Compute precision of the matrix kernels (docs/PRECISION.md). fp32: IEEE single throughout.
// bf16: gemm, gemm_strided_batched, conv2d_forward and conv2d_backward round their floating
// inputs (A, B; x, w, dy) to bfloat16 with round-to-nearest-even (bf16_round in backend.hpp),
// multiply with fp32 accumulation and write fp32 outputs (C; y, dx, dw, db). Every other op,
// the bias additions and all buffers stay fp32.
enum class Precision { fp32, bf16 };
template <>
struct EnumNames<Precision> {
  static constexpr const char* names[] = {"fp32", "bf16"};
};
const char* precision_name(Precision p);                 // "fp32" | "bf16"
Precision precision_from_name(const std::string& name);  // "bf16" -> bf16, anything else fp32 (profile files)

}  // namespace pt
