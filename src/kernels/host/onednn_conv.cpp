// oneDNN convolution behind the host backend's conv2d_forward / conv2d_backward: forward
// (bias fused), backward data, backward weights (bias gradient fused), fp32 and bf16.
// Contract: the caller's tensors are fp32 (weights OIHW), except that x and dy may be bf16
// views already in the primitive's layout (then read in place, no copy: Port's bf16 input),
// the activations NCHW or in the layout the caller names (ConvLayouts: nChw16c or NHWC; where conv_layout reported it for
// the shape, every pass's primitive takes it and no move is made). Each primitive is created
// with format_tag::any, so oneDNN picks its preferred (blocked) layouts; the reorders from and to
// the caller's layout are built with it and cached in the plan, with the memory they need.
// bf16: x, w and dy go to bf16 in the same pass that brings them into the primitive's
// layout: blocked_layout.cpp's kernel where that is nChw16c or NHWC with C % 16 == 0 (PyTorch's
// rounding exactly), otherwise oneDNN's reorder (rounding to nearest even as PyTorch, NaN
// 0x7FC0; a subnormal input, |x| < 1.2e-38, becomes a signed zero where PyTorch keeps a bf16
// subnormal); where the primitive takes the plain layout, to_bf16 (PyTorch's rounding
// exactly) rounds into plan-owned NCHW copies. fp32 inputs go into nChw16c or NHWC (C % 16
// == 0) by blocked_layout.cpp's exact copy, else by a reorder. Outputs (y, dx, dw, db) are
// fp32 (y and dx come back from nChw16c or NHWC by the exact copy, else by a reorder). An
// activation the caller keeps in the primitive's layout is used in place (fp32) or rounded to
// bf16 by to_bf16 into the plan's copy in one flat pass (the same bits as the NCHW path's
// moves); one in another channel-minor layout than the primitive's goes through a oneDNN
// reorder (correct, slow, and flushing bf16 subnormals: conv_layout's callers avoid it). dx is
// overwritten; dw and db are computed into plan-owned fp32 buffers and then added to the
// caller's (dw += ..., db += ...), in index order. Backward data and backward weights are independent primitives, so a call for
// dx alone or for dw/db alone is bitwise the same as the call that asks for all three.
// Where oneDNN has no bf16 kernels (onednn_bf16_native) a bf16 pass runs the fp32 plan on the
// inputs' bf16 values, widened into port-owned fp32 copies in the caller's layout (fed_as).
#include <malloc.h>

#include <algorithm>
#include <map>
#include <unordered_map>

#include "onednn_impl.hpp"
#include "vec_math.hpp"

namespace pt::host {
namespace {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using dims = dnnl::memory::dims;
using md = dnnl::memory::desc;

std::string conv_str(Precision p, const WindowGeom& g, int64_t n) {
  return PT_MSG("convolution " << precision_name(p) << " n " << n << " in " << g.c_in << "x" << g.h_in << "x" << g.w_in
                               << " out " << g.c_out << "x" << g.h_out << "x" << g.w_out << " kernel " << g.kernel
                               << " stride " << g.stride << " padding " << g.padding);
}

md src_md(const WindowGeom& g, int64_t n, dt t, tag f) { return md({n, g.c_in, g.h_in, g.w_in}, t, f); }
md dst_md(const WindowGeom& g, int64_t n, dt t, tag f) { return md({n, g.c_out, g.h_out, g.w_out}, t, f); }
tag act_tag(ImageLayout l) {
  return l == ImageLayout::nchw ? tag::nchw : l == ImageLayout::nchw16c ? tag::nChw16c : tag::nhwc;
}
md wei_md(const WindowGeom& g, dt t, tag f) { return md({g.c_out, g.c_in, g.kernel, g.kernel}, t, f); }
md bias_md(const WindowGeom& g) { return md({g.c_out}, dt::f32, tag::x); }

dims strides(const WindowGeom& g) { return {g.stride, g.stride}; }
dims pads(const WindowGeom& g) { return {g.padding, g.padding}; }

// The same layout in fp32: the caller's tensor behind a bf16 input.
md as_f32(const md& m) {
  dnnl_memory_desc_t d = m.data;
  d.data_type = dnnl_f32;
  return md(d);
}

// a and b address the same elements at the same offsets: equal, or both of 16 channels in
// nChw16c and NHWC (the same bytes for C = 16).
bool same_bytes(const md& a, const md& b) {
  if (a == b) return true;
  const dims d = a.dims();
  if (d.size() != 4 || d[1] != 16 || b.dims() != d || a.data_type() != b.data_type()) return false;
  auto c16 = [&](const md& m) { return m == md(d, m.data_type(), tag::nChw16c) || m == md(d, m.data_type(), tag::nhwc); };
  return c16(a) && c16(b);
}

// How a port meets the caller: an input (a bf16 one rounded on the way in), an output
// written in place, or an output accumulated into the caller's tensor through port.acc.
enum class Role { input, output, accumulate };

// N C / 16 where `user` is an NCHW fp32 tensor with C % 16 == 0 and `prim` the same tensor in
// nChw16c or NHWC, bf16 or fp32 for an input and fp32 for an output (the moves
// blocked_layout.cpp makes), with the step between positions there (16 or C); else 0 (a
// oneDNN reorder).
int64_t channels16_groups(const md& user, const md& prim, Role role, int64_t* step) {
  const dims d = user.dims();
  if (d.size() != 4 || d[1] % 16 != 0 || user != md(d, dt::f32, tag::nchw) || role == Role::accumulate) return 0;
  const dt t = prim.data_type();
  if (t != dt::f32 && (t != dt::bf16 || role != Role::input)) return 0;
  if (prim == md(d, t, tag::nChw16c)) *step = 16;
  else if (prim == md(d, t, tag::nhwc)) *step = d[1];
  else return 0;
  return d[0] * d[1] / 16;
}

// The caller's memory (user_md) and the primitive's (prim_md), with the reorder between them
// when they differ: user -> primitive for an input, primitive -> user for an output. A bf16
// input's reorder reads the caller's fp32 tensor and rounds it in the same pass; where the
// primitive takes the caller's layout there is no reorder: feed reads a bf16 view in place
// and rounds an fp32 tensor into port.bf16 (allocated then).
void make_port(Port& port, const dnnl::engine& eng, const md& user_md, const md& prim_md, Role role) {
  md user = user_md;
  void* handle = DNNL_MEMORY_NONE;
  const bool bf16_input = role == Role::input && user_md.data_type() == dt::bf16;
  if (bf16_input && !same_bytes(prim_md, user_md)) {
    user = as_f32(user_md);
  } else if (bf16_input) {
    port.bf16_as_given = true;  // the handle is set per call (feed)
  } else if (role == Role::accumulate) {
    port.acc.resize(user_md.get_size() / sizeof(float));
    handle = port.acc.data();
  }
  if (same_bytes(prim_md, user)) user = prim_md;
  port.user = dnnl::memory(user, eng, handle);
  if (prim_md == user) {
    port.prim = port.user;
    return;
  }
  port.prim = dnnl::memory(prim_md, eng);
  if ((port.groups16 = channels16_groups(user, prim_md, role, &port.step)) > 0) {
    port.hw = user.dims()[2] * user.dims()[3];
    port.rounds = prim_md.data_type() == dt::bf16;
    return;
  }
  port.reorder = role == Role::input ? dnnl::reorder(port.user, port.prim) : dnnl::reorder(port.prim, port.user);
}

// Point an input at the caller's tensor (rounding it to bf16 first when the port is bf16)
// and bring it into the primitive's layout.
void feed(Port& port, dnnl::stream& s, CView xv) {
  const float* x = xv.data;
  if (xv.bf16()) {  // the caller's bf16 copy in the primitive's layout: read in place
    PT_CHECK(port.bf16_as_given, "convolution: a bf16 input must lie in the layout the primitive takes (conv_layout)");
    port.user.set_data_handle(const_cast<float*>(x));
    return;
  }
  if (port.bf16_as_given) {
    if (port.bf16.empty()) port.bf16.resize(port.user.get_desc().get_size() / sizeof(uint16_t));
    to_bf16(port.bf16.size(), x, port.bf16.data());
    port.user.set_data_handle(port.bf16.data());
  } else {
    port.user.set_data_handle(const_cast<float*>(x));
  }
  void* to = port.groups16 > 0 ? port.prim.get_data_handle() : nullptr;
  if (to && port.rounds)
    nchw_to_c16_bf16(port.groups16, port.hw, port.step, x, static_cast<uint16_t*>(to));
  else if (to)
    nchw_to_c16(port.groups16, port.hw, port.step, x, static_cast<float*>(to));
  else if (port.reorders())
    port.reorder.execute(s, port.user, port.prim);
}

// The input as the primitive reads it under precision p: as given, or where the primitives
// compute a widened bf16 in fp32 (Impl::widen_bf16), the fp32 values of its bf16 rounding (a
// bf16 view widened exactly) in port.wide, in the caller's layout.
CView fed_as(const OneDnn::Impl& d, Precision p, Port& port, CView x) {
  if (d.kernels(p) == p) return x;
  const size_t n = port.user.get_desc().get_size() / sizeof(float);
  if (port.wide.size() < n) port.wide.resize(n);
  if (x.bf16())
    widen_bf16_span(n, x.data, port.wide.data());
  else
    bf16_span<true, false>(n, x.data, port.wide.data(), nullptr);
  return CView{port.wide.data()};
}

void drain(Port& port, dnnl::stream& s) {
  if (port.groups16 > 0)
    c16_to_nchw(port.groups16, port.hw, port.step, static_cast<const float*>(port.prim.get_data_handle()),
                static_cast<float*>(port.user.get_data_handle()));
  else if (port.reorders())
    port.reorder.execute(s, port.prim, port.user);
}

void add_into(const std::vector<float>& v, float* out) {
  const size_t n = v.size();
  const float* src = v.data();
  for (size_t i = 0; i < n; ++i) out[i] += src[i];
}

dt input_type(Precision p) { return p == Precision::bf16 ? dt::bf16 : dt::f32; }

// The forward convolution in the primitive's preferred layouts (format_tag::any), fp32 output.
dnnl::convolution_forward::desc fwd_desc(Precision p, const WindowGeom& g, int64_t n, bool bias) {
  const dt in = input_type(p);
  const md src = src_md(g, n, in, tag::any), wei = wei_md(g, in, tag::any), dst = dst_md(g, n, dt::f32, tag::any);
  const auto kind = dnnl::prop_kind::forward_training;
  const auto alg = dnnl::algorithm::convolution_direct;
  if (bias) return dnnl::convolution_forward::desc(kind, alg, src, wei, bias_md(g), dst, strides(g), pads(g), pads(g));
  return dnnl::convolution_forward::desc(kind, alg, src, wei, dst, strides(g), pads(g), pads(g));
}

dnnl::convolution_backward_data::desc data_desc(Precision p, const WindowGeom& g, int64_t n) {
  const dt in = input_type(p);
  return dnnl::convolution_backward_data::desc(dnnl::algorithm::convolution_direct, src_md(g, n, dt::f32, tag::any),
                                               wei_md(g, in, tag::any), dst_md(g, n, in, tag::any), strides(g), pads(g),
                                               pads(g));
}

dnnl::convolution_backward_weights::desc weights_desc(Precision p, const WindowGeom& g, int64_t n, bool bias) {
  const dt in = input_type(p);
  const md src = src_md(g, n, in, tag::any), wei = wei_md(g, dt::f32, tag::any), dst = dst_md(g, n, in, tag::any);
  const auto alg = dnnl::algorithm::convolution_direct;
  if (bias) return dnnl::convolution_backward_weights::desc(alg, src, wei, bias_md(g), dst, strides(g), pads(g), pads(g));
  return dnnl::convolution_backward_weights::desc(alg, src, wei, dst, strides(g), pads(g), pads(g));
}

// The bytes a port holds once used: a bf16 input the primitive takes in the caller's layout
// gets its rounded copy where the caller passes fp32 (the weights, NCHW activations; in
// another layout the activations arrive as bf16 views, the residual block's copies, and
// feed reads them in place), an accumulated output its accumulator, and a primitive layout
// other than the caller's its own memory.
int64_t port_bytes(const md& user_md, const md& prim_md, Role role) {
  const bool bf16_input = role == Role::input && user_md.data_type() == dt::bf16;
  const md user = bf16_input && !same_bytes(prim_md, user_md) ? as_f32(user_md) : user_md;
  const bool plain = user_md == md(user_md.dims(), user_md.data_type(), tag::abcd);
  int64_t b = 0;
  if (bf16_input && same_bytes(prim_md, user_md) && plain) b += static_cast<int64_t>(user_md.get_size());
  if (role == Role::accumulate) b += static_cast<int64_t>(user_md.get_size());
  if (!same_bytes(prim_md, user)) b += static_cast<int64_t>(prim_md.get_size());
  return b;
}

int64_t port_bytes(const Port& port) {
  int64_t b = static_cast<int64_t>(port.bf16.size() * sizeof(uint16_t) + (port.acc.size() + port.wide.size()) * sizeof(float));
  if (port.reorders()) b += static_cast<int64_t>(port.prim.get_desc().get_size());
  return b;
}

}  // namespace

ConvPlan& OneDnn::Impl::conv_plan(Precision p, const WindowGeom& g, int64_t n, ConvLayouts io) {
  const ConvKey key{static_cast<int64_t>(p), n, g.c_in, g.h_in, g.w_in, g.c_out, g.h_out, g.w_out, g.kernel, g.stride,
                    g.padding, static_cast<int64_t>(io.in), static_cast<int64_t>(io.out)};
  auto it = convs.find(key);
  if (it != convs.end()) return *it->second;
  auto plan = std::make_unique<ConvPlan>();
  plan->io = io;
  try {
    plan->hint = dnnl::convolution_forward::primitive_desc(fwd_desc(p, g, n, false), eng);
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (forward hint)", e);
  }
  return *(convs[key] = std::move(plan));
}

ConvOp& OneDnn::Impl::conv_fwd(Precision p, ConvPlan& plan, const WindowGeom& g, int64_t n, bool bias) {
  ConvOp& op = plan.fwd[bias ? 1 : 0];
  if (op.ready) return op;
  try {
    const dt in = input_type(p);
    const dnnl::convolution_forward::primitive_desc pd(fwd_desc(p, g, n, bias), eng);
    make_port(op.src, eng, src_md(g, n, in, act_tag(plan.io.in)), pd.src_desc(), Role::input);
    make_port(op.wei, eng, wei_md(g, in, tag::oihw), pd.weights_desc(), Role::input);
    make_port(op.dst, eng, dst_md(g, n, dt::f32, act_tag(plan.io.out)), pd.dst_desc(), Role::output);
    if (bias) op.bias = dnnl::memory(bias_md(g), eng, DNNL_MEMORY_NONE);
    op.prim = dnnl::convolution_forward(pd);
    op.impl = pd.impl_info_str();
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (forward)", e);
  }
  op.ready = true;
  return op;
}

ConvOp& OneDnn::Impl::conv_data(Precision p, ConvPlan& plan, const WindowGeom& g, int64_t n) {
  ConvOp& op = plan.data;
  if (op.ready) return op;
  try {
    const dt in = input_type(p);
    const dnnl::convolution_backward_data::primitive_desc pd(data_desc(p, g, n), eng, plan.hint);
    make_port(op.src, eng, src_md(g, n, dt::f32, act_tag(plan.io.in)), pd.diff_src_desc(), Role::output);
    make_port(op.wei, eng, wei_md(g, in, tag::oihw), pd.weights_desc(), Role::input);
    make_port(op.dst, eng, dst_md(g, n, in, act_tag(plan.io.out)), pd.diff_dst_desc(), Role::input);
    op.prim = dnnl::convolution_backward_data(pd);
    op.impl = pd.impl_info_str();
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (backward data)", e);
  }
  op.ready = true;
  return op;
}

ConvOp& OneDnn::Impl::conv_weights(Precision p, ConvPlan& plan, const WindowGeom& g, int64_t n, bool bias) {
  ConvOp& op = plan.weights[bias ? 1 : 0];
  if (op.ready) return op;
  try {
    const dt in = input_type(p);
    const dnnl::convolution_backward_weights::primitive_desc pd(weights_desc(p, g, n, bias), eng, plan.hint);
    make_port(op.src, eng, src_md(g, n, in, act_tag(plan.io.in)), pd.src_desc(), Role::input);
    make_port(op.wei, eng, wei_md(g, dt::f32, tag::oihw), pd.diff_weights_desc(), Role::accumulate);
    make_port(op.dst, eng, dst_md(g, n, in, act_tag(plan.io.out)), pd.diff_dst_desc(), Role::input);
    if (bias) {
      op.bias_acc.resize(static_cast<size_t>(g.c_out));
      op.bias = dnnl::memory(bias_md(g), eng, op.bias_acc.data());
    }
    op.prim = dnnl::convolution_backward_weights(pd);
    op.impl = pd.impl_info_str();
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (backward weights)", e);
  }
  op.ready = true;
  return op;
}

void OneDnn::conv_forward(Precision p, const WindowGeom& g, int64_t n, CView x, const float* w, const float* b,
                          float* y, ConvLayouts io) {
  Impl& d = *impl_;
  const Precision k = d.kernels(p);
  ConvOp& op = d.conv_fwd(k, d.conv_plan(k, g, n, io), g, n, b != nullptr);
  Lap lap;
  try {
    feed(op.src, d.strm, fed_as(d, p, op.src, x));
    feed(op.wei, d.strm, fed_as(d, p, op.wei, w));
    clock_.prepare_s += lap();
    op.dst.user.set_data_handle(y);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, op.src.prim}, {DNNL_ARG_WEIGHTS, op.wei.prim}, {DNNL_ARG_DST, op.dst.prim}};
    if (b) {
      op.bias.set_data_handle(const_cast<float*>(b));
      args[DNNL_ARG_BIAS] = op.bias;
    }
    op.prim.execute(d.strm, args);
    d.strm.wait();
    clock_.execute_s += lap();
    drain(op.dst, d.strm);
    d.strm.wait();
    clock_.prepare_s += lap();
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (forward)", e);
  }
}

void OneDnn::conv_backward_data(Precision p, const WindowGeom& g, int64_t n, const float* w, CView dy,
                                float* dx, ConvLayouts io) {
  Impl& d = *impl_;
  const Precision k = d.kernels(p);
  ConvOp& op = d.conv_data(k, d.conv_plan(k, g, n, io), g, n);
  Lap lap;
  try {
    feed(op.wei, d.strm, fed_as(d, p, op.wei, w));
    feed(op.dst, d.strm, fed_as(d, p, op.dst, dy));
    op.src.user.set_data_handle(dx);
    clock_.prepare_s += lap();
    op.prim.execute(d.strm, {{DNNL_ARG_DIFF_DST, op.dst.prim}, {DNNL_ARG_WEIGHTS, op.wei.prim},
                             {DNNL_ARG_DIFF_SRC, op.src.prim}});
    d.strm.wait();
    clock_.execute_s += lap();
    drain(op.src, d.strm);
    d.strm.wait();
    clock_.prepare_s += lap();
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (backward data)", e);
  }
}

namespace {

// The weights pass. `fed`, when not null, is the data pass's port for dy, holding it in this
// primitive's layout already: dy is then not converted again.
void weights_pass(OneDnn::Impl& d, OneDnn::Clock& clock, Precision p, const WindowGeom& g, int64_t n, ConvLayouts io,
                  CView x, CView dy, const Port* fed, float* dw, float* db) {
  const Precision k = d.kernels(p);
  ConvOp& op = d.conv_weights(k, d.conv_plan(k, g, n, io), g, n, db != nullptr);
  Lap lap;
  try {
    feed(op.src, d.strm, fed_as(d, p, op.src, x));
    if (!fed) feed(op.dst, d.strm, fed_as(d, p, op.dst, dy));
    clock.prepare_s += lap();
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, op.src.prim},
                                               {DNNL_ARG_DIFF_DST, fed ? fed->prim : op.dst.prim},
                                               {DNNL_ARG_DIFF_WEIGHTS, op.wei.prim}};
    if (db) args[DNNL_ARG_DIFF_BIAS] = op.bias;
    op.prim.execute(d.strm, args);
    d.strm.wait();
    clock.execute_s += lap();
    drain(op.wei, d.strm);
    d.strm.wait();
    clock.prepare_s += lap();
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (backward weights)", e);
  }
  if (dw) add_into(op.wei.acc, dw);
  if (db) add_into(op.bias_acc, db);
}

}  // namespace

void OneDnn::conv_backward_weights(Precision p, const WindowGeom& g, int64_t n, CView x, CView dy,
                                   float* dw, float* db, ConvLayouts io) {
  weights_pass(*impl_, clock_, p, g, n, io, x, dy, nullptr, dw, db);
}

void OneDnn::conv_backward(Precision p, const WindowGeom& g, int64_t n, CView x, const float* w,
                           CView dy, float* dx, float* dw, float* db, ConvLayouts io) {
  conv_backward_data(p, g, n, w, dy, dx, io);
  Impl& d = *impl_;
  const Precision k = d.kernels(p);
  ConvPlan& plan = d.conv_plan(k, g, n, io);
  const Port& fed = d.conv_data(k, plan, g, n).dst;
  // (widened bf16: each pass widens dy into its own port, as a split backward does, so the
  // plans keep what conv_pass_bytes counts whichever way the backward is called)
  const bool same = k == p && d.conv_weights(k, plan, g, n, db != nullptr).dst.prim.get_desc() == fed.prim.get_desc();
  weights_pass(d, clock_, p, g, n, io, x, dy, same ? &fed : nullptr, dw, db);
}

// The layout every pass's primitive (format_tag::any) takes x, y, dx and dy in, where that is
// one of nChw16c and NHWC for all of them (else nchw). For C = 16 the two are the same bytes,
// so a 16-channel tensor agrees with either; where both fit every tensor, nChw16c is named.
// Computed once per shape (the plan keeps it).
ImageLayout OneDnn::conv_layout(Precision given, const WindowGeom& g, int64_t n) {
  if (g.c_in % 16 != 0 || g.c_out % 16 != 0) return ImageLayout::nchw;
  Impl& d = *impl_;
  const Precision p = d.kernels(given);
  ConvPlan& plan = d.conv_plan(p, g, n, {});
  if (plan.layout >= 0) return static_cast<ImageLayout>(plan.layout);
  try {
    const dnnl::convolution_backward_data::primitive_desc data(data_desc(p, g, n), d.eng, plan.hint);
    const dnnl::convolution_backward_weights::primitive_desc wgt(weights_desc(p, g, n, false), d.eng, plan.hint);
    const md xs[] = {as_f32(plan.hint.src_desc()), data.diff_src_desc(), as_f32(wgt.src_desc())};
    const md ys[] = {plan.hint.dst_desc(), as_f32(data.diff_dst_desc()), as_f32(wgt.diff_dst_desc())};
    plan.layout = static_cast<int>(ImageLayout::nchw);
    for (ImageLayout l : {ImageLayout::nchw16c, ImageLayout::nhwc}) {
      const md x = src_md(g, n, dt::f32, act_tag(l)), y = dst_md(g, n, dt::f32, act_tag(l));
      bool all = true;
      for (int i = 0; i < 3; ++i) all = all && same_bytes(xs[i], x) && same_bytes(ys[i], y);
      if (all) {
        plan.layout = static_cast<int>(l);
        break;
      }
    }
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (layout)", e);
  }
  return static_cast<ImageLayout>(plan.layout);
}

namespace {

int64_t heap_in_use() {
  const struct mallinfo2 m = mallinfo2();
  return static_cast<int64_t>(m.uordblks + m.hblkhd);
}

// The heap a plan keeps for one pass while it lives: the pass's primitive (its kernels' tables
// and buffers, and in oneDNN's default scratchpad mode its own scratchpad: several MB for
// some AMX convolutions) and what `keep` makes (the forward's: the plan's hint descriptor),
// measured once per process, shape and pass (`key`) by building them with oneDNN's primitive
// cache off, so that they are built and freed here whatever was built before: malloc's bytes
// in use (glibc mallinfo2) with them alive, less before, rounded up to 64 KiB (two
// measurements differ by a few KiB: malloc's bookkeeping, oneDNN's first-use state). The
// primitive's generated code (mapped, not malloc'd) is not counted.
template <class Prim, class PD, class Keep>
int64_t primitive_heap(const ConvKey& key, const PD& pd, Keep keep) {
  static std::map<ConvKey, int64_t> held;  // one host thread per process
  auto it = held.find(key);
  if (it != held.end()) return it->second;
  struct CacheOff {
    int capacity = dnnl::get_primitive_cache_capacity();
    CacheOff() { dnnl::set_primitive_cache_capacity(0); }
    ~CacheOff() { dnnl::set_primitive_cache_capacity(capacity); }
  } off;
  const int64_t before = heap_in_use();
  int64_t b = 0;
  {
    [[maybe_unused]] const auto kept = keep();
    const Prim prim(pd);
    b = std::max<int64_t>(0, heap_in_use() - before);
  }
  constexpr int64_t grain = 64 << 10;
  return held[key] = (b + grain - 1) / grain * grain;
}

}  // namespace

int64_t OneDnn::conv_pass_bytes(Precision given, const WindowGeom& g, int64_t n, ConvPass pass, bool bias,
                                int64_t* scratchpad, ConvLayouts io, int64_t* held) const {
  const dnnl::engine& eng = impl_->eng;
  const Precision p = impl_->kernels(given);
  const int64_t x_b = 4 * n * g.c_in * g.h_in * g.w_in, w_b = 4 * g.c_out * g.c_in * g.kernel * g.kernel,
                y_b = 4 * n * g.c_out * g.h_out * g.w_out;
  const bool wide = p != given;  // the inputs' widened copies (fed_as), one per pass and input
  const dt in = input_type(p);
  const ConvKey key{static_cast<int64_t>(p), n, g.c_in, g.h_in, g.w_in, g.c_out, g.h_out, g.w_out, g.kernel, g.stride,
                    g.padding, static_cast<int64_t>(pass), bias};
  try {
    const dnnl::convolution_forward::primitive_desc hint(fwd_desc(p, g, n, false), eng);
    if (pass == ConvPass::forward) {
      const dnnl::convolution_forward::primitive_desc pd(fwd_desc(p, g, n, bias), eng);
      *scratchpad = static_cast<int64_t>(pd.scratchpad_desc().get_size());
      if (held) *held = primitive_heap<dnnl::convolution_forward>(
                     key, pd, [&] { return dnnl::convolution_forward::primitive_desc(fwd_desc(p, g, n, false), eng); });
      return port_bytes(src_md(g, n, in, act_tag(io.in)), pd.src_desc(), Role::input) +
             port_bytes(wei_md(g, in, tag::oihw), pd.weights_desc(), Role::input) +
             port_bytes(dst_md(g, n, dt::f32, act_tag(io.out)), pd.dst_desc(), Role::output) + (wide ? x_b + w_b : 0);
    }
    if (pass == ConvPass::backward_data) {
      const dnnl::convolution_backward_data::primitive_desc pd(data_desc(p, g, n), eng, hint);
      *scratchpad = static_cast<int64_t>(pd.scratchpad_desc().get_size());
      if (held) *held = primitive_heap<dnnl::convolution_backward_data>(key, pd, [] { return 0; });
      return port_bytes(src_md(g, n, dt::f32, act_tag(io.in)), pd.diff_src_desc(), Role::output) +
             port_bytes(wei_md(g, in, tag::oihw), pd.weights_desc(), Role::input) +
             port_bytes(dst_md(g, n, in, act_tag(io.out)), pd.diff_dst_desc(), Role::input) + (wide ? w_b + y_b : 0);
    }
    const dnnl::convolution_backward_weights::primitive_desc pd(weights_desc(p, g, n, bias), eng, hint);
    *scratchpad = static_cast<int64_t>(pd.scratchpad_desc().get_size());
    if (held) *held = primitive_heap<dnnl::convolution_backward_weights>(key, pd, [] { return 0; });
    return port_bytes(src_md(g, n, in, act_tag(io.in)), pd.src_desc(), Role::input) +
           port_bytes(wei_md(g, dt::f32, tag::oihw), pd.diff_weights_desc(), Role::accumulate) +
           port_bytes(dst_md(g, n, in, act_tag(io.out)), pd.diff_dst_desc(), Role::input) + (bias ? g.c_out * 4 : 0) +
           (wide ? x_b + y_b : 0);
  } catch (const dnnl::error& e) {
    onednn_fail(conv_str(p, g, n) + " (sizes)", e);
  }
}

int64_t OneDnn::conv_plans_bytes() const {
  int64_t b = 0;
  for (const auto& [key, plan] : impl_->convs)
    for (const ConvOp* op : {&plan->fwd[0], &plan->fwd[1], &plan->data, &plan->weights[0], &plan->weights[1]})
      if (op->ready)
        b += port_bytes(op->src) + port_bytes(op->wei) + port_bytes(op->dst) + static_cast<int64_t>(op->bias_acc.size() * 4);
  return b;
}

std::string OneDnn::conv_impl(Precision given, const WindowGeom& g, int64_t n) {
  Impl& d = *impl_;
  const Precision p = d.kernels(given);
  ConvPlan& plan = d.conv_plan(p, g, n, {});
  return "fwd " + d.conv_fwd(p, plan, g, n, true).impl + ", bwd_data " + d.conv_data(p, plan, g, n).impl +
         ", bwd_weights " + d.conv_weights(p, plan, g, n, true).impl + (p != given ? " (bf16 widened to fp32)" : "");
}

}  // namespace pt::host
