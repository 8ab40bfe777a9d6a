// Kernel measurements and descriptions shared by the banner, the profiler and the kernel
// benchmark: the matmul peak of a backend in a precision, achieved GFLOP/s, and the one-line
// oneDNN description (version, effective ISA, the matmul implementation for a representative
// shape in each precision). Contract: matmul_peak_gflops runs real work on the backend (a few
// hundred ms on a CPU core) and restores the backend's precision; the description creates
// primitive descriptors only (no execution) and is cached after the first call.
#include <algorithm>
#include <vector>

#include "onednn.hpp"
#include "pipetrain/backend.hpp"
#include "pipetrain/error.hpp"

namespace pt {

const char* precision_name(Precision p) { return enum_name(p); }

double achieved_gflops(double flops, double seconds) {
  return flops > 0 && seconds > 0 ? flops / seconds * 1e-9 : 0.0;
}

double matmul_peak_gflops(Backend& be, Precision p, int reps) {
  constexpr int64_t n = 1024;
  const size_t sz = static_cast<size_t>(n * n);
  std::vector<float> host(sz);
  for (size_t i = 0; i < sz; ++i) host[i] = static_cast<float>(static_cast<int>(i % 61) - 30) / 64.0f;
  Buffer a(be, sz), b(be, sz), c(be, sz);
  be.from_host(a.data(), host.data(), sz);
  be.from_host(b.data(), host.data(), sz);
  std::vector<double> t;
  for (int r = 0; r < 1 + std::max(1, reps); ++r) {
    be.timer_start();
    be.gemm(false, false, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n, p);
    const double s = be.timer_stop();
    if (r > 0) t.push_back(s);
  }
  std::sort(t.begin(), t.end());
  const double med = t.size() % 2 ? t[t.size() / 2] : 0.5 * (t[t.size() / 2 - 1] + t[t.size() / 2]);
  return achieved_gflops(2.0 * n * n * n, med);
}

std::string onednn_description() {
  static const std::string line = [] {
    host::onednn_threads_default();
    host::OneDnn dnn;
    host::GemmArgs a;  // the MLP's first forward GEMM: [128, 784] x [784, 512]^T
    a.tb = true, a.M = 128, a.N = 512, a.K = 784, a.lda = 784, a.ldb = 784, a.ldc = 512;
    return "oneDNN " + host::onednn_version() + " " + host::onednn_isa_name() + " (matmul 128x784x512: fp32 " +
           dnn.gemm_impl(Precision::fp32, a) + ", bf16 " + dnn.gemm_impl(Precision::bf16, a) + ")";
  }();
  return line;
}

}  // namespace pt
