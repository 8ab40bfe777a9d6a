// cuDNN behind conv2d (forward, backward data, backward filter, bias), average pooling and
// batch normalisation (spatial mode: forward training and inference, backward).
// Plans (descriptors and chosen algorithms) are cached per geometry and batch size.
// Algorithms come from cuDNN's heuristics (no benchmarking, so every rank with the same
// shapes makes the same choice), deterministic ones preferred, FP32 FMA math unless
// PT_CUDA_TF32=1 (so a GPU run tracks the CPU run; bf16 plans use tensor cores, see
// cuda_bf16.cu), workspace at most
// PT_CUDNN_WORKSPACE_MB (default 512). Max pooling is a CUDA kernel (cuda_kernels.cu):
// the ops interface keeps an argmax with PyTorch's first-maximum tie rule, which cuDNN's
// max pooling does not expose.
//
// This uses cuDNN's legacy convolution and pooling API, deprecated (not removed) in
// cuDNN 9; the graph API is the migration path when it goes.
#include <algorithm>
#include <vector>

#include "cuda_backend.hpp"
#include "cuda_common.hpp"

namespace pt::cuda {

// bf16 plans: x, y and w in bf16 (cuDNN's PSEUDO_BFLOAT16 configuration, fp32 compute);
// y32 and bias are fp32 in every plan (the bias is added to the fp32 output).
struct ConvPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, y32 = nullptr, bias = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t fwd = nullptr, bwd_data = nullptr, bwd_filter = nullptr;  // one per math type choice
  cudnnConvolutionFwdAlgo_t fwd_algo{};
  cudnnConvolutionBwdDataAlgo_t data_algo{};
  cudnnConvolutionBwdFilterAlgo_t filter_algo{};
  size_t fwd_ws = 0, data_ws = 0, filter_ws = 0;
};

struct PoolPlan {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnPoolingDescriptor_t pool = nullptr;
};

struct BnPlan {
  cudnnTensorDescriptor_t x = nullptr, bn = nullptr;  // x: n x C x HW x 1; bn: derived 1 x C x 1 x 1
};

namespace {

GeomKey key_of(const WindowGeom& g, int64_t n, int64_t extra) {
  return {{g.c_in, g.h_in, g.w_in, g.c_out, g.kernel, g.stride, g.padding, n, extra}};
}

int to_int(int64_t v, const char* what) {
  PT_CHECK(v >= 0 && v <= INT32_MAX, what << " " << v << " exceeds cuDNN's int");
  return static_cast<int>(v);
}

cudnnTensorDescriptor_t nchw(int64_t n, int64_t c, int64_t h, int64_t w, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
  cudnnTensorDescriptor_t d;
  PT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d));
  PT_CUDNN_CHECK(cudnnSetTensor4dDescriptor(d, CUDNN_TENSOR_NCHW, type, to_int(n, "batch"),
                                            to_int(c, "channels"), to_int(h, "height"), to_int(w, "width")));
  return d;
}

cudnnConvolutionDescriptor_t conv_desc(const WindowGeom& g, cudnnMathType_t math) {
  cudnnConvolutionDescriptor_t d;
  PT_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
  const int p = to_int(g.padding, "padding"), s = to_int(g.stride, "stride");
  // cross-correlation, as PyTorch's conv2d and the host kernel
  PT_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(d, p, p, s, s, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  PT_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  return d;
}

// Pick from heuristic results (best first): status ok, within the workspace cap, FMA math
// unless tensor ops are allowed (TF32, or bf16 tensors), deterministic preferred. Returns
// the index or -1.
template <class Perf>
int pick(const std::vector<Perf>& perf, int count, size_t ws_limit, bool tensor_ops) {
  int any = -1;
  for (int i = 0; i < count; ++i) {
    const Perf& p = perf[static_cast<size_t>(i)];
    if (p.status != CUDNN_STATUS_SUCCESS || p.memory > ws_limit) continue;
    if (!tensor_ops && p.mathType != CUDNN_FMA_MATH) continue;
    if (p.determinism == CUDNN_DETERMINISTIC) return i;
    if (any < 0) any = i;
  }
  return any;
}

}  // namespace

void* CudaBackend::dnn_workspace(size_t bytes) {
  if (bytes > ws_size_) {
    if (ws_) PT_CU_CHECK(cudaFree(ws_));  // waits for kernels that used the old one
    ws_ = nullptr;
    ws_size_ = 0;
    PT_CU_CHECK(cudaMalloc(&ws_, bytes));
    ws_size_ = bytes;
  }
  return ws_;
}

ConvPlan& CudaBackend::conv_plan(const WindowGeom& g, int64_t n, bool bf16) {
  const GeomKey key = key_of(g, n, bf16 ? 3 : 0);
  auto it = conv_plans_.find(key);
  if (it != conv_plans_.end()) return *it->second;
  auto* p = new ConvPlan;
  conv_plans_[key] = p;
  const cudnnDataType_t type = bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
  p->x = nchw(n, g.c_in, g.h_in, g.w_in, type);
  p->y = nchw(n, g.c_out, g.h_out, g.w_out, type);
  p->y32 = nchw(n, g.c_out, g.h_out, g.w_out);
  p->bias = nchw(1, g.c_out, 1, 1);
  PT_CUDNN_CHECK(cudnnCreateFilterDescriptor(&p->w));
  PT_CUDNN_CHECK(cudnnSetFilter4dDescriptor(p->w, type, CUDNN_TENSOR_NCHW, to_int(g.c_out, "channels"),
                                            to_int(g.c_in, "channels"), to_int(g.kernel, "kernel"),
                                            to_int(g.kernel, "kernel")));
  const bool tensor_ops = tf32_ || bf16;
  const cudnnMathType_t math = bf16 ? CUDNN_TENSOR_OP_MATH : tf32_ ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
  p->fwd = conv_desc(g, math);
  p->bwd_data = conv_desc(g, math);
  p->bwd_filter = conv_desc(g, math);
  {  // the output shape cuDNN derives must be the layer's
    int on = 0, oc = 0, oh = 0, ow = 0;
    PT_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(p->fwd, p->x, p->w, &on, &oc, &oh, &ow));
    PT_CHECK(on == n && oc == g.c_out && oh == g.h_out && ow == g.w_out,
             "cuDNN convolution output " << on << "x" << oc << "x" << oh << "x" << ow << " != layer's " << n << "x"
                                         << g.c_out << "x" << g.h_out << "x" << g.w_out);
  }
  int max_count = 0, count = 0;
  // forward
  PT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(dnn_, &max_count));
  std::vector<cudnnConvolutionFwdAlgoPerf_t> fperf(static_cast<size_t>(std::max(1, max_count)));
  PT_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(dnn_, p->x, p->w, p->fwd, p->y, max_count, &count, fperf.data()));
  int i = pick(fperf, count, ws_limit_, tensor_ops);
  p->fwd_algo = i >= 0 ? fperf[static_cast<size_t>(i)].algo : CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  PT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->fwd, i >= 0 ? fperf[static_cast<size_t>(i)].mathType : math));
  PT_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(dnn_, p->x, p->w, p->fwd, p->y, p->fwd_algo, &p->fwd_ws));
  // backward data
  PT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(dnn_, &max_count));
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> dperf(static_cast<size_t>(std::max(1, max_count)));
  PT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(dnn_, p->w, p->y, p->bwd_data, p->x, max_count, &count,
                                                             dperf.data()));
  i = pick(dperf, count, ws_limit_, tensor_ops);
  p->data_algo = i >= 0 ? dperf[static_cast<size_t>(i)].algo : CUDNN_CONVOLUTION_BWD_DATA_ALGO_1;
  PT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->bwd_data, i >= 0 ? dperf[static_cast<size_t>(i)].mathType : math));
  PT_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(dnn_, p->w, p->y, p->bwd_data, p->x, p->data_algo,
                                                              &p->data_ws));
  // backward filter
  PT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(dnn_, &max_count));
  std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> wperf(static_cast<size_t>(std::max(1, max_count)));
  PT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(dnn_, p->x, p->y, p->bwd_filter, p->w, max_count, &count,
                                                               wperf.data()));
  i = pick(wperf, count, ws_limit_, tensor_ops);
  p->filter_algo = i >= 0 ? wperf[static_cast<size_t>(i)].algo : CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  PT_CUDNN_CHECK(cudnnSetConvolutionMathType(p->bwd_filter, i >= 0 ? wperf[static_cast<size_t>(i)].mathType : math));
  PT_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(dnn_, p->x, p->y, p->bwd_filter, p->w, p->filter_algo,
                                                                &p->filter_ws));
  return *p;
}

PoolPlan& CudaBackend::pool_plan(const WindowGeom& g, int64_t n) {
  const GeomKey key = key_of(g, n, 1);
  auto it = pool_plans_.find(key);
  if (it != pool_plans_.end()) return *it->second;
  auto* p = new PoolPlan;
  pool_plans_[key] = p;
  p->x = nchw(n, g.c_in, g.h_in, g.w_in);
  p->y = nchw(n, g.c_out, g.h_out, g.w_out);
  PT_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&p->pool));
  const int k = to_int(g.kernel, "kernel"), pad = to_int(g.padding, "padding"), s = to_int(g.stride, "stride");
  // average over the whole window, padding included (PyTorch's count_include_pad, the host's rule)
  PT_CUDNN_CHECK(cudnnSetPooling2dDescriptor(p->pool, CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING, CUDNN_PROPAGATE_NAN,
                                             k, k, pad, pad, s, s));
  int on = 0, oc = 0, oh = 0, ow = 0;
  PT_CUDNN_CHECK(cudnnGetPooling2dForwardOutputDim(p->pool, p->x, &on, &oc, &oh, &ow));
  PT_CHECK(on == n && oc == g.c_out && oh == g.h_out && ow == g.w_out,
           "cuDNN pooling output " << on << "x" << oc << "x" << oh << "x" << ow << " != layer's " << n << "x" << g.c_out
                                   << "x" << g.h_out << "x" << g.w_out);
  return *p;
}

void CudaBackend::release_dnn_plans() {
  for (auto& kv : conv_plans_) {
    ConvPlan* p = kv.second;
    cudnnDestroyTensorDescriptor(p->x);
    cudnnDestroyTensorDescriptor(p->y);
    cudnnDestroyTensorDescriptor(p->y32);
    cudnnDestroyTensorDescriptor(p->bias);
    cudnnDestroyFilterDescriptor(p->w);
    cudnnDestroyConvolutionDescriptor(p->fwd);
    cudnnDestroyConvolutionDescriptor(p->bwd_data);
    cudnnDestroyConvolutionDescriptor(p->bwd_filter);
    delete p;
  }
  conv_plans_.clear();
  for (auto& kv : pool_plans_) {
    PoolPlan* p = kv.second;
    cudnnDestroyTensorDescriptor(p->x);
    cudnnDestroyTensorDescriptor(p->y);
    cudnnDestroyPoolingDescriptor(p->pool);
    delete p;
  }
  pool_plans_.clear();
  for (auto& kv : bn_plans_) {
    cudnnDestroyTensorDescriptor(kv.second->x);
    cudnnDestroyTensorDescriptor(kv.second->bn);
    delete kv.second;
  }
  bn_plans_.clear();
}

namespace {
void require_nchw(const char* what, ImageLayout l) {
  PT_CHECK(l == ImageLayout::nchw, what << ": the CUDA backend takes NCHW activations only");
}
}  // namespace

void CudaBackend::relayout(int64_t n, int64_t C, int64_t HW, ImageLayout from, const float* x, ImageLayout to,
                           View y) {
  PT_CHECK(from == to && !y.bf16(), "relayout: the CUDA backend keeps NCHW fp32 activations only");
  copy(y.data, x, static_cast<size_t>(n * C * HW));
}

void CudaBackend::relu_backward_relayout(int64_t n, int64_t C, int64_t HW, const float* y, const float* dy,
                                         ImageLayout to, float* dx) {
  require_nchw("relu_backward_relayout", to);
  relu_backward(static_cast<size_t>(n * C * HW), y, dy, dx);
}

void CudaBackend::conv2d_forward(const WindowGeom& g, int64_t n, CView xv, const float* w, const float* b, float* y,
                                 Precision prec, ConvLayouts io) {
  require_nchw("conv2d_forward", io.in), require_nchw("conv2d_forward", io.out);
  PT_CHECK(!xv.bf16(), "conv2d_forward: the CUDA backend takes an f32 x");
  const float* x = xv.data;
  if (n == 0) return;
  if (prec == Precision::bf16) {
    conv2d_forward_bf16(g, n, x, w, b, y);
    return;
  }
  ConvPlan& p = conv_plan(g, n, false);
  const float one = 1.0f, zero = 0.0f;
  void* ws = p.fwd_ws ? dnn_workspace(p.fwd_ws) : nullptr;
  PT_CUDNN_CHECK(cudnnConvolutionForward(dnn_, &one, p.x, x, p.w, w, p.fwd, p.fwd_algo, ws, p.fwd_ws, &zero, p.y, y));
  if (b) PT_CUDNN_CHECK(cudnnAddTensor(dnn_, &one, p.bias, b, &one, p.y32, y));
}

// dx overwritten (beta 0), dw and db accumulate (beta 1), as the interface says.
void CudaBackend::conv2d_backward(const WindowGeom& g, int64_t n, CView xv, const float* w, CView dyv, float* dx,
                                  float* dw, float* db, Precision prec, ConvLayouts io) {
  require_nchw("conv2d_backward", io.in), require_nchw("conv2d_backward", io.out);
  PT_CHECK(!xv.bf16() && !dyv.bf16(), "conv2d_backward: the CUDA backend takes an f32 x and dy");
  const float* x = xv.data;
  const float* dy = dyv.data;
  if (n == 0) return;
  if (prec == Precision::bf16) {
    conv2d_backward_bf16(g, n, x, w, dy, dx, dw, db);
    return;
  }
  ConvPlan& p = conv_plan(g, n, false);
  const float one = 1.0f, zero = 0.0f;
  if (db) PT_CUDNN_CHECK(cudnnConvolutionBackwardBias(dnn_, &one, p.y, dy, &one, p.bias, db));
  void* ws = nullptr;
  if (dw) {
    ws = p.filter_ws ? dnn_workspace(p.filter_ws) : nullptr;
    PT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dnn_, &one, p.x, x, p.y, dy, p.bwd_filter, p.filter_algo, ws,
                                                  p.filter_ws, &one, p.w, dw));
  }
  if (dx) {
    ws = p.data_ws ? dnn_workspace(p.data_ws) : nullptr;
    PT_CUDNN_CHECK(cudnnConvolutionBackwardData(dnn_, &one, p.w, w, p.y, dy, p.bwd_data, p.data_algo, ws, p.data_ws,
                                                &zero, p.x, dx));
  }
}

void CudaBackend::avgpool_forward(const WindowGeom& g, int64_t n, const float* x, float* y) {
  if (n == 0) return;
  PoolPlan& p = pool_plan(g, n);
  const float one = 1.0f, zero = 0.0f;
  PT_CUDNN_CHECK(cudnnPoolingForward(dnn_, p.pool, &one, p.x, x, &zero, p.y, y));
}

void CudaBackend::avgpool_backward(const WindowGeom& g, int64_t n, const float* x, const float* y, const float* dy,
                                   float* dx) {
  if (n == 0) return;
  PoolPlan& p = pool_plan(g, n);
  const float one = 1.0f, zero = 0.0f;
  PT_CUDNN_CHECK(cudnnPoolingBackward(dnn_, p.pool, &one, p.y, y, p.y, dy, p.x, x, &zero, p.x, dx));
}

}  // namespace pt::cuda

namespace pt::cuda {

// ---- batch normalisation ----------------------------------------------------------------

namespace {
// cuDNN rejects an epsilon below CUDNN_BN_MIN_EPSILON (1e-5); the deck's 1e-5 arrives as the
// float 9.99999975e-6, so it is raised to the minimum (a change of 2.5e-13).
double bn_eps(float eps) { return std::max(static_cast<double>(eps), CUDNN_BN_MIN_EPSILON); }
}  // namespace

BnPlan& CudaBackend::bn_plan(int64_t n, int64_t C, int64_t HW) {
  const GeomKey key{{n, C, HW, 0, 0, 0, 0, 0, 2}};
  auto it = bn_plans_.find(key);
  if (it != bn_plans_.end()) return *it->second;
  auto* p = new BnPlan;
  bn_plans_[key] = p;
  p->x = nchw(n, C, HW, 1);
  PT_CUDNN_CHECK(cudnnCreateTensorDescriptor(&p->bn));
  PT_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(p->bn, p->x, CUDNN_BATCHNORM_SPATIAL));
  return *p;
}

float* CudaBackend::bn_scratch(size_t n) {
  if (n > bn_scratch_size_) {
    if (bn_scratch_) PT_CU_CHECK(cudaFree(bn_scratch_));  // waits for kernels that used the old one
    bn_scratch_ = nullptr;
    bn_scratch_size_ = 0;
    PT_CU_CHECK(cudaMalloc(&bn_scratch_, n * sizeof(float)));
    bn_scratch_size_ = n;
  }
  return bn_scratch_;
}

void CudaBackend::batchnorm_forward_training(int64_t n, int64_t C, int64_t HW, float eps, float momentum,
                                             const float* x, const float* gamma, const float* beta, float* y,
                                             float* save_mean, float* save_invstd, float* running_mean,
                                             float* running_var, ImageLayout layout) {
  require_nchw("batchnorm_forward_training", layout);
  if (n == 0) return;
  BnPlan& p = bn_plan(n, C, HW);
  const float one = 1.0f, zero = 0.0f;
  // cuDNN's running variance uses the unbiased batch variance, as PyTorch
  PT_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(dnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, p.x, x, p.x, y, p.bn,
                                                        gamma, beta, static_cast<double>(momentum), running_mean,
                                                        running_var, bn_eps(eps), save_mean, save_invstd));
}

void CudaBackend::batchnorm_forward_inference(int64_t n, int64_t C, int64_t HW, float eps, const float* x,
                                              const float* gamma, const float* beta, const float* running_mean,
                                              const float* running_var, float* y, ImageLayout layout) {
  require_nchw("batchnorm_forward_inference", layout);
  if (n == 0) return;
  BnPlan& p = bn_plan(n, C, HW);
  const float one = 1.0f, zero = 0.0f;
  PT_CUDNN_CHECK(cudnnBatchNormalizationForwardInference(dnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, p.x, x, p.x, y, p.bn,
                                                         gamma, beta, running_mean, running_var,
                                                         bn_eps(eps)));
}

// One cuDNN call computes dx, dgamma and dbeta together: a half that does not want some of
// them gets them in scratch, so each half is bitwise the full call.
void CudaBackend::batchnorm_backward(int64_t n, int64_t C, int64_t HW, float eps, const float* x, const float* gamma,
                                     const float* save_mean, const float* save_invstd, const float* dy, View dxv,
                                     float* dgamma, float* dbeta, ImageLayout layout) {
  require_nchw("batchnorm_backward", layout);
  PT_CHECK(!dxv.bf16(), "batchnorm_backward: the CUDA backend writes an f32 dx");
  float* dx = dxv.data;
  if (n == 0) return;
  BnPlan& p = bn_plan(n, C, HW);
  const float one = 1.0f, zero = 0.0f;
  float* scratch = (!dx || !dgamma) ? bn_scratch(static_cast<size_t>(dx ? 2 * C : n * C * HW)) : nullptr;
  float* gx = dx ? dx : scratch;
  float* gg = dgamma ? dgamma : scratch;
  float* gb = dgamma ? dbeta : scratch + C;
  const float& param_beta = dgamma ? one : zero;  // accumulate into the caller's, overwrite scratch
  PT_CUDNN_CHECK(cudnnBatchNormalizationBackward(dnn_, CUDNN_BATCHNORM_SPATIAL, &one, &zero, &one, &param_beta, p.x, x,
                                                 p.x, dy, p.x, gx, p.bn, gamma, gg, gb, bn_eps(eps),
                                                 save_mean, save_invstd));
}

}  // namespace pt::cuda

namespace pt::cuda {

// ---- bf16 convolutions (products called with Precision::bf16; docs/PRECISION.md) -----------------
// x, w and dy are rounded to bf16 (to_bf16: the host's rounding) and convolved by cuDNN in its
// PSEUDO_BFLOAT16 configuration (bf16 tensors, fp32 compute, tensor cores). cuDNN's legacy API
// writes the output in the inputs' type, so y, dx and each call's dw are rounded once to bf16
// and widened into the fp32 buffers (dw added); the bias is added to the fp32 y, and db sums
// the bf16-rounded dy in fp32 (cuDNN's fp32 bias gradient), as the host does.

void CudaBackend::conv2d_forward_bf16(const WindowGeom& g, int64_t n, const float* x, const float* w,
                                      const float* b, float* y) {
  ConvPlan& p = conv_plan(g, n, true);
  const size_t ys = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
  const uint16_t* xb = to_bf16(0, x, static_cast<size_t>(n * g.c_in * g.h_in * g.w_in));
  const uint16_t* wb = to_bf16(1, w, static_cast<size_t>(g.c_out * g.c_in * g.kernel * g.kernel));
  auto* yb = static_cast<uint16_t*>(bf16_scratch(3, ys * sizeof(uint16_t)));
  const float one = 1.0f, zero = 0.0f;
  void* ws = p.fwd_ws ? dnn_workspace(p.fwd_ws) : nullptr;
  PT_CUDNN_CHECK(cudnnConvolutionForward(dnn_, &one, p.x, xb, p.w, wb, p.fwd, p.fwd_algo, ws, p.fwd_ws, &zero, p.y, yb));
  from_bf16(yb, ys, y, false);
  if (b) PT_CUDNN_CHECK(cudnnAddTensor(dnn_, &one, p.bias, b, &one, p.y32, y));
}

void CudaBackend::conv2d_backward_bf16(const WindowGeom& g, int64_t n, const float* x, const float* w,
                                       const float* dy, float* dx, float* dw, float* db) {
  ConvPlan& p = conv_plan(g, n, true);
  const size_t xs = static_cast<size_t>(n * g.c_in * g.h_in * g.w_in), ys = static_cast<size_t>(n * g.c_out * g.h_out * g.w_out);
  const size_t wsz = static_cast<size_t>(g.c_out * g.c_in * g.kernel * g.kernel);
  const uint16_t* dyb = to_bf16(2, dy, ys);
  const float one = 1.0f, zero = 0.0f;
  if (db) {  // fp32 bias gradient of the rounded dy
    float* dyr = static_cast<float*>(bf16_scratch(3, ys * sizeof(float)));
    from_bf16(dyb, ys, dyr, false);
    PT_CUDNN_CHECK(cudnnConvolutionBackwardBias(dnn_, &one, p.y32, dyr, &one, p.bias, db));
  }
  if (dw) {
    const uint16_t* xb = to_bf16(0, x, xs);
    auto* dwb = static_cast<uint16_t*>(bf16_scratch(3, wsz * sizeof(uint16_t)));
    void* ws = p.filter_ws ? dnn_workspace(p.filter_ws) : nullptr;
    PT_CUDNN_CHECK(cudnnConvolutionBackwardFilter(dnn_, &one, p.x, xb, p.y, dyb, p.bwd_filter, p.filter_algo, ws,
                                                  p.filter_ws, &zero, p.w, dwb));
    from_bf16(dwb, wsz, dw, true);
  }
  if (dx) {
    const uint16_t* wb = to_bf16(1, w, wsz);
    auto* dxb = static_cast<uint16_t*>(bf16_scratch(3, xs * sizeof(uint16_t)));
    void* ws = p.data_ws ? dnn_workspace(p.data_ws) : nullptr;
    PT_CUDNN_CHECK(cudnnConvolutionBackwardData(dnn_, &one, p.w, wb, p.y, dyb, p.bwd_data, p.data_algo, ws, p.data_ws,
                                                &zero, p.x, dxb));
    from_bf16(dxb, xs, dx, false);
  }
}

}  // namespace pt::cuda
