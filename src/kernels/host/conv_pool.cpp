// Host convolution and pooling kernels, NCHW. Convolution: oneDNN (onednn_conv.cpp) in bf16
// and for the fp32 shapes the measured rule gives it; otherwise im2col + one OpenBLAS GEMM
// over a group of samples (the reference the oneDNN kernels are tested against). A
// convolution's activations may lie in nChw16c or NHWC (ConvLayouts): oneDNN takes them so;
// around an im2col pass they are moved into NCHW copies and the results back.
#include <algorithm>
#include <cstring>
#include <limits>

#include "host_backend.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/views.hpp"

namespace pt::host {
namespace {

// Samples per GEMM: enough columns (>= ~3k) for OpenBLAS to run near peak, bounded
// so the column buffer stays in cache-friendly territory.
int64_t group_size(const WindowGeom& g, int64_t n) {
  const int64_t p = g.h_out * g.w_out;
  return std::max<int64_t>(1, std::min<int64_t>(n, (3072 + p - 1) / p));
}

// col[(c*k + ki)*k + kj][s*P + oh*Wo + ow] = x_s[c][oh*st - pad + ki][ow*st - pad + kj] (0 outside)
void im2col(const WindowGeom& g, int64_t gs, const float* x, float* col) {
  const int64_t k = g.kernel, st = g.stride, pad = g.padding;
  const int64_t P = g.h_out * g.w_out, ld = gs * P, in_sz = g.c_in * g.h_in * g.w_in;
  Kokkos::parallel_for("pt::im2col", Range(0, g.c_in * k * k), [=](int64_t row) {
    const int64_t c = row / (k * k), ki = (row / k) % k, kj = row % k;
    for (int64_t s = 0; s < gs; ++s) {
      const float* xs = x + s * in_sz + c * g.h_in * g.w_in;
      float* out = col + row * ld + s * P;
      for (int64_t oh = 0; oh < g.h_out; ++oh) {
        const int64_t ih = oh * st - pad + ki;
        float* o = out + oh * g.w_out;
        if (ih < 0 || ih >= g.h_in) {
          std::memset(o, 0, sizeof(float) * g.w_out);
          continue;
        }
        const float* xr = xs + ih * g.w_in;
        if (st == 1) {
          // valid ow: 0 <= ow - pad + kj < w_in
          const int64_t lo = std::max<int64_t>(0, pad - kj), hi = std::min<int64_t>(g.w_out, g.w_in + pad - kj);
          for (int64_t ow = 0; ow < lo; ++ow) o[ow] = 0.0f;
          if (hi > lo) std::memcpy(o + lo, xr + lo - pad + kj, sizeof(float) * (hi - lo));
          for (int64_t ow = std::max(hi, lo); ow < g.w_out; ++ow) o[ow] = 0.0f;
        } else {
          for (int64_t ow = 0; ow < g.w_out; ++ow) {
            const int64_t iw = ow * st - pad + kj;
            o[ow] = (iw >= 0 && iw < g.w_in) ? xr[iw] : 0.0f;
          }
        }
      }
    }
  });
}

// dx_s += scatter of dcol (the adjoint of im2col); dx must be zeroed by the caller.
void col2im(const WindowGeom& g, int64_t gs, const float* col, float* dx) {
  const int64_t k = g.kernel, st = g.stride, pad = g.padding;
  const int64_t P = g.h_out * g.w_out, ld = gs * P, in_sz = g.c_in * g.h_in * g.w_in;
  // one kernel index per (sample, channel): rows of one channel write disjoint samples
  Kokkos::parallel_for("pt::col2im", Range(0, gs * g.c_in), [=](int64_t sc) {
    const int64_t s = sc / g.c_in, c = sc % g.c_in;
    float* xs = dx + s * in_sz + c * g.h_in * g.w_in;
    for (int64_t ki = 0; ki < k; ++ki)
      for (int64_t kj = 0; kj < k; ++kj) {
        const float* in = col + ((c * k + ki) * k + kj) * ld + s * P;
        for (int64_t oh = 0; oh < g.h_out; ++oh) {
          const int64_t ih = oh * st - pad + ki;
          if (ih < 0 || ih >= g.h_in) continue;
          float* xr = xs + ih * g.w_in;
          const float* i = in + oh * g.w_out;
          if (st == 1) {
            const int64_t lo = std::max<int64_t>(0, pad - kj), hi = std::min<int64_t>(g.w_out, g.w_in + pad - kj);
            float* xo = xr - pad + kj;
            for (int64_t ow = lo; ow < hi; ++ow) xo[ow] += i[ow];
          } else {
            for (int64_t ow = 0; ow < g.w_out; ++ow) {
              const int64_t iw = ow * st - pad + kj;
              if (iw >= 0 && iw < g.w_in) xr[iw] += i[ow];
            }
          }
        }
      }
  });
}

}  // namespace

// im2col's passes take NCHW: where the caller keeps an activation in another layout (io),
// ImCopies holds its NCHW copies (layout_ws_, grown once), moved in and out around the pass.
struct HostBackend::ImCopies {
  HostBackend& be;
  const WindowGeom& g;
  int64_t n;
  ConvLayouts io;
  float *x = nullptr, *y = nullptr;  // NCHW copies of the input side (x, dx) and output side (y, dy)
  ImCopies(HostBackend& b, const WindowGeom& geom, int64_t samples, ConvLayouts l) : be(b), g(geom), n(samples), io(l) {
    const size_t in = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in), out = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
    if (be.layout_ws_.size() < in + out) be.layout_ws_.resize(in + out);
    x = be.layout_ws_.data(), y = x + in;
  }
  int64_t hw_in() const { return g.h_in * g.w_in; }
  int64_t hw_out() const { return g.h_out * g.w_out; }
  // (an fp32 operand: im2col's passes read fp32 only; bf16 views go to oneDNN, the rule's
  // library for every bf16 pass)
  const float* in(CView v) {
    PT_CHECK(!v.bf16(), "convolution: a bf16 x in an im2col pass");
    if (io.in == ImageLayout::nchw) return v.data;
    be.relayout(n, g.c_in, hw_in(), io.in, v.data, ImageLayout::nchw, x);
    return x;
  }
  const float* out(CView v) {
    PT_CHECK(!v.bf16(), "convolution: a bf16 dy in an im2col pass");
    if (io.out == ImageLayout::nchw) return v.data;
    be.relayout(n, g.c_out, hw_out(), io.out, v.data, ImageLayout::nchw, y);
    return y;
  }
  float* in_result(float* p) { return io.in == ImageLayout::nchw ? p : x; }
  float* out_result(float* p) { return io.out == ImageLayout::nchw ? p : y; }
  void in_back(float* p) {
    if (io.in != ImageLayout::nchw) be.relayout(n, g.c_in, hw_in(), ImageLayout::nchw, x, io.in, p);
  }
  void out_back(float* p) {
    if (io.out != ImageLayout::nchw) be.relayout(n, g.c_out, hw_out(), ImageLayout::nchw, y, io.out, p);
  }
};

void HostBackend::conv2d_forward(const WindowGeom& g, int64_t n, CView x, const float* w, const float* b, float* y,
                                 Precision p, ConvLayouts io) {
  if (n == 0) return;
  PT_CHECK(!x.bf16() || p == Precision::bf16, "conv2d_forward: a bf16 x in an fp32 convolution");
  if (onednn_conv(g, n, ConvPass::forward, p)) return onednn().conv_forward(p, g, n, x, w, b, y, io);
  ImCopies c(*this, g, n, io);
  im2col_conv_forward(g, n, c.in(x), w, b, c.out_result(y));
  c.out_back(y);
}

// The weight pass (dw, db) and the data pass (dx) are computed independently, each by the
// library the rule gives its pass: dx alone and dw/db alone are bitwise the fused call.
void HostBackend::conv2d_backward(const WindowGeom& g, int64_t n, CView x, const float* w, CView dy, float* dx,
                                  float* dw, float* db, Precision p, ConvLayouts io) {
  if (n == 0) return;
  PT_CHECK((!x.bf16() && !dy.bf16()) || p == Precision::bf16, "conv2d_backward: a bf16 x or dy in an fp32 convolution");
  const bool dnn_w = onednn_conv(g, n, ConvPass::backward_weights, p), dnn_d = onednn_conv(g, n, ConvPass::backward_data, p);
  if (dx && (dw || db) && dnn_w && dnn_d) return onednn().conv_backward(p, g, n, x, w, dy, dx, dw, db, io);  // dy converted once for both passes
  if (dw || db) {
    if (dnn_w) {
      onednn().conv_backward_weights(p, g, n, x, dy, dw, db, io);
    } else {
      ImCopies c(*this, g, n, io);
      im2col_conv_backward(g, n, c.in(x), w, c.out(dy), nullptr, dw, db);
    }
  }
  if (dx) {
    if (dnn_d) return onednn().conv_backward_data(p, g, n, w, dy, dx, io);
    ImCopies c(*this, g, n, io);
    im2col_conv_backward(g, n, nullptr, w, c.out(dy), c.in_result(dx), nullptr, nullptr);
    c.in_back(dx);
  }
}

ImageLayout HostBackend::conv_layout(const WindowGeom& g, int64_t n, Precision p) {
  return onednn_conv(g, n, ConvPass::forward, p) ? onednn().conv_layout(p, g, n) : ImageLayout::nchw;
}

// Each pass by the library the rule gives it: oneDNN keeps its plan's ports (conv_pass_bytes),
// its primitive's own heap (held), and grows its scratchpad; im2col grows the backend's workspace (the sizes of the calls above)
// and, with activations outside NCHW, ImCopies' buffer, a second one grown to its largest
// request: counted as kept per shape (more than it holds when several shapes need it).
ConvKernelBytes HostBackend::conv_kernel_bytes(const WindowGeom& g, int64_t n, bool bias, bool train, bool data,
                                               Precision p, ConvLayouts io) {
  ConvKernelBytes k;
  if (n <= 0) return k;
  const int64_t K = g.c_in * g.kernel * g.kernel, GP = group_size(g, n) * g.h_out * g.w_out;
  int64_t copy_bytes = 0;  // ImCopies' buffer, once for the shape's largest pass (in + out)
  for (ConvPass pass : {ConvPass::forward, ConvPass::backward_weights, ConvPass::backward_data}) {
    if (pass != ConvPass::forward && (!train || (pass == ConvPass::backward_data && !data))) continue;
    if (onednn_conv(g, n, pass, p)) {
      int64_t pad = 0, held = 0;
      k.kept += onednn().conv_pass_bytes(p, g, n, pass, bias, &pad, io, &held);
      k.scratchpad = std::max(k.scratchpad, pad);
      k.held += held;
    } else {
      const int64_t cols = pass == ConvPass::forward ? K : 2 * K;
      const bool copies = io.in != ImageLayout::nchw || io.out != ImageLayout::nchw;
      copy_bytes = copies ? n * (g.c_in * g.h_in * g.w_in + g.c_out * g.h_out * g.w_out) * 4 : 0;
      k.scratch = std::max<int64_t>(k.scratch, (cols * GP + g.c_out * GP) * 4);
    }
  }
  k.kept += copy_bytes;
  return k;
}

void HostBackend::im2col_conv_forward(const WindowGeom& g, int64_t n, const float* x, const float* w, const float* b,
                                      float* y) {
  const int64_t K = g.c_in * g.kernel * g.kernel, P = g.h_out * g.w_out;
  const int64_t in_sz = g.c_in * g.h_in * g.w_in, out_sz = g.c_out * P;
  const int64_t G = group_size(g, n);
  float* col = workspace(static_cast<size_t>(K * G * P + g.c_out * G * P));
  float* tmp = col + K * G * P;  // [c_out][gs*P]
  for (int64_t s0 = 0; s0 < n; s0 += G) {
    const int64_t gs = std::min(G, n - s0);
    im2col(g, gs, x + s0 * in_sz, col);
    float* dst = gs == 1 ? y + s0 * out_sz : tmp;
    blas_gemm(false, false, g.c_out, gs * P, K, 1.0f, w, col, 0.0f, dst);
    // scatter [c_out][s][P] into NCHW and add the bias
    Kokkos::parallel_for("pt::conv2d_scatter_bias", Range(0, gs * g.c_out), [=](int64_t sc) {
      const int64_t s = sc / g.c_out, c = sc % g.c_out;
      const float* src = dst + c * gs * P + s * P;
      float* out = y + (s0 + s) * out_sz + c * P;
      const float bias = b ? b[c] : 0.0f;
      if (src == out) {
        if (b) for (int64_t p = 0; p < P; ++p) out[p] += bias;
      } else {
        for (int64_t p = 0; p < P; ++p) out[p] = src[p] + bias;
      }
    });
  }
}

void HostBackend::im2col_conv_backward(const WindowGeom& g, int64_t n, const float* x, const float* w,
                                       const float* dy, float* dx, float* dw, float* db) {
  const int64_t K = g.c_in * g.kernel * g.kernel, P = g.h_out * g.w_out;
  const int64_t in_sz = g.c_in * g.h_in * g.w_in, out_sz = g.c_out * P;
  const int64_t G = group_size(g, n);
  float* col = workspace(static_cast<size_t>(2 * K * G * P + g.c_out * G * P));
  float* dcol = col + K * G * P;
  float* dyg = dcol + K * G * P;  // dy gathered as [c_out][gs*P]
  if (dx) std::memset(dx, 0, sizeof(float) * n * in_sz);
  for (int64_t s0 = 0; s0 < n; s0 += G) {
    const int64_t gs = std::min(G, n - s0);
    const float* dys = dy + s0 * out_sz;
    const float* dsrc = dys;
    if (gs > 1) {
      Kokkos::parallel_for("pt::conv2d_gather_dy", Range(0, gs * g.c_out), [=](int64_t sc) {
        const int64_t s = sc / g.c_out, c = sc % g.c_out;
        std::memcpy(dyg + c * gs * P + s * P, dys + s * out_sz + c * P, sizeof(float) * P);
      });
      dsrc = dyg;
    }
    if (db) {
      Kokkos::parallel_for("pt::conv2d_bias_grad", Range(0, g.c_out), [=](int64_t c) {
        const float* d = dsrc + c * gs * P;
        float acc = 0.0f;
        for (int64_t p = 0; p < gs * P; ++p) acc += d[p];
        db[c] += acc;
      });
    }
    if (dw) {
      im2col(g, gs, x + s0 * in_sz, col);
      // dW[c_out][K] += dY[c_out][gs*P] * col^T
      blas_gemm(false, true, g.c_out, K, gs * P, 1.0f, dsrc, col, 1.0f, dw);
    }
    if (dx) {
      // dcol[K][gs*P] = W^T[K][c_out] * dY
      blas_gemm(true, false, K, gs * P, g.c_out, 1.0f, w, dsrc, 0.0f, dcol);
      col2im(g, gs, dcol, dx + s0 * in_sz);
    }
  }
}

void HostBackend::maxpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y, int32_t* argmax) {
  const int64_t k = g.kernel, st = g.stride, pad = g.padding;
  const int64_t in_plane = g.h_in * g.w_in, out_plane = g.h_out * g.w_out;
  const int64_t h_in = g.h_in, w_in = g.w_in, h_out = g.h_out, w_out = g.w_out;
  if (k == 2 && st == 2 && pad == 0) {
    // the common 2x2/2 window: branchless selects, so random data costs no mispredictions
    Kokkos::parallel_for("pt::maxpool2x2_forward", Range(0, n * g.c_in), [=](int64_t plane) {
      const float* xp = x + plane * in_plane;
      float* yp = y + plane * out_plane;
      int32_t* ap = argmax + plane * out_plane;
      for (int64_t oh = 0; oh < h_out; ++oh) {
        const float* __restrict__ r0 = xp + 2 * oh * w_in;
        const float* __restrict__ r1 = r0 + w_in;
        float* __restrict__ yr = yp + oh * w_out;
        int32_t* __restrict__ ar = ap + oh * w_out;
        const int32_t base = static_cast<int32_t>(2 * oh * w_in), wi = static_cast<int32_t>(w_in);
        for (int64_t ow = 0; ow < w_out; ++ow) {
          const float a = r0[2 * ow], b = r0[2 * ow + 1], c = r1[2 * ow], d = r1[2 * ow + 1];
          const int32_t i0 = base + static_cast<int32_t>(2 * ow);
          const float m1 = std::max(a, b), m2 = std::max(c, d);  // ties keep the first, as PyTorch
          const int32_t j1 = i0 + static_cast<int32_t>(b > a);
          const int32_t j2 = i0 + wi + static_cast<int32_t>(d > c);
          const int32_t second = static_cast<int32_t>(m2 > m1);
          yr[ow] = std::max(m1, m2);
          ar[ow] = j1 + second * (j2 - j1);
        }
      }
    });
    return;
  }
  Kokkos::parallel_for("pt::maxpool_forward", Range(0, n * g.c_in), [=](int64_t plane) {
    const float* xp = x + plane * in_plane;
    float* yp = y + plane * out_plane;
    int32_t* ap = argmax + plane * out_plane;
    for (int64_t oh = 0; oh < h_out; ++oh)
      for (int64_t ow = 0; ow < w_out; ++ow) {
        // first in-bounds element starts the search (windows always overlap the input)
        const int64_t ih0 = std::max<int64_t>(0, oh * st - pad), iw0 = std::max<int64_t>(0, ow * st - pad);
        const int64_t ih1 = std::min<int64_t>(h_in, oh * st - pad + k), iw1 = std::min<int64_t>(w_in, ow * st - pad + k);
        float best = xp[ih0 * w_in + iw0];
        int32_t at = static_cast<int32_t>(ih0 * w_in + iw0);
        for (int64_t ih = ih0; ih < ih1; ++ih)
          for (int64_t iw = iw0; iw < iw1; ++iw) {
            const float v = xp[ih * w_in + iw];
            const bool gt = v > best;
            best = gt ? v : best;
            at = gt ? static_cast<int32_t>(ih * w_in + iw) : at;
          }
        yp[oh * w_out + ow] = best;
        ap[oh * w_out + ow] = at;
      }
  });
}

void HostBackend::maxpool_backward(const WindowGeom& g, int64_t n, const float* dy, const int32_t* argmax,
                                   float* dx) {
  const int64_t in_plane = g.h_in * g.w_in, out_plane = g.h_out * g.w_out;
  Kokkos::parallel_for("pt::maxpool_backward", Range(0, n * g.c_in), [=](int64_t plane) {
    float* dxp = dx + plane * in_plane;
    std::memset(dxp, 0, sizeof(float) * in_plane);
    const float* dyp = dy + plane * out_plane;
    const int32_t* ap = argmax + plane * out_plane;
    for (int64_t o = 0; o < out_plane; ++o) dxp[ap[o]] += dyp[o];
  });
}

void HostBackend::avgpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y) {
  const int64_t k = g.kernel, st = g.stride, pad = g.padding;
  const int64_t in_plane = g.h_in * g.w_in, out_plane = g.h_out * g.w_out;
  const float inv = 1.0f / static_cast<float>(k * k);  // padding counts (PyTorch count_include_pad)
  Kokkos::parallel_for("pt::avgpool_forward", Range(0, n * g.c_in), [=](int64_t plane) {
    const float* xp = x + plane * in_plane;
    float* yp = y + plane * out_plane;
    for (int64_t oh = 0; oh < g.h_out; ++oh)
      for (int64_t ow = 0; ow < g.w_out; ++ow) {
        float acc = 0.0f;
        for (int64_t ki = 0; ki < k; ++ki) {
          const int64_t ih = oh * st - pad + ki;
          if (ih < 0 || ih >= g.h_in) continue;
          for (int64_t kj = 0; kj < k; ++kj) {
            const int64_t iw = ow * st - pad + kj;
            if (iw >= 0 && iw < g.w_in) acc += xp[ih * g.w_in + iw];
          }
        }
        yp[oh * g.w_out + ow] = acc * inv;
      }
  });
}

void HostBackend::avgpool_backward(const WindowGeom& g, int64_t n, const float*, const float*, const float* dy,
                                   float* dx) {
  const int64_t k = g.kernel, st = g.stride, pad = g.padding;
  const int64_t in_plane = g.h_in * g.w_in, out_plane = g.h_out * g.w_out;
  const float inv = 1.0f / static_cast<float>(k * k);
  Kokkos::parallel_for("pt::avgpool_backward", Range(0, n * g.c_in), [=](int64_t plane) {
    float* dxp = dx + plane * in_plane;
    std::memset(dxp, 0, sizeof(float) * in_plane);
    const float* dyp = dy + plane * out_plane;
    for (int64_t oh = 0; oh < g.h_out; ++oh)
      for (int64_t ow = 0; ow < g.w_out; ++ow) {
        const float d = dyp[oh * g.w_out + ow] * inv;
        for (int64_t ki = 0; ki < k; ++ki) {
          const int64_t ih = oh * st - pad + ki;
          if (ih < 0 || ih >= g.h_in) continue;
          for (int64_t kj = 0; kj < k; ++kj) {
            const int64_t iw = ow * st - pad + kj;
            if (iw >= 0 && iw < g.w_in) dxp[ih * g.w_in + iw] += d;
          }
        }
      }
  });
}

}  // namespace pt::host
