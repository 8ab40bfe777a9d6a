// oneDNN matmul behind the host backend's gemm and strided-batched gemm, the bf16 operand
// conversion, and oneDNN's identity (version, effective ISA, thread default).
// Contract: OneDnn::gemm computes C_b = alpha op(A_b) op(B_b) + beta C_b for b < batch with
// any leading dimensions and batch strides (row-major), plus a bias row added to every row of
// C when given (batch 1). alpha is oneDNN's output scale, beta
// its sum post-op (absent for beta = 0, so C is then never read, as BLAS). In bf16, A and B
// are first rounded into dense bf16 copies (to_bf16: PyTorch's rounding, not oneDNN's
// conversion, which flushes subnormals on some ISAs); C stays fp32. Where oneDNN has no bf16
// kernels (onednn_bf16_native) a bf16 product is the fp32 primitive's on dense fp32 copies of
// the operands' bf16 values (gemm_widened). One plan per
// (precision, transposes, shape, strides, alpha, beta), built on first use.
#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <unordered_map>

#include "onednn_impl.hpp"
#include "pipetrain/parallel.hpp"  // now_s
#include "vec_math.hpp"

namespace pt::host {

Lap::Lap() : t_(now_s()) {}
double Lap::operator()() {
  const double t = now_s(), d = t - t_;
  t_ = t;
  return d;
}

void onednn_fail(const std::string& what, const dnnl::error& e) {
  fail(Exit::internal, "oneDNN: " + what + ": " + e.what() + " (status " + std::to_string(static_cast<int>(e.status)) + ")");
}

void to_bf16(size_t n, const float* x, uint16_t* y) { pack_bf16_span(n, x, y); }

void onednn_threads_default() {
  static const bool once = [] {
    const char* env = std::getenv("OMP_NUM_THREADS");
    if (!env || !*env) omp_set_num_threads(1);
    return true;
  }();
  (void)once;
}

std::string onednn_version() {
  const dnnl_version_t* v = dnnl_version();
  return std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch);
}

std::string onednn_isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::sse41: return "sse41";
    case dnnl::cpu_isa::avx: return "avx";
    case dnnl::cpu_isa::avx2: return "avx2";
    case dnnl::cpu_isa::avx2_vnni: return "avx2_vnni";
    case dnnl::cpu_isa::avx512_mic: return "avx512_mic";
    case dnnl::cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case dnnl::cpu_isa::avx512_core: return "avx512_core";
    case dnnl::cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case dnnl::cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case dnnl::cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "isa " + std::to_string(static_cast<int>(dnnl::get_effective_cpu_isa()));
  }
}

bool onednn_bf16_native() {
  static const bool native = [] {
    try {
      const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
      const dnnl::memory::desc a({2, 2}, dnnl::memory::data_type::bf16, dnnl::memory::format_tag::ab);
      const dnnl::memory::desc c({2, 2}, dnnl::memory::data_type::f32, dnnl::memory::format_tag::ab);
      const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, a, c), eng);
      return true;
    } catch (const dnnl::error&) {
      return false;
    }
  }();
  return native;
}

bool bf16_widened_wanted() {
  const char* env = std::getenv("PT_BF16_KERNELS");
  return !onednn_bf16_native() || (env && std::string(env) == "widened");
}

bool OneDnn::widens_bf16() const { return impl_->widen_bf16; }
int64_t OneDnn::widened_bytes() const {
  return static_cast<int64_t>((impl_->wide_a.size() + impl_->wide_b.size() + impl_->wide_c.size()) * sizeof(float));
}

OneDnn::OneDnn() {
  onednn_threads_default();
  try {
    impl_ = std::make_unique<Impl>();
  } catch (const dnnl::error& e) {
    onednn_fail("creating the CPU engine", e);
  }
}
OneDnn::~OneDnn() = default;

namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;

uint32_t bits_of(float v) {
  uint32_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

// The operands oneDNN sees: the caller's for fp32, dense bf16 copies for bf16.
struct Operands {
  int64_t lda, ldb, sa, sb;
};
// In bf16 an fp32 operand is converted into a dense copy; a bf16 one is read where it is,
// with its own leading dimension.
Operands operand_layout(Precision p, const GemmArgs& a) {
  if (p == Precision::fp32) return {a.lda, a.ldb, a.stride_a, a.stride_b};
  return {a.a_bf16 ? a.lda : (a.ta ? a.M : a.K), a.b_bf16 ? a.ldb : (a.tb ? a.K : a.N), a.M * a.K, a.K * a.N};
}

// rows x cols matrix (row stride ld; stored transposed when trans) as a oneDNN descriptor of
// the logical [batch,] R x C operand.
dnnl::memory::desc matrix_md(dt type, int64_t batch, int64_t R, int64_t C, bool trans, int64_t ld, int64_t stride) {
  const dims st = trans ? dims{1, ld} : dims{ld, 1};
  if (batch == 1) return dnnl::memory::desc({R, C}, type, st);
  return dnnl::memory::desc({batch, R, C}, type, {stride, st[0], st[1]});
}

std::string shape_str(Precision p, const GemmArgs& a) {
  return PT_MSG("matmul " << precision_name(p) << " " << (a.ta ? "T" : "N") << (a.tb ? "T" : "N") << " M " << a.M
                          << " N " << a.N << " K " << a.K << " batch " << a.batch << " lda " << a.lda << " ldb "
                          << a.ldb << " ldc " << a.ldc);
}

// A [batch] x rows x cols operand with row stride ld and batch stride `stride` -> dense bf16.
void pack_bf16(int64_t batch, int64_t rows, int64_t cols, const float* src, int64_t ld, int64_t stride,
               std::vector<uint16_t>& dst) {
  const size_t total = static_cast<size_t>(batch * rows * cols);
  if (dst.size() < total) dst.resize(total);
  if (ld == cols && (batch == 1 || stride == rows * cols)) {
    to_bf16(total, src, dst.data());
    return;
  }
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r)
      to_bf16(static_cast<size_t>(cols), src + b * stride + r * ld, dst.data() + (b * rows + r) * cols);
}

// A weight (b_version) read untransposed as a dense bf16 array by a single product (the input
// gradient dx = dy W), while kept layouts are on: kept in the primitive's layout.
bool kept_layout_wanted(bool on, Precision p, const GemmArgs& a) {
  return on && p == Precision::bf16 && a.b_version != 0 && a.b_key && a.b_bf16 && a.batch == 1 && !a.tb;
}

// B's copy in the plan's layout, reordered from the plain bf16 B when its version changed.
dnnl::memory kept_weight(OneDnn::Impl& d, MatmulPlan& plan, const GemmArgs& a) {
  KeptWeight& w = d.kept[{a.b_key, &plan}];
  if (!w.mem) {
    w.mem = dnnl::memory(plan.b_layout, d.eng);
    w.bytes = static_cast<int64_t>(plan.b_layout.get_size());
  }
  if (w.version != a.b_version) {
    plan.b.set_data_handle(const_cast<float*>(a.B));
    plan.to_layout.execute(d.strm, plan.b, w.mem);
    w.version = a.b_version;
  }
  return w.mem;
}

// The widened copies' bound: at most this many floats per operand (4 MiB; with C's, 12 MiB),
// so the memory model need not know the products' shapes. A larger product runs in blocks.
constexpr int64_t kWideFloats = int64_t{1} << 20;
constexpr int64_t kChunkK = 1024;  // a blocked product's reduction chunk (its blocks stay >= 1024 wide)

// Element `at` of an operand that is fp32 or a dense bf16 array.
const float* element(const float* p, bool bf16, int64_t at) {
  return bf16 ? reinterpret_cast<const float*>(reinterpret_cast<const uint16_t*>(p) + at) : p + at;
}

// A [batch] x rows x cols operand (row stride ld, batch stride `stride`; a dense bf16 array
// when bf16, batch 1) -> the fp32 values of its bf16 rounding, dense, in dst.
const float* widen_operand(int64_t batch, int64_t rows, int64_t cols, const float* src, int64_t ld, int64_t stride,
                           bool bf16, std::vector<float>& dst) {
  const size_t total = static_cast<size_t>(batch * rows * cols);
  if (dst.size() < total) dst.resize(total);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t r = 0; r < rows; ++r) {
      float* y = dst.data() + (b * rows + r) * cols;
      if (bf16)
        widen_bf16_span(static_cast<size_t>(cols), element(src, true, r * ld), y);
      else
        bf16_span<true, false>(static_cast<size_t>(cols), src + b * stride + r * ld, y, nullptr);
    }
  return dst.data();
}

// The fp32 product that computes bf16 product a on dense widened copies of its operands (and
// of a bf16 C).
GemmArgs widened_args(const GemmArgs& a) {
  GemmArgs f = a;
  f.lda = a.ta ? a.M : a.K;
  f.ldb = a.tb ? a.K : a.N;
  f.stride_a = a.M * a.K;
  f.stride_b = a.K * a.N;
  if (a.c_bf16) {
    f.ldc = a.N;
    f.stride_c = a.M * a.N;
  }
  f.a_bf16 = f.b_bf16 = f.c_bf16 = false;
  f.b_version = 0;
  f.b_key = nullptr;
  return f;
}

// Block [i0, i0 + m) x [j0, j0 + n) of product a (batch 1), its B and C columns from j0.
GemmArgs block_of(const GemmArgs& a, int64_t i0, int64_t m, int64_t j0, int64_t n) {
  GemmArgs b = a;
  b.M = m, b.N = n;
  b.A = element(a.A, a.a_bf16, a.ta ? i0 : i0 * a.lda);
  b.B = element(a.B, a.b_bf16, a.tb ? j0 * a.ldb : j0);
  b.C = const_cast<float*>(element(a.C, a.c_bf16, i0 * a.ldc + j0));
  if (a.bias) b.bias = a.bias + j0;
  return b;
}

}  // namespace

// bf16 without bf16 kernels: the fp32 product of the operands' bf16 values, with a bf16 C
// rounded from its fp32 result (bias included), as a bf16 kernel does. A product whose
// widened operands would pass kWideFloats runs in blocks of rows and columns, each summed
// over K in chunks of at most kChunkK (batched: in groups of entries that fit, or entry by
// entry).
void OneDnn::gemm_widened(const GemmArgs& a) {
  const int64_t per_entry = std::max({a.M * a.K, a.K * a.N, a.c_bf16 ? a.M * a.N : 0});
  if (a.batch == 1 && per_entry <= kWideFloats) return gemm_widened_block(a, 0, a.M, 0, a.N, a.K);
  if (a.batch > 1) {  // fp32 operands and C (gemm's check)
    const int64_t group = std::max<int64_t>(1, kWideFloats / per_entry);
    for (int64_t b0 = 0; b0 < a.batch; b0 += group) {
      GemmArgs e = a;
      e.batch = std::min(group, a.batch - b0);
      e.A += b0 * a.stride_a, e.B += b0 * a.stride_b, e.C += b0 * a.stride_c;
      if (e.batch == 1) gemm_widened(e);
      else gemm_widened_whole(e);
    }
    return;
  }
  const int64_t kb = std::min(a.K, kChunkK);
  const int64_t mb = std::clamp<int64_t>(kWideFloats / kb, 1, a.M);
  const int64_t nb = std::clamp<int64_t>(kWideFloats / std::max(kb, a.c_bf16 ? mb : 1), 1, a.N);
  for (int64_t i0 = 0; i0 < a.M; i0 += mb)
    for (int64_t j0 = 0; j0 < a.N; j0 += nb) gemm_widened_block(a, i0, std::min(mb, a.M - i0), j0, std::min(nb, a.N - j0), kb);
}

// Rows [i0, i0 + m) and columns [j0, j0 + n) of product a (batch 1), summed over K in chunks of
// kb: the first with a's beta and bias, the others added (beta 1); a bf16 C's block is
// accumulated in fp32 (wide_c) and rounded at the end.
void OneDnn::gemm_widened_block(const GemmArgs& a, int64_t i0, int64_t m, int64_t j0, int64_t n, int64_t kb) {
  Impl& d = *impl_;
  const GemmArgs blk = block_of(a, i0, m, j0, n);
  if (a.c_bf16 && d.wide_c.size() < static_cast<size_t>(m * n)) d.wide_c.resize(static_cast<size_t>(m * n));
  for (int64_t k0 = 0; k0 < a.K; k0 += kb) {
    GemmArgs c = blk;
    c.K = std::min(kb, a.K - k0);
    c.A = element(blk.A, a.a_bf16, a.ta ? k0 * a.lda : k0);
    c.B = element(blk.B, a.b_bf16, a.tb ? k0 : k0 * a.ldb);
    if (a.c_bf16) c.C = d.wide_c.data(), c.ldc = n, c.c_bf16 = false;
    if (k0 > 0) c.beta = 1.0f, c.bias = nullptr;
    gemm_widened_whole(c);
  }
  if (a.c_bf16)
    for (int64_t r = 0; r < m; ++r)
      pack_bf16_span(static_cast<size_t>(n), d.wide_c.data() + r * n, reinterpret_cast<uint16_t*>(blk.C) + r * a.ldc);
}

// A product (or group of batch entries) whose widened operands fit: widened whole, fp32 C.
void OneDnn::gemm_widened_whole(const GemmArgs& a) {
  Impl& d = *impl_;
  Lap lap;
  GemmArgs f = widened_args(a);
  f.A = widen_operand(a.batch, a.ta ? a.K : a.M, a.ta ? a.M : a.K, a.A, a.lda, a.stride_a, a.a_bf16, d.wide_a);
  f.B = widen_operand(a.batch, a.tb ? a.N : a.K, a.tb ? a.K : a.N, a.B, a.ldb, a.stride_b, a.b_bf16, d.wide_b);
  clock_.prepare_s += lap();
  gemm(Precision::fp32, f);
}

MatmulPlan& OneDnn::Impl::matmul_plan(Precision p, const GemmArgs& a) {
  const Operands o = operand_layout(p, a);
  const bool batched = a.batch > 1;
  const bool weight = kept_layout_wanted(keep_layouts, p, a);
  const MatmulKey key{static_cast<int64_t>(p), a.ta, a.tb, a.batch, a.M, a.N, a.K, o.lda, o.ldb, a.ldc,
                      batched ? o.sa : 0, batched ? o.sb : 0, batched ? a.stride_c : 0, bits_of(a.alpha),
                      bits_of(a.beta), a.bias != nullptr, a.c_bf16, weight};
  auto it = matmuls.find(key);
  if (it != matmuls.end()) return *it->second;
  const dt in = p == Precision::bf16 ? dt::bf16 : dt::f32;
  auto plan = std::make_unique<MatmulPlan>();
  try {
    const auto amd = matrix_md(in, a.batch, a.M, a.K, a.ta, o.lda, o.sa);
    const auto bmd = matrix_md(in, a.batch, a.K, a.N, a.tb, o.ldb, o.sb);
    const auto bany = weight ? dnnl::memory::desc({a.K, a.N}, in, tag::any) : bmd;
    const auto cmd = matrix_md(a.c_bf16 ? dt::bf16 : dt::f32, a.batch, a.M, a.N, false, a.ldc, a.stride_c);
    dnnl::primitive_attr attr;
    if (a.alpha != 1.0f) attr.set_output_scales(0, {a.alpha});
    if (a.beta != 0.0f) {
      dnnl::post_ops ops;
      ops.append_sum(a.beta);
      attr.set_post_ops(ops);
    }
    const dnnl::memory::desc biasmd = a.bias ? dnnl::memory::desc({1, a.N}, dt::f32, tag::ab) : dnnl::memory::desc();
    const dnnl::matmul::primitive_desc pd(a.bias ? dnnl::matmul::desc(amd, bany, biasmd, cmd) : dnnl::matmul::desc(amd, bany, cmd),
                                          attr, eng);
    plan->kept_layout = weight && pd.weights_desc() != bmd;
    if (plan->kept_layout) {
      plan->b_layout = pd.weights_desc();
      plan->to_layout = dnnl::reorder(dnnl::reorder::primitive_desc(eng, bmd, eng, plan->b_layout));
    }
    plan->prim = dnnl::matmul(pd);
    plan->impl = pd.impl_info_str();
    plan->a = dnnl::memory(amd, eng, DNNL_MEMORY_NONE);
    plan->b = dnnl::memory(bmd, eng, DNNL_MEMORY_NONE);
    plan->c = dnnl::memory(cmd, eng, DNNL_MEMORY_NONE);
    if (a.bias) plan->bias = dnnl::memory(biasmd, eng, DNNL_MEMORY_NONE);
  } catch (const dnnl::error& e) {
    onednn_fail(shape_str(p, a), e);
  }
  return *(matmuls[key] = std::move(plan));
}

void OneDnn::gemm(Precision p, const GemmArgs& a) {
  PT_CHECK(a.M > 0 && a.N > 0 && a.K > 0 && a.batch > 0, "oneDNN gemm wants a non-empty product: " << shape_str(p, a));
  PT_CHECK(!a.bias || a.batch == 1, "oneDNN gemm: a bias only without a batch: " << shape_str(p, a));
  PT_CHECK(!(a.a_bf16 || a.b_bf16 || a.c_bf16) || (p == Precision::bf16 && a.batch == 1 && (!a.c_bf16 || a.beta == 0.0f)),
           "oneDNN gemm: bf16 operands only in bf16, without a batch (and a bf16 C is not summed into): "
               << shape_str(p, a));
  Impl& d = *impl_;
  if (p == Precision::bf16 && d.widen_bf16) return gemm_widened(a);
  MatmulPlan& plan = d.matmul_plan(p, a);
  Lap lap;
  const void* A = a.A;
  const void* B = a.B;
  dnnl::memory weights = plan.b;
  if (plan.kept_layout) weights = kept_weight(d, plan, a);
  if (p == Precision::bf16) {
    if (!a.a_bf16) {
      pack_bf16(a.batch, a.ta ? a.K : a.M, a.ta ? a.M : a.K, a.A, a.lda, a.stride_a, d.bf_a);
      A = d.bf_a.data();
    }
    if (!a.b_bf16) {
      pack_bf16(a.batch, a.tb ? a.N : a.K, a.tb ? a.K : a.N, a.B, a.ldb, a.stride_b, d.bf_b);
      B = d.bf_b.data();
    }
  }
  clock_.prepare_s += lap();
  try {
    plan.a.set_data_handle(const_cast<void*>(A));
    if (!plan.kept_layout) plan.b.set_data_handle(const_cast<void*>(B));
    plan.c.set_data_handle(a.C);
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, plan.a}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, plan.c}};
    if (a.bias) {
      plan.bias.set_data_handle(const_cast<float*>(a.bias));
      args[DNNL_ARG_BIAS] = plan.bias;
    }
    plan.prim.execute(d.strm, args);
    d.strm.wait();
  } catch (const dnnl::error& e) {
    onednn_fail(shape_str(p, a), e);
  }
  clock_.execute_s += lap();
}

std::string OneDnn::gemm_impl(Precision p, const GemmArgs& a) {
  if (p != impl_->kernels(p)) return impl_->matmul_plan(Precision::fp32, widened_args(a)).impl + " (bf16 widened to fp32)";
  return impl_->matmul_plan(p, a).impl;
}

void OneDnn::forget_weights(const void* lo, const void* hi) {
  auto& kept = impl_->kept;
  for (auto it = kept.begin(); it != kept.end();)
    it = it->first.first >= lo && it->first.first < hi ? kept.erase(it) : std::next(it);
}

void OneDnn::set_kept_layouts(bool on) { impl_->keep_layouts = on; }

int64_t OneDnn::kept_weight_bytes() const {
  int64_t b = 0;
  for (const auto& kv : impl_->kept) b += kv.second.bytes;
  return b;
}

}  // namespace pt::host

namespace pt {

bool kept_weight_layouts() {
  static const bool on = [] {
    const char* env = std::getenv("PT_KEPT_LAYOUTS");
    return env && std::string(env) == "1";
  }();
  return on;
}

}  // namespace pt
