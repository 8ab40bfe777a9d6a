// The raw oneDNN matmuls behind the benchmark's machine peak (machine_peak.hpp).
#include "machine_peak.hpp"

#include <dnnl.hpp>
#include <vector>

namespace pt::bench {

std::string PeakShape::text() const { return std::to_string(M) + "x" + std::to_string(N) + "x" + std::to_string(K); }

struct RawMatmul::Impl {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream strm{eng};
  dnnl::matmul prim;
  dnnl::memory a, b, c;
  std::string impl;
};

namespace {

std::vector<float> filled(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 2654435761u + seed) % 2001) - 1000) * 1e-3f;
  return v;
}

// A memory of `md` holding `host` (fp32, row-major [rows, cols]) converted by a oneDNN reorder.
dnnl::memory converted(dnnl::engine& eng, dnnl::stream& s, const dnnl::memory::desc& md, int64_t rows, int64_t cols,
                       unsigned seed) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  std::vector<float> host = filled(static_cast<size_t>(rows * cols), seed);
  dnnl::memory src({{rows, cols}, dt::f32, tag::ab}, eng, host.data());
  dnnl::memory dst(md, eng);
  dnnl::reorder(src, dst).execute(s, src, dst);
  s.wait();
  return dst;
}

}  // namespace

RawMatmul::RawMatmul(PeakShape s, bool bf16, bool blocked) : impl_(std::make_unique<Impl>()), shape_(s), bf16_(bf16), blocked_(blocked) {
  using dt = dnnl::memory::data_type;
  using tag = dnnl::memory::format_tag;
  Impl& x = *impl_;
  const dt in = bf16 ? dt::bf16 : dt::f32;
  const dnnl::memory::desc a_md({s.M, s.K}, in, tag::ab), b_md({s.K, s.N}, in, blocked ? tag::any : tag::ab),
      c_md({s.M, s.N}, dt::f32, tag::ab);
  const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), x.eng);
  x.prim = dnnl::matmul(pd);
  x.impl = pd.impl_info_str();
  x.a = converted(x.eng, x.strm, pd.src_desc(), s.M, s.K, 1);
  x.b = converted(x.eng, x.strm, pd.weights_desc(), s.K, s.N, 2);  // reordered once, outside the timing
  x.c = dnnl::memory(pd.dst_desc(), x.eng);
}

RawMatmul::~RawMatmul() = default;

void RawMatmul::call() {
  Impl& x = *impl_;
  x.prim.execute(x.strm, {{DNNL_ARG_SRC, x.a}, {DNNL_ARG_WEIGHTS, x.b}, {DNNL_ARG_DST, x.c}});
  x.strm.wait();
}

std::string RawMatmul::name() const {
  return std::string("oneDNN ") + (blocked_ ? "blocked " : "plain ") + (bf16_ ? "bf16 " : "fp32 ") + shape_.text();
}

std::string RawMatmul::impl() const { return impl_->impl; }

}  // namespace pt::bench
