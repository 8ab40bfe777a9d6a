// build/pt_bench_kernels (bench/kernels.sh): the host backend's GEMM and convolution kernels
// on this machine, against this machine's matmul limit measured in the same run by code that
// is not pipetrain's.
// Contract: prints the CPU model (/proc/cpuinfo), OpenBLAS's core, oneDNN's version and
// effective ISA and the thread count; then the machine peak per precision: the best median of
// oneDNN's matmul called directly (machine_peak.hpp; weights plain and in the layout oneDNN
// picks, reordered once) at 1024^3 and 4096x4096x1024, sampled before and after the rows, and
// of the external measurements given with --external (bench/torch_matmul.py: torch.matmul),
// naming where the peak came from; then for every training GEMM of the MLP, tinygpt (T = 128,
// D = 256), gpt2_small (T = 256, D = 768) and the CNN, and every convolution of
// input/fashion_cnn.toml (and a 3-channel stem), and the fused causal attention of tinygpt and
// gpt2_small (useful FLOPs only: the causal half of each product): GFLOP/s of OpenBLAS fp32
// (im2col + OpenBLAS for convolutions), oneDNN fp32 and oneDNN bf16 through pipetrain's
// Backend (median of REPS samples, min-max), each as a fraction of the machine peak of its
// precision, the kernel the fp32 rule picks, and the oneDNN implementation names. Beside each
// row pipetrain's own 1024^3 GEMM is sampled, interleaved with the row, as a load check
// ("own" columns; not the peak).
// Every row call goes through the Backend interface. A bf16 GEMM row reads its operands as
// bf16 views packed once beforehand, as the training layers hand them over (activations,
// gradients and the weight version's bf16 array), so it times the product, not a conversion;
// the batched GEMM rows (fp32 pointers, as the composed attention passes them) and the
// convolution rows round their fp32 inputs inside the call.
// --csv FILE writes one row per shape and variant.
// Times are the calling thread's CPU time (the kernels run one thread, on it), so time slices
// lost to other jobs on a shared machine do not count; --clock wall times the wall clock.
// Usage: pt_bench_kernels [--reps N] [--ms M] [--csv FILE] [--only SUBSTRING] [--clock cpu|wall]
//                         [--external FILE]   (lines "NAME PREC SHAPE GFLOPS ...", e.g. torch_matmul.py's)
#include <omp.h>
#include <time.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <array>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "../src/kernels/host/host_backend.hpp"
#include "../src/kernels/host/vec_math.hpp"
#include "machine_peak.hpp"
#include "pipetrain/backend.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/fused.hpp"

namespace pt::bench {
namespace {

struct Options {
  int reps = 7;         // samples per variant
  double ms = 20;       // minimum milliseconds per sample (calls are repeated within one)
  std::string csv, only, external;
};

struct Stats {
  double median = 0, lo = 0, hi = 0;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return {n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]), v.front(), v.back()};
}

// The clock of a sample: the calling thread's CPU time by default (every kernel here runs on
// that one thread), so the time slices this shared machine gives the neighbours' jobs do not
// count; --clock wall uses the steady clock instead.
bool g_wall_clock = false;
double now_s() {
  if (g_wall_clock)
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("model name", 0) == 0) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

bool cpu_flag(const std::string& flag) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);)
    if (line.rfind("flags", 0) == 0) return (line + " ").find(" " + flag + " ") != std::string::npos;
  return false;
}

// The three kernel families (each its own host backend), then pipetrain's own 1024^3 GEMM in
// fp32 and bf16, sampled alongside every row as a load check (the peak is the machine's,
// MachinePeak, measured by code that is not pipetrain's).
enum Variant { kBlas, kDnn32, kDnn16, kPeak32, kPeak16, kVariants };
constexpr int kFamilies = 3;
const char* const kVariantName[kFamilies] = {"OpenBLAS fp32", "oneDNN fp32", "oneDNN bf16"};

struct Backends {
  std::unique_ptr<Backend> be[kFamilies];
  Precision p[kFamilies];  // the precision of each family's products
  host::HostBackend& host(int v) { return dynamic_cast<host::HostBackend&>(*be[v]); }
  Backends() {
    const host::Fp32Kernels k[kFamilies] = {host::Fp32Kernels::openblas, host::Fp32Kernels::onednn,
                                            host::Fp32Kernels::onednn};
    for (int v = 0; v < kFamilies; ++v) {
      be[v] = make_host_backend();
      host(v).set_fp32_kernels(k[v]);
      p[v] = v == kDnn16 ? Precision::bf16 : Precision::fp32;
    }
  }
};

// One benchmark row: a call per variant doing `flops` of work.
struct Row {
  std::string group, name;
  double flops = 0;
  std::function<void(Backend&, Precision)> call;
  bool rule_onednn = false;                 // the fp32 rule's pick for this shape (and pass)
  std::function<std::string(int)> impl;     // oneDNN implementation of variant kDnn32 / kDnn16
  bool ruled = true;                        // false: no library is picked (a fused kernel): "-"
};

// Samples of GFLOP/s per variant (the row's three families, then the peak row in fp32 and
// bf16), interleaved: after a warm-up (which builds the primitives), each sample repeats the
// call until it has run opt.ms milliseconds.
std::vector<Stats> measure(Backends& b, const Row& r, const Row& peak, const Options& opt) {
  auto run = [&](int v) {
    const int f = v < kFamilies ? v : v == kPeak32 ? kDnn32 : kDnn16;
    (v < kFamilies ? r : peak).call(*b.be[f], b.p[f]);
  };
  auto flops = [&](int v) { return v < kFamilies ? r.flops : peak.flops; };
  int inner[kVariants];
  for (int v = 0; v < kVariants; ++v) {
    run(v);
    const double t0 = now_s();
    run(v);
    const double t = std::max(1e-7, now_s() - t0);
    inner[v] = std::max(1, static_cast<int>(opt.ms * 1e-3 / t));
  }
  std::vector<std::vector<double>> gf(kVariants);
  for (int s = 0; s < opt.reps; ++s)
    for (int v = 0; v < kVariants; ++v) {
      const double t0 = now_s();
      for (int i = 0; i < inner[v]; ++i) run(v);
      gf[static_cast<size_t>(v)].push_back(achieved_gflops(flops(v) * inner[v], now_s() - t0));
    }
  std::vector<Stats> out;
  for (auto& g : gf) out.push_back(stats(g));
  return out;
}

// ---- the machine peak: raw oneDNN (machine_peak.hpp) and external measurements ----------

struct PeakCandidate {
  std::string source;  // "oneDNN blocked 1024x1024x1024", "torch 4096x4096x1024"
  bool bf16 = false;
  std::string impl;
  std::vector<double> samples;  // GFLOP/s (raw oneDNN: both rounds)
  Stats st;
};

struct MachinePeak {
  std::vector<PeakCandidate> candidates;
  double gflops[2] = {0, 0};  // fp32, bf16: the best candidate's median
  std::string source[2];
  double of(bool bf16) const { return gflops[bf16 ? 1 : 0]; }
};

std::vector<PeakShape> peak_shapes() { return {{1024, 1024, 1024}, {4096, 4096, 1024}}; }

// One round of the raw matmuls, interleaved: `reps` samples of each, each sample at least
// opt.ms milliseconds of calls (calibrated after a warm-up call).
void sample_raw(std::vector<std::unique_ptr<RawMatmul>>& mats, std::vector<PeakCandidate>& cands, const Options& opt) {
  std::vector<int> inner(mats.size());
  for (size_t i = 0; i < mats.size(); ++i) {
    mats[i]->call();
    const double t0 = now_s();
    mats[i]->call();
    inner[i] = std::max(1, static_cast<int>(opt.ms * 1e-3 / std::max(1e-7, now_s() - t0)));
  }
  for (int r = 0; r < opt.reps; ++r)
    for (size_t i = 0; i < mats.size(); ++i) {
      const double t0 = now_s();
      for (int k = 0; k < inner[i]; ++k) mats[i]->call();
      cands[i].samples.push_back(achieved_gflops(mats[i]->shape().flops() * inner[i], now_s() - t0));
    }
}

// Lines "NAME PREC SHAPE MEDIAN [MIN MAX]" (bench/torch_matmul.py writes "torch bf16 1024x1024x1024 ...").
void read_external(const std::string& path, std::vector<PeakCandidate>& cands) {
  std::ifstream in(path);
  PT_REQUIRE(in, Exit::bad_input, "pt_bench_kernels: cannot read --external " << path);
  for (std::string line; std::getline(in, line);) {
    char name[64], prec[16], shape[64];
    double med = 0;
    if (std::sscanf(line.c_str(), "%63s %15s %63s %lf", name, prec, shape, &med) != 4) continue;
    PeakCandidate c;
    c.source = std::string(name) + " " + shape;
    c.bf16 = std::string(prec) == "bf16";
    c.impl = name;
    c.samples.push_back(med);
    cands.push_back(c);
  }
}

MachinePeak finish_peak(std::vector<PeakCandidate> cands) {
  MachinePeak p;
  for (PeakCandidate& c : cands) {
    c.st = stats(c.samples);
    const int k = c.bf16 ? 1 : 0;
    if (c.st.median > p.gflops[k]) p.gflops[k] = c.st.median, p.source[k] = c.source;
  }
  p.candidates = std::move(cands);
  return p;
}

void print_peak(const MachinePeak& p) {
  std::printf("machine peak candidates (median, min-max GFLOP/s of this thread's time):\n");
  for (const PeakCandidate& c : p.candidates)
    std::printf("  %-4s %-34s %7.1f (%.1f-%.1f)  %s\n", c.bf16 ? "bf16" : "fp32", c.source.c_str(), c.st.median, c.st.lo,
                c.st.hi, c.impl.c_str());
  std::printf("machine peak: fp32 %.1f GFLOP/s (%s), bf16 %.1f GFLOP/s (%s)\n", p.gflops[0], p.source[0].c_str(),
              p.gflops[1], p.source[1].c_str());
}

std::vector<float> filled(size_t n, unsigned seed) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(static_cast<int>((i * 2654435761u + seed) % 2001) - 1000) * 1e-3f;
  return v;
}

// A GEMM row: C[M,N] (+)= op(A) op(B) (batched with `batch` dense entries).
Row gemm_row(const std::string& group, const std::string& name, bool ta, bool tb, int64_t M, int64_t N, int64_t K,
             int64_t batch, float beta) {
  auto A = std::make_shared<std::vector<float>>(filled(static_cast<size_t>(batch * M * K), 1));
  auto B = std::make_shared<std::vector<float>>(filled(static_cast<size_t>(batch * K * N), 2));
  auto C = std::make_shared<std::vector<float>>(filled(static_cast<size_t>(batch * M * N), 3));
  auto packed = [](const std::vector<float>& x) {  // a bf16 view: ceil(n / 2) floats of bf16 pairs
    auto v = std::make_shared<std::vector<float>>((x.size() + 1) / 2);
    host::pack_bf16_span(x.size(), x.data(), v->data());
    return v;
  };
  auto Ab = packed(*A), Bb = packed(*B);
  const int64_t lda = ta ? M : K, ldb = tb ? K : N;
  Row r;
  r.group = group;
  r.name = name;
  r.flops = 2.0 * M * N * K * batch;
  r.call = [=](Backend& be, Precision p) {
    const bool b16 = p == Precision::bf16;
    const CView a = b16 ? CView(Ab->data(), DType::bf16) : CView(A->data());
    const CView b = b16 ? CView(Bb->data(), DType::bf16) : CView(B->data());
    if (batch == 1) be.gemm(ta, tb, M, N, K, 1.0f, a, lda, b, ldb, beta, C->data(), N, p);
    else
      be.gemm_strided_batched(ta, tb, M, N, K, 1.0f, A->data(), lda, M * K, B->data(), ldb, K * N, beta, C->data(), N,
                              M * N, batch, p);
  };
  r.rule_onednn = host::onednn_wins_gemm_fp32(ta, tb, M, N, K, batch);
  r.impl = [=](int v) {
    host::OneDnn dnn;
    host::GemmArgs a;
    a.ta = ta, a.tb = tb, a.M = M, a.N = N, a.K = K, a.beta = beta, a.batch = batch;
    a.lda = lda, a.ldb = ldb, a.ldc = N, a.stride_a = M * K, a.stride_b = K * N, a.stride_c = M * N;
    return dnn.gemm_impl(v == kDnn16 ? Precision::bf16 : Precision::fp32, a);
  };
  return r;
}

// The three GEMMs of a linear layer in -> out over `rows` samples (layer.cpp's calls).
void linear_rows(std::vector<Row>& rows, const std::string& group, const std::string& tag, int64_t R, int64_t in,
                 int64_t out) {
  const std::string s = "[" + std::to_string(R) + "x" + std::to_string(in) + "]x[" + std::to_string(in) + "x" +
                        std::to_string(out) + "]";
  rows.push_back(gemm_row(group, tag + " fwd " + s, false, true, R, out, in, 1, 0.0f));
  rows.push_back(gemm_row(group, tag + " dx  " + s, false, false, R, in, out, 1, 0.0f));
  rows.push_back(gemm_row(group, tag + " dw  " + s, true, false, out, in, R, 1, 1.0f));
}

// The fused causal attention core of a transformer block (FusedKernels::attention_forward /
// attention_backward, as the block calls it: q, k, v in one token-major [n T, 3 D] buffer, the
// probabilities kept, in bf16 every view bf16), n sequences of T, H heads of dh. Its FLOPs
// are the useful ones, the causal half of each product (T (T + 1) / 2 x dh multiply-adds: two
// products forward, four backward), so the fraction says how close the kernel runs to the
// machine's GEMM rate on the work it must do; the softmax rows are not counted. The fp32
// columns run the same fp32 kernel (it calls no GEMM library). Not in the GEMM goal.
void attention_rows(std::vector<Row>& rows, const std::string& group, int64_t n, int64_t T, int64_t H, int64_t dh) {
  AttentionGeom geom;
  geom.n = n, geom.T = T, geom.H = H, geom.dh = dh, geom.scale = 1.0f / std::sqrt(static_cast<float>(dh));
  const size_t nx = static_cast<size_t>(n * T * 3 * H * dh), no = static_cast<size_t>(n * T * H * dh);
  const size_t np = static_cast<size_t>(n * H * T * T);
  auto x = std::make_shared<std::vector<float>>(filled(nx, 8)), dout = std::make_shared<std::vector<float>>(filled(no, 9));
  auto xb = std::make_shared<std::vector<float>>((nx + 1) / 2);
  host::pack_bf16_span(nx, x->data(), xb->data());
  auto P32 = std::make_shared<std::vector<float>>(np), P16 = std::make_shared<std::vector<float>>((np + 1) / 2);
  auto o = std::make_shared<std::vector<float>>(no), dx = std::make_shared<std::vector<float>>(nx);
  struct Operands {  // what a call in precision p reads and writes: bf16 views in bf16
    AttentionGeom g;
    CView x;
    View P, o, dx;
  };
  auto operands = [=](Precision p) {
    AttentionGeom g = geom;
    g.precision = p;
    const DType t = p == Precision::bf16 ? DType::bf16 : DType::f32;
    return Operands{g, CView(t == DType::bf16 ? xb->data() : x->data(), t),
                    View(t == DType::bf16 ? P16->data() : P32->data(), t), View(o->data(), t), View(dx->data(), t)};
  };
  auto forward = [=](Backend& be, Precision p) {
    const Operands a = operands(p);
    be.fused().attention_forward(a.g, a.x, a.P, a.o);
  };
  const double useful = 2.0 * static_cast<double>(T * (T + 1) / 2) * static_cast<double>(dh) * static_cast<double>(n * H);
  const std::string s = std::to_string(n) + "x" + std::to_string(H) + " heads [" + std::to_string(T) + "x" + std::to_string(dh) + "]";
  Row f;
  f.group = group, f.name = "attn fused fwd " + s, f.flops = 2 * useful, f.call = forward;
  f.impl = [](int) { return std::string("fused"); };
  f.ruled = false;
  rows.push_back(f);
  Row b = f;
  b.name = "attn fused bwd " + s, b.flops = 4 * useful;
  auto ready = std::make_shared<std::array<bool, 2>>();  // P filled by a forward, per precision
  b.call = [=](Backend& be, Precision p) {
    const bool b16 = p == Precision::bf16;
    if (!(*ready)[b16]) forward(be, p), (*ready)[b16] = true;  // in the warm-up call
    const Operands a = operands(p);
    be.fused().attention_backward(a.g, a.x, a.P, dout->data(), a.dx);
  };
  rows.push_back(b);
}

WindowGeom conv_geom(int64_t c_in, int64_t h, int64_t c_out, int64_t k, int64_t pad) {
  WindowGeom g;
  g.c_in = c_in, g.h_in = h, g.w_in = h, g.c_out = c_out, g.kernel = k, g.stride = 1, g.padding = pad;
  g.h_out = g.w_out = h + 2 * pad - k + 1;
  return g;
}

// Convolution rows: forward (with bias), backward data, backward weights + bias.
void conv_rows(std::vector<Row>& rows, const std::string& tag, const WindowGeom& g, int64_t n) {
  const size_t xs = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in), ys = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
  const size_t ws = static_cast<size_t>(g.c_out * g.c_in * g.kernel * g.kernel);
  auto x = std::make_shared<std::vector<float>>(filled(xs, 4)), dx = std::make_shared<std::vector<float>>(xs);
  auto w = std::make_shared<std::vector<float>>(filled(ws, 5)), dw = std::make_shared<std::vector<float>>(ws);
  auto b = std::make_shared<std::vector<float>>(filled(static_cast<size_t>(g.c_out), 6));
  auto db = std::make_shared<std::vector<float>>(static_cast<size_t>(g.c_out));
  auto y = std::make_shared<std::vector<float>>(ys), dy = std::make_shared<std::vector<float>>(filled(ys, 7));
  const double flops = 2.0 * n * g.c_out * g.h_out * g.w_out * g.c_in * g.kernel * g.kernel;
  const std::string s = tag + " n" + std::to_string(n) + " " + std::to_string(g.c_in) + "x" + std::to_string(g.h_in) +
                        "x" + std::to_string(g.w_in) + "->" + std::to_string(g.c_out) + " k" + std::to_string(g.kernel);
  auto rule = [=](host::ConvPass pass) { return host::onednn_wins_conv_fp32(g, n, pass); };
  auto impl = [=](int part) {  // conv_impl: "fwd A, bwd_data B, bwd_weights C" -> part 0, 1, 2
    return [=](int v) {
      host::OneDnn dnn;
      std::string all = dnn.conv_impl(v == kDnn16 ? Precision::bf16 : Precision::fp32, g, n) + ", ";
      for (int i = 0; i < part; ++i) all = all.substr(all.find(", ") + 2);
      all = all.substr(0, all.find(", "));
      return all.substr(all.find(' ') + 1);
    };
  };
  const std::string group = tag == "stem" ? "resnet conv" : "cnn conv";
  rows.push_back({group, s + " fwd", flops,
                  [=](Backend& be, Precision p) { be.conv2d_forward(g, n, x->data(), w->data(), b->data(), y->data(), p); },
                  rule(host::ConvPass::forward), impl(0)});
  rows.push_back({group, s + " bwd_data", flops,
                  [=](Backend& be, Precision p) {
                    be.conv2d_backward(g, n, x->data(), w->data(), dy->data(), dx->data(), nullptr, nullptr, p);
                  },
                  rule(host::ConvPass::backward_data), impl(1)});
  rows.push_back({group, s + " bwd_w+b", flops,
                  [=](Backend& be, Precision p) {
                    be.conv2d_backward(g, n, x->data(), w->data(), dy->data(), nullptr, dw->data(), db->data(), p);
                  },
                  rule(host::ConvPass::backward_weights), impl(2)});
}

std::vector<Row> all_rows() {
  std::vector<Row> rows;
  for (int64_t B : {32, 128}) {  // fashion_mlp: 784-512-512-10
    const std::string g = "mlp b" + std::to_string(B);
    linear_rows(rows, g, "fc1", B, 784, 512);
    linear_rows(rows, g, "fc2", B, 512, 512);
    linear_rows(rows, g, "fc3", B, 512, 10);
  }
  const int64_t R = 8 * 128;  // tinygpt: 8 sequences of T = 128, D = 256, 8 heads of 32
  linear_rows(rows, "tinygpt", "qkv ", R, 256, 768);
  linear_rows(rows, "tinygpt", "proj", R, 256, 256);
  linear_rows(rows, "tinygpt", "up  ", R, 256, 1024);
  linear_rows(rows, "tinygpt", "down", R, 1024, 256);
  const int64_t R2 = 4 * 256;  // gpt2_small: a microbatch of 4 sequences of T = 256, D = 768, 12 heads of 64
  linear_rows(rows, "gpt2_small", "qkv ", R2, 768, 2304);
  linear_rows(rows, "gpt2_small", "proj", R2, 768, 768);
  linear_rows(rows, "gpt2_small", "up  ", R2, 768, 3072);
  linear_rows(rows, "gpt2_small", "down", R2, 3072, 768);
  linear_rows(rows, "gpt2_small", "head", R2, 768, 256);
  // the linears at 16 sequences (bench/peer_pytorch.sh's one microbatch of gpt2_small): the
  // MLP down-projection is the fp32 rule's N >= 2048, K >= 512 class (kernel_choice.cpp)
  linear_rows(rows, "gpt2_small", "dn16", 4 * R2, 3072, 768);
  linear_rows(rows, "gpt2_small", "qk16", 4 * R2, 768, 2304);
  linear_rows(rows, "gpt2_small", "pj16", 4 * R2, 768, 768);
  linear_rows(rows, "gpt2_small", "up16", 4 * R2, 768, 3072);
  rows.push_back(gemm_row("tinygpt", "attn S=QK^T  64x[128x32]x[32x128]", false, true, 128, 128, 32, 64, 0.0f));
  rows.push_back(gemm_row("tinygpt", "attn O=PV    64x[128x128]x[128x32]", false, false, 128, 32, 128, 64, 0.0f));
  rows.push_back(gemm_row("tinygpt", "attn dV=P^TdO 64x[128x128]x[128x32]", true, false, 128, 32, 128, 64, 0.0f));
  attention_rows(rows, "tinygpt", 8, 128, 8, 32);
  attention_rows(rows, "gpt2_small", 4, 256, 12, 64);
  conv_rows(rows, "conv0", conv_geom(1, 28, 32, 3, 1), 128);  // fashion_cnn
  conv_rows(rows, "conv1", conv_geom(32, 14, 64, 3, 1), 128);
  conv_rows(rows, "conv0", conv_geom(1, 28, 32, 3, 1), 32);
  conv_rows(rows, "conv1", conv_geom(32, 14, 64, 3, 1), 32);
  conv_rows(rows, "stem", conv_geom(3, 32, 16, 3, 1), 32);  // a 3-channel first layer (CIFAR-sized)
  linear_rows(rows, "cnn fc", "fc1", 128, 3136, 128);
  linear_rows(rows, "cnn fc", "fc2", 128, 128, 10);
  return rows;
}

void print_machine() {
  std::printf("CPU: %s (%d online cores; avx512_bf16 %s, amx_bf16 %s)\n", cpu_model().c_str(),
              static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)), cpu_flag("avx512_bf16") ? "yes" : "no",
              cpu_flag("amx_bf16") ? "yes" : "no");
  std::printf("BLAS: %s\n", blas_description().c_str());
  std::printf("%s\n", onednn_description().c_str());
  if (!host::onednn_bf16_native())
    std::printf("bf16: this CPU's oneDNN has no bf16 kernels; pipetrain's bf16 rows are fp32 products of widened bf16 "
                "operands, and the bf16 peak is torch.matmul's (or none)\n");
  std::printf("fp32 kernel rule (src/kernels/host/kernel_choice.cpp): %s\n", host::fp32_rule_description().c_str());
  const char* omp = std::getenv("OMP_NUM_THREADS");
  std::printf("threads: oneDNN (OpenMP) %d, OMP_NUM_THREADS=%s\n", omp_get_max_threads(), omp ? omp : "(unset)");
}

// fraction of a family's median against the machine peak of its precision
double fraction(const std::vector<Stats>& st, int v, const MachinePeak& mp) {
  return st[static_cast<size_t>(v)].median / mp.of(v == kDnn16);
}

const char* rule_name(const Row& r) { return !r.ruled ? "-" : r.rule_onednn ? "oneDNN" : "OpenBLAS"; }

void print_row(const Row& r, const std::vector<Stats>& st, const std::string& impl32, const std::string& impl16,
               const MachinePeak& mp) {
  std::printf("%-12s %-44s %8.4f", r.group.c_str(), r.name.c_str(), r.flops * 1e-9);
  for (int v = 0; v < kFamilies; ++v) {
    const Stats& x = st[static_cast<size_t>(v)];
    char cell[64];
    std::snprintf(cell, sizeof cell, "%.0f (%.0f-%.0f) %.2f", x.median, x.lo, x.hi, fraction(st, v, mp));
    std::printf("  %-22s", cell);
  }
  std::printf("  %4.0f %4.0f  %-8s %s | %s\n", st[kPeak32].median, st[kPeak16].median,
              rule_name(r), impl32.c_str(), impl16.c_str());
}

void print_header(const Options& opt) {
  std::printf("GFLOP/s through pipetrain's Backend: median of %d samples of >= %.0f ms of %s time (min-max), then the\n"
              "fraction of the machine peak of its precision; 'own' = pipetrain's 1024^3 GEMM sampled alongside (load check)\n",
              opt.reps, opt.ms, g_wall_clock ? "wall-clock" : "thread CPU");
  std::printf("%-12s %-44s %8s  %-22s  %-22s  %-22s  %4s %4s  %-8s %s\n", "group", "shape", "GFLOP", kVariantName[kBlas],
              kVariantName[kDnn32], kVariantName[kDnn16], "own32", "own16", "fp32 rule", "oneDNN impl fp32 | bf16");
}

void csv_rows(std::ofstream& csv, const Row& r, const std::vector<Stats>& st, const std::string& i32,
              const std::string& i16, const MachinePeak& mp) {
  for (int v = 0; v < kFamilies; ++v)
    csv << r.group << ",\"" << r.name << "\"," << r.flops * 1e-9 << "," << kVariantName[v] << "," << st[v].median << ","
        << st[v].lo << "," << st[v].hi << "," << fraction(st, v, mp) << "," << mp.of(v == kDnn16) << ",\""
        << mp.source[v == kDnn16 ? 1 : 0] << "\"," << st[v == kDnn16 ? kPeak16 : kPeak32].median
        << "," << rule_name(r) << "," << (v == kBlas ? "openblas" : v == kDnn32 ? i32 : i16)
        << "\n";
}

// The raw oneDNN matmuls of the machine peak: both shapes, both precisions, plain and blocked.
std::vector<std::unique_ptr<RawMatmul>> raw_matmuls(std::vector<PeakCandidate>& cands) {
  std::vector<std::unique_ptr<RawMatmul>> mats;
  for (const PeakShape& sh : peak_shapes())
    for (bool bf16 : {false, true})
      for (bool blocked : {false, true}) {
        if (bf16 && !host::onednn_bf16_native()) continue;  // no bf16 kernels to call (onednn.hpp)
        mats.push_back(std::make_unique<RawMatmul>(sh, bf16, blocked));
        PeakCandidate c;
        c.source = mats.back()->name().substr(0, mats.back()->name().find(bf16 ? " bf16" : " fp32")) + " " + sh.text();
        c.bf16 = bf16;
        c.impl = mats.back()->impl();
        cands.push_back(c);
      }
  return mats;
}

int run(const Options& opt) {
  print_machine();
  std::vector<PeakCandidate> cands;
  std::vector<std::unique_ptr<RawMatmul>> mats = raw_matmuls(cands);
  std::fprintf(stderr, "machine peak, round 1 ...\n");
  sample_raw(mats, cands, opt);  // before the rows
  Backends b;
  const Row own = gemm_row("own", "matmul [1024x1024]x[1024x1024]", false, false, 1024, 1024, 1024, 1, 0.0f);
  std::vector<Row> rows = all_rows();
  rows.insert(rows.begin(), own);
  struct Done { const Row* r; std::vector<Stats> st; std::string i32, i16; };
  std::vector<Done> done;
  for (const Row& r : rows) {
    if (!opt.only.empty() && (r.group + " " + r.name).find(opt.only) == std::string::npos) continue;
    std::fprintf(stderr, "  %s %s\n", r.group.c_str(), r.name.c_str());
    done.push_back({&r, measure(b, r, own, opt), r.impl(kDnn32), r.impl(kDnn16)});
  }
  std::fprintf(stderr, "machine peak, round 2 ...\n");
  sample_raw(mats, cands, opt);  // after the rows: a drifting host moves both rounds' samples
  if (!opt.external.empty()) read_external(opt.external, cands);
  const MachinePeak mp = finish_peak(cands);
  print_peak(mp);
  print_header(opt);
  std::ofstream csv;
  if (!opt.csv.empty()) {
    csv.open(opt.csv);
    csv << "group,shape,gflop,variant,median_gflops,min_gflops,max_gflops,fraction_of_peak,peak_gflops,peak_source,own_gflops,"
           "fp32_rule,impl\n";
  }
  for (const Done& d : done) {
    print_row(*d.r, d.st, d.i32, d.i16, mp);
    if (csv) csv_rows(csv, *d.r, d.st, d.i32, d.i16, mp);
  }
  return 0;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    PT_REQUIRE(i + 1 < argc, Exit::bad_input, "pt_bench_kernels: " << a << " wants a value");
    const std::string v = argv[++i];
    if (a == "--reps") o.reps = std::max(1, std::atoi(v.c_str()));
    else if (a == "--ms") o.ms = std::max(0.1, std::atof(v.c_str()));
    else if (a == "--csv") o.csv = v;
    else if (a == "--only") o.only = v;
    else if (a == "--clock") g_wall_clock = v == "wall";
    else if (a == "--external") o.external = v;
    else fail(Exit::bad_input,
              "pt_bench_kernels: unknown option " + a +
                  " (--reps N, --ms M, --csv FILE, --only TEXT, --clock cpu|wall, --external FILE)");
  }
  return o;
}

}  // namespace
}  // namespace pt::bench

int main(int argc, char** argv) {
  pt::select_blas_core(argc, argv);  // may re-exec with OpenBLAS's core for this CPU
  int rc = 0;
  try {
    const pt::bench::Options opt = pt::bench::parse(argc, argv);
    Kokkos::InitArguments kargs;
    kargs.disable_warnings = true;
    Kokkos::ScopeGuard kokkos(kargs);
    rc = pt::bench::run(opt);
  } catch (const pt::Error& e) {
    std::fprintf(stderr, "pt_bench_kernels: %s\n", e.what());
    rc = static_cast<int>(e.code());
  }
  return rc;
}
