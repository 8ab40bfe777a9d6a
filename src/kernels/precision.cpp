// The bf16 message helpers of the Backend interface (backend.hpp): two bf16 values packed
// per 32-bit word and unpacked exactly. Defaults through host copies, exact on every device:
// a bf16 value is the upper 16 bits of its float32 (bf16_bits / bf16_to_float).
#include <cstring>
#include <string>
#include <vector>

#include "pipetrain/backend.hpp"

namespace pt {
namespace {

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float float_of(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

}  // namespace

Precision precision_from_name(const std::string& name) { return enum_from_name<Precision>(name).value_or(Precision::fp32); }

void Backend::pack_bf16(size_t n, const float* x, float* packed) {
  std::vector<float> h(n), w((n + 1) / 2);
  to_host(h.data(), x, n);
  for (size_t k = 0; k < w.size(); ++k) {
    const uint32_t lo = bf16_bits(h[2 * k]), hi = 2 * k + 1 < n ? bf16_bits(h[2 * k + 1]) : 0u;
    w[k] = float_of(lo | (hi << 16));
  }
  from_host(packed, w.data(), w.size());
}

void Backend::unpack_bf16(size_t n, const float* packed, float* x) {
  std::vector<float> w((n + 1) / 2), h(n);
  to_host(w.data(), packed, w.size());
  for (size_t i = 0; i < n; ++i) h[i] = bf16_to_float(static_cast<uint16_t>(i % 2 ? bits_of(w[i / 2]) >> 16 : bits_of(w[i / 2]) & 0xFFFFu));
  from_host(x, h.data(), n);
}

}  // namespace pt
