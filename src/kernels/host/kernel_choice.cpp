// The fp32 kernel rule of the host backend: which library runs an fp32 GEMM or convolution
// of a given shape. Contract: a pure function of the shape (never of a timing taken at run
// time), so every rank and every run of a job makes the same choice and results stay
// bitwise reproducible and equal between a pipeline and one process. The rule comes from
// bench/kernels.sh on this project's CPUs (bench/README.md, "oneDNN kernels";
// docs/PRECISION.md); bf16 always runs on oneDNN and does not consult it.
#include "onednn.hpp"

namespace pt::host {

bool onednn_wins_gemm_fp32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t batch) {
  (void)ta, (void)tb, (void)M, (void)N, (void)K, (void)batch;
  return false;  // OpenBLAS, as before oneDNN (the measured rule comes with bench/kernels.sh)
}

bool onednn_wins_conv_fp32(const WindowGeom& g, int64_t n) {
  (void)g, (void)n;
  return false;  // im2col + OpenBLAS, as before oneDNN
}

std::string fp32_rule_description() { return "fp32 GEMM and convolution on OpenBLAS"; }

}  // namespace pt::host
