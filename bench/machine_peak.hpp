// The machine's matmul limit, measured with code that is not pipetrain's (bench/kernels.sh):
// oneDNN's matmul called directly, its weights once in plain row-major layout and once in the
// layout oneDNN picks for the shape (format_tag::any, reordered once before timing), in fp32
// and in bf16 (bf16 inputs, fp32 accumulation and output). pipetrain's own GEMM path is never
// used here, so a fraction of this peak judges pipetrain against the library at its best.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace pt::bench {

struct PeakShape {
  int64_t M, N, K;
  std::string text() const;  // "1024x1024x1024"
  double flops() const { return 2.0 * static_cast<double>(M) * static_cast<double>(N) * static_cast<double>(K); }
};

// One prepared oneDNN matmul C[M,N] = A[M,K] B[K,N]: operands allocated and filled, the
// primitive built, the weights reordered to the primitive's layout. call() only executes.
class RawMatmul {
 public:
  RawMatmul(PeakShape s, bool bf16, bool blocked_weights);
  ~RawMatmul();
  void call();
  std::string name() const;  // "oneDNN blocked bf16 4096x4096x1024"
  std::string impl() const;  // oneDNN's implementation name
  const PeakShape& shape() const { return shape_; }
  bool bf16() const { return bf16_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  PeakShape shape_;
  bool bf16_, blocked_;
};

}  // namespace pt::bench
