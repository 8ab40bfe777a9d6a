// Moves between pipetrain's NCHW activations and the two channel-minor layouts oneDNN's
// convolutions choose, for C a multiple of 16, around the convolutions (onednn_conv.cpp's feed
// and drain). In both, the 16 channels of a group at one position are 16 consecutive values,
// and positions follow each other `step` values apart:
//  - nChw16c (format tag aBcd16b; AVX-512 kernels): step 16, group g's first value at 16 g HW;
//  - NHWC (acdb; the AMX brgconv kernels): step C, image n's group j's first value at
//    n C HW + 16 j.
// Both are the same formula: with per = step / 16 groups in an image's row of channels,
// group g = n per + j starts at n per 16 HW + 16 j.
//  - nchw_to_c16_bf16: a bf16 input, y = bf16_bits of each value (PyTorch's rounding:
//    nearest even, subnormals kept, NaN 0x7FC0);
//  - nchw_to_c16: an fp32 input, an exact copy;
//  - c16_to_nchw: an fp32 output back, an exact copy;
//  - HostBackend::relayout: the two exact copies behind Backend::relayout;
//  - relu_backward_to_c16, normalise_c16_to_nchw: a move with ReLU's backward or a batch
//    norm's normalisation in the same pass (HostBackend::relu_backward_relayout, the fused
//    batch norm with an NCHW output).
// A group of 16 channels is 16 planes of H W values in NCHW and H W rows of 16 values here,
// so each 16 x 16 tile is transposed in registers (GCC vector shuffles); H W % 16 trailing
// positions go one by one. Why not oneDNN's reorders, which make the same bits: on a Zen 4
// core, 128x16x28x28, fp32 -> bf16 blocked took 0.42 ms in cache and 0.68 from memory there,
// 0.18 and 0.41 here; blocked -> NCHW 0.19 and 0.63 there, 0.20 and 0.44 here (2026-12-04).
// On the AMX Xeon, oneDNN's generic reorders into and out of NHWC (jit:uni, jit:blk) took as
// long as the convolutions between them (ResNet bf16, ONEDNN_VERBOSE, 2026-12-06), and its
// fp32 reorder into nChw16c (jit:blk) 0.32 ms a call against 1.1 ms for the convolution.
#include "host_backend.hpp"
#include "onednn.hpp"
#include "pipetrain/error.hpp"
#include "vec_math.hpp"

namespace pt::host {
namespace {

typedef uint64_t vec8q __attribute__((vector_size(64)));

template <class T, class U>
inline T bits_as(U v) {
  static_assert(sizeof(T) == sizeof(U), "same size");
  T r;
  std::memcpy(&r, &v, sizeof r);
  return r;
}

const vec16i kLo32 = {0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23};
const vec16i kHi32 = {8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
const vec8q kLo64 = {0, 8, 1, 9, 2, 10, 3, 11}, kHi64 = {4, 12, 5, 13, 6, 14, 7, 15};
const vec8q kLo128 = {0, 1, 8, 9, 2, 3, 10, 11}, kHi128 = {4, 5, 12, 13, 6, 7, 14, 15};
const vec8q kLo256 = {0, 1, 2, 3, 8, 9, 10, 11}, kHi256 = {4, 5, 6, 7, 12, 13, 14, 15};

// One stage of a transpose on 64-bit units: out[2i], out[2i + 1] take the `lo` and `hi`
// shuffles of a[f] and a[f + step], where f runs over the first halves of blocks of 2 step
// (step 2: 0, 1, 4, 5; step 4: 0 .. 3). Each stage doubles the unit that holds one column.
template <int N>
void pair_stage(const vec8q* a, int step, const vec8q& lo, const vec8q& hi, vec8q* out) {
  for (int i = 0; i < N / 2; ++i) {
    const int f = (i / step) * 2 * step + i % step;
    out[2 * i] = __builtin_shuffle(a[f], a[f + step], lo);
    out[2 * i + 1] = __builtin_shuffle(a[f], a[f + step], hi);
  }
}

// r[i] lane j -> o[j] lane i: a 16 x 16 transpose of 32-bit values, the unit that holds one
// column of consecutive rows growing from 64 bits (after the first shuffle) to 512.
inline __attribute__((always_inline)) void transpose32(const vec16i (&r)[16], vec16i (&o)[16]) {
  vec8q a[16], b[16], c[16], d[16];
  for (int k = 0; k < 8; ++k) {
    a[2 * k] = bits_as<vec8q>(__builtin_shuffle(r[2 * k], r[2 * k + 1], kLo32));
    a[2 * k + 1] = bits_as<vec8q>(__builtin_shuffle(r[2 * k], r[2 * k + 1], kHi32));
  }
  pair_stage<16>(a, 2, kLo64, kHi64, b);
  pair_stage<16>(b, 4, kLo128, kHi128, c);
  pair_stage<16>(c, 8, kLo256, kHi256, d);
  for (int j = 0; j < 16; ++j) o[j] = bits_as<vec16i>(d[j]);
}

// b[c] lane j: the bf16 bits (low half) of channel c at position j -> 16 rows of 16 bf16
// values at out (channel c of position j at out[16 j + c]). Channels pair into 32-bit words
// first (2k low, 2k + 1 high); three stages then grow the unit holding one position from 32
// bits (2 channels) to 256 (16 channels): two positions per vector, in position order.
void transpose_bf16(const vec16i (&b)[16], uint16_t* out) {
  vec16i w[8];
  for (int k = 0; k < 8; ++k) w[k] = b[2 * k] | (b[2 * k + 1] << 16);
  vec8q a[8], c[8], d[8];
  for (int k = 0; k < 4; ++k) {
    a[2 * k] = bits_as<vec8q>(__builtin_shuffle(w[2 * k], w[2 * k + 1], kLo32));
    a[2 * k + 1] = bits_as<vec8q>(__builtin_shuffle(w[2 * k], w[2 * k + 1], kHi32));
  }
  pair_stage<8>(a, 2, kLo64, kHi64, c);
  pair_stage<8>(c, 4, kLo128, kHi128, d);
  std::memcpy(out, d, sizeof d);
}

// For each group of 16 channels: tile(from, to, p) for every full run of 16 positions from p,
// then tail(from, to, p) for each position left over; `from` is the group's first value in
// NCHW (16 g hw), `to` in the channel-minor layout of the given step. An image's groups go
// position run by position run, so in NHWC each run's rows of C values are written (or read)
// whole, one after the other.
template <class Tile, class Tail>
void for_blocks16(const char* what, int64_t groups, int64_t hw, int64_t step, Tile tile, Tail tail) {
  PT_CHECK(step % 16 == 0 && step > 0 && groups % (step / 16) == 0,
           what << ": step " << step << " for " << groups << " groups of 16 channels");
  const int64_t per = step / 16;
  for (int64_t image = 0; image < groups / per; ++image) {
    const int64_t g0 = image * per, to0 = image * per * 16 * hw;
    int64_t p = 0;
    for (; p + 16 <= hw; p += 16)
      for (int64_t j = 0; j < per; ++j) tile((g0 + j) * 16 * hw, to0 + j * 16, p);
    for (; p < hw; ++p)
      for (int64_t j = 0; j < per; ++j) tail((g0 + j) * 16 * hw, to0 + j * 16, p);
  }
}

// 16 rows of 16 floats, src_ld apart -> their transpose, 16 rows dst_ld apart (exact).
void transpose_tile(const float* src, int64_t src_ld, float* dst, int64_t dst_ld) {
  vec16i r[16], o[16];
  for (int i = 0; i < 16; ++i) r[i] = bits_as<vec16i>(load(src + i * src_ld));
  transpose32(r, o);
  for (int i = 0; i < 16; ++i) store(dst + i * dst_ld, bits_as<vec16>(o[i]));
}

}  // namespace

void nchw_to_c16_bf16(int64_t groups, int64_t hw, int64_t step, const float* x, uint16_t* y) {
  for_blocks16(
      "nchw_to_c16_bf16", groups, hw, step,
      [&](int64_t from, int64_t to, int64_t p) {
        vec16i b[16];
        for (int c = 0; c < 16; ++c) b[c] = bf16_bits16(load(x + from + c * hw + p));
        alignas(64) uint16_t t[256];
        transpose_bf16(b, t);
        for (int i = 0; i < 16; ++i) std::memcpy(y + to + (p + i) * step, t + 16 * i, 32);
      },
      [&](int64_t from, int64_t to, int64_t p) {
        for (int c = 0; c < 16; ++c) y[to + p * step + c] = bf16_bits(x[from + c * hw + p]);
      });
}

void nchw_to_c16(int64_t groups, int64_t hw, int64_t step, const float* x, float* y) {
  for_blocks16(
      "nchw_to_c16", groups, hw, step,
      [&](int64_t from, int64_t to, int64_t p) { transpose_tile(x + from + p, hw, y + to + p * step, step); },
      [&](int64_t from, int64_t to, int64_t p) {
        for (int c = 0; c < 16; ++c) y[to + p * step + c] = x[from + c * hw + p];
      });
}

void c16_to_nchw(int64_t groups, int64_t hw, int64_t step, const float* x, float* y) {
  for_blocks16(
      "c16_to_nchw", groups, hw, step,
      [&](int64_t from, int64_t to, int64_t p) { transpose_tile(x + to + p * step, step, y + from + p, hw); },
      [&](int64_t from, int64_t to, int64_t p) {
        for (int c = 0; c < 16; ++c) y[from + c * hw + p] = x[to + p * step + c];
      });
}

void relu_backward_to_c16(int64_t groups, int64_t hw, int64_t step, const float* y, const float* dy, float* dx) {
  for_blocks16(
      "relu_backward_to_c16", groups, hw, step,
      [&](int64_t from, int64_t to, int64_t p) {
        vec16i r[16], o[16];
        for (int c = 0; c < 16; ++c) {
          const vec16 yv = load(y + from + c * hw + p), d = load(dy + from + c * hw + p);
          r[c] = bits_as<vec16i>(yv > 0.0f ? d : 0.0f);
        }
        transpose32(r, o);
        for (int i = 0; i < 16; ++i) store(dx + to + (p + i) * step, bits_as<vec16>(o[i]));
      },
      [&](int64_t from, int64_t to, int64_t p) {
        for (int c = 0; c < 16; ++c) {
          const int64_t k = from + c * hw + p;
          dx[to + p * step + c] = y[k] > 0.0f ? dy[k] : 0.0f;
        }
      });
}

void normalise_c16_to_nchw(int64_t groups, int64_t hw, int64_t step, const BnNorm& bn, const float* x, CView add,
                           bool relu, float* y) {
  const int64_t G = bn.C / 16;
  auto c0_of = [&](int64_t from) { return (from / (16 * hw)) % G * 16; };
  for_blocks16(
      "normalise_c16_to_nchw", groups, hw, step,
      [&](int64_t from, int64_t to, int64_t p) {
        const int64_t c0 = c0_of(from);
        vec16i r[16], o[16];
        for (int i = 0; i < 16; ++i) {
          const int64_t at = to + (p + i) * step;
          r[i] = bits_as<vec16i>(bn_normalised16(bn, c0, load(x + at), add, at, relu));
        }
        transpose32(r, o);
        for (int c = 0; c < 16; ++c) store(y + from + c * hw + p, bits_as<vec16>(o[c]));
      },
      [&](int64_t from, int64_t to, int64_t p) {
        const int64_t at = to + p * step;
        alignas(64) float v[16];
        store(v, bn_normalised16(bn, c0_of(from), load(x + at), add, at, relu));
        for (int c = 0; c < 16; ++c) y[from + c * hw + p] = v[c];
      });
}

// Backend::relayout: NCHW to and from nChw16c or NHWC by the moves above; nChw16c and NHWC
// are the same bytes for C = 16 (a copy), and no move goes between them otherwise.
void HostBackend::relayout(int64_t n, int64_t C, int64_t HW, ImageLayout from, const float* x, ImageLayout to,
                           View yv) {
  const int64_t count = n * C * HW;
  if (yv.bf16()) {
    PT_CHECK(from == ImageLayout::nchw && to != ImageLayout::nchw && C % 16 == 0,
             "relayout to bf16: from NCHW into a channel-minor layout only (C " << C << ")");
    return nchw_to_c16_bf16(n * C / 16, HW, layout_step(to, C), x, reinterpret_cast<uint16_t*>(yv.data));
  }
  float* y = yv.data;
  if (from == to || (C == 16 && from != ImageLayout::nchw && to != ImageLayout::nchw))
    return copy(y, x, static_cast<size_t>(count));
  PT_CHECK(C % 16 == 0 && (from == ImageLayout::nchw || to == ImageLayout::nchw),
           "relayout of " << C << " channels between two channel-minor layouts (or C % 16 != 0)");
  if (from == ImageLayout::nchw) nchw_to_c16(n * C / 16, HW, layout_step(to, C), x, y);
  else c16_to_nchw(n * C / 16, HW, layout_step(from, C), x, y);
}

void HostBackend::relu_backward_relayout(int64_t n, int64_t C, int64_t HW, const float* y, const float* dy,
                                         ImageLayout to, float* dx) {
  if (to == ImageLayout::nchw) return relu_backward(static_cast<size_t>(n * C * HW), y, dy, dx);
  PT_CHECK(C % 16 == 0, "relu_backward_relayout: a channel-minor layout needs C % 16 == 0 (C " << C << ")");
  relu_backward_to_c16(n * C / 16, HW, layout_step(to, C), y, dy, dx);
}

}  // namespace pt::host
