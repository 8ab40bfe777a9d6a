// The bf16 helpers of the Backend interface (backend.hpp): rounding to bfloat16 values and
// packing two of them per 32-bit word for messages. Defaults through host copies, exact on
// every device: a bf16 value is the upper 16 bits of its float32.
#include <cstring>
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

// Round to nearest even on the 16 dropped bits; NaN stays a (quiet) NaN.
float to_bf16(float f) {
  uint32_t u = bits_of(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu)) return float_of((u | 0x00400000u) & 0xFFFF0000u);
  u += 0x7FFFu + ((u >> 16) & 1u);
  return float_of(u & 0xFFFF0000u);
}

}  // namespace

void Backend::round_bf16(size_t n, const float* x, float* y) {
  if (device() == Device::cpu) {  // host memory; y may alias x
    for (size_t i = 0; i < n; ++i) y[i] = to_bf16(x[i]);
    return;
  }
  std::vector<float> h(n);
  to_host(h.data(), x, n);
  for (float& v : h) v = to_bf16(v);
  from_host(y, h.data(), n);
}

void Backend::pack_bf16(size_t n, const float* x, float* packed) {
  std::vector<float> h(n), w((n + 1) / 2);
  to_host(h.data(), x, n);
  for (size_t k = 0; k < w.size(); ++k) {
    const uint32_t lo = bits_of(h[2 * k]) >> 16, hi = 2 * k + 1 < n ? bits_of(h[2 * k + 1]) >> 16 : 0u;
    w[k] = float_of(lo | (hi << 16));
  }
  from_host(packed, w.data(), w.size());
}

void Backend::unpack_bf16(size_t n, const float* packed, float* x) {
  std::vector<float> w((n + 1) / 2), h(n);
  to_host(w.data(), packed, w.size());
  for (size_t i = 0; i < n; ++i) {
    const uint32_t word = bits_of(w[i / 2]);
    h[i] = float_of((i % 2 ? word >> 16 : word & 0xFFFFu) << 16);
  }
  from_host(x, h.data(), n);
}

}  // namespace pt
