// The ResNet basic block, one composite link of the chain with its residual graph inside:
// y = relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), conv1 3x3 with `stride`,
// conv2 3x3, both padding 1 and without bias; the shortcut is x itself, or a 1x1 conv
// with `stride` (no bias) and a batch norm when the channels or the stride change
// (torchvision's BasicBlock). Parameters in this order: conv1.weight, bn1.weight,
// bn1.bias, conv2.weight, bn2.weight, bn2.bias, then downsample.0.weight, downsample.1.weight,
// downsample.1.bias; state: the running mean and variance of bn1, bn2 (and the shortcut's).
// Backward = input half (every inner output gradient into `keep`) then weight half; the fused
// backward asks each convolution for its input and weight gradients in one call (the
// backend converts the output gradient once), the weight half then does the rest.
// Inside the block the activations (x's copy, the convolutions' outputs, the batch norms',
// the inner gradients) lie in the layout the backend's convolution takes (conv_layout:
// oneDNN's nChw16c or NHWC on the host), so no convolution moves its operands: the block
// moves x in and y out, dy in and dx out (four moves instead of ten or more), and the batch
// norms work in that layout (the same bits in every layout). NCHW where the backend has no
// such layout (CUDA) or the channels are not a multiple of 16. Under bf16 in the inner layout
// what only the convolutions read is bf16, written where it is made (x's move in, bn1's
// normalisation, the batch norms' input gradients): the rounding the convolutions made before.
#include <algorithm>
#include <cmath>

#include "layer_util.hpp"

namespace pt::layers {
namespace {

struct ResidualSettings : BatchNormSettings {
  int64_t channels = 0, stride = 1;
};

class ResidualBlock final : public Layer {
 public:
  ResidualBlock(const LayerSpec& s, Shape in) : ResidualBlock(s, in, s.settings_as<ResidualSettings>()) {}
  ResidualBlock(const LayerSpec& s, Shape in, const ResidualSettings& k)
      : Layer(s, in), g1_(square_window(in.c(), in.h(), in.w(), k.channels, 3, k.stride, 1)),
        g2_(square_window(k.channels, g1_.h_out, g1_.w_out, k.channels, 3, 1, 1)),
        gp_(square_window(in.c(), in.h(), in.w(), k.channels, 1, k.stride, 0)),
        proj_(k.stride != 1 || k.channels != in.c()),
        bn_{k.channels, g1_.h_out * g1_.w_out, static_cast<float>(k.eps), static_cast<float>(k.momentum)} {
    out_ = Shape::chw(k.channels, g1_.h_out, g1_.w_out);
  }

  std::vector<ParamTensor> params() const override;
  void init_params(float* host, uint64_t seed) const override;
  int64_t num_state() const override { return (proj_ ? 3 : 2) * 2 * bn_.C; }
  void init_state(float* host) const override {
    for (int i = 0; i < (proj_ ? 3 : 2); ++i) bn_.init_state(host + i * 2 * bn_.C);
  }
  std::vector<ConvUse> convolutions() const override {
    std::vector<ConvUse> c = {{g1_, false, may_keep()}, {g2_, false, may_keep()}};
    if (proj_) c.push_back({gp_, false, may_keep()});
    return c;
  }
  // conv1 out, relu(bn1) out (or, under a bf16 policy in the inner layout, its bf16 copy in
  // the same slot: the two are never both used), conv2 out, [shortcut conv out], batch
  // statistics of each bn, [x's fp32 copy in the inner layout, where the channels allow one
  // and something reads it: not a projection block's under bf16], [x's bf16 copy under bf16];
  // aux_per_sample is the larger policy's (the evaluation's aux is sized by it)
  int64_t kept_floats(bool, DType op) const override {
    const int64_t base = (proj_ ? 4 : 3) * O() + (proj_ ? 3 : 2) * 2 * bn_.C + (keeps_xl(op) ? in_.numel() : 0);
    return base + (bf16_copies(op) ? operand_floats(in_.numel(), op) : 0);
  }
  int64_t aux_per_sample() const override {
    return std::max(kept_floats(false, DType::f32), kept_floats(false, DType::bf16));
  }
  // output gradients of bn2 (= the shortcut bn's), conv2, bn1, conv1, [shortcut conv]
  int64_t split_aux_per_sample() const override { return (proj_ ? 5 : 4) * O(); }
  int64_t workspace_per_sample() const override {
    return std::max(O(), split_aux_per_sample() + O() + in_.numel());
  }
  void forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux, int64_t n) const override;
  void backward(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy, float* dx, float* dw,
                const float* aux, int64_t n) const override {
    const KeepInWork k = keep_in_work(c, split_aux_per_sample(), n);
    input_half(k.ctx, w, x, y, dy, dx, aux, k.keep, n, dw);
    weight_half(k.ctx, w, x, dw, aux, k.keep, n, {true, dx != nullptr, true});
  }
  bool splits_backward() const override { return true; }
  void backward_input(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy, float* dx,
                      float*, float* aux, int64_t n) const override {
    input_half(c, w, x, y, dy, dx, aux, aux + n * kept_floats(false, operand_dtype(c.precision)), n, nullptr);
  }
  void backward_weight(const LayerCtx& c, ParamView w, const float* x, const float*, const float*, float* dw,
                       const float* aux, int64_t n) const override {
    weight_half(c, w, x, dw, aux, aux + n * kept_floats(false, operand_dtype(c.precision)), n, {false, false, false});
  }
  double flops_forward() const override {
    const double conv = 2.0 * O() * (in_.c() * 9 + bn_.C * 9 + (proj_ ? in_.c() : 0));
    return conv + (proj_ ? 3 : 2) * 8.0 * O() + 3.0 * O();
  }
  double flops_backward() const override { return 2.0 * flops_forward(); }

 private:
  int64_t O() const { return out_.numel(); }
  int64_t w1() const { return g1_.c_out * g1_.c_in * 9; }
  int64_t w2() const { return g2_.c_out * g2_.c_in * 9; }
  // Parameter offsets: conv1, bn1, conv2, bn2, shortcut conv, shortcut bn.
  struct Offsets {
    int64_t c1, b1, c2, b2, cp, bp;
  };
  Offsets off() const {
    Offsets o;
    o.c1 = 0, o.b1 = w1(), o.c2 = o.b1 + bn_.size(), o.b2 = o.c2 + w2(), o.cp = o.b2 + bn_.size();
    o.bp = o.cp + gp_.c_out * gp_.c_in;
    return o;
  }
  struct Saved {
    float *c1, *r1, *c2, *cp, *st1, *st2, *stp, *xl, *xb, *r1b;
  };
  Saved saved(const float* aux, int64_t n, Precision p) const {
    Carve s{const_cast<float*>(aux), n};
    Saved v;
    v.c1 = s.take(O()), v.r1 = s.take(O()), v.c2 = s.take(O()), v.cp = proj_ ? s.take(O()) : nullptr;
    v.st1 = s.take(2 * bn_.C), v.st2 = s.take(2 * bn_.C), v.stp = proj_ ? s.take(2 * bn_.C) : nullptr;
    const DType op = operand_dtype(p);
    v.xl = keeps_xl(op) ? s.take(in_.numel()) : nullptr;
    v.xb = bf16_copies(op) ? s.take(operand_floats(in_.numel(), op)) : nullptr;
    v.r1b = bf16_copies(op) ? v.r1 : nullptr;
    return v;
  }
  // Whether the channels allow an inner layout other than NCHW (multiples of 16).
  bool may_keep() const { return in_.c() % 16 == 0 && bn_.C % 16 == 0; }
  // Whether x's fp32 copy in the inner layout may be read: an fp32 policy's convolutions and
  // shortcut, or under bf16 an identity shortcut adding x that is not bf16 values (inner());
  // a projection block under bf16 reads only x's bf16 copy.
  bool keeps_xl(DType op) const { return may_keep() && !(proj_ && bf16_copies(op)); }
  // Whether the block keeps bf16 copies of its convolutions' inputs (x, relu(bn1)) for
  // operands of dtype op: where it may keep the inner layout, under a bf16 policy (each copy
  // then made once, instead of by every convolution pass that reads it).
  bool bf16_copies(DType op) const { return may_keep() && op == DType::bf16; }
  // The inner layout: conv2's (conv_layout), where conv1's and the shortcut's agree with it
  // (every pass of every convolution then takes it: no move, no reorder); else NCHW. The
  // memory model asks it too.
  ImageLayout inner_layout(Backend& be, int64_t n, Precision p) const override {
    if (!may_keep()) return ImageLayout::nchw;
    const ImageLayout l = be.conv_layout(g2_, n, p);
    if (l == ImageLayout::nchw || be.conv_layout(g1_, n, p) != l || (proj_ && be.conv_layout(gp_, n, p) != l))
      return ImageLayout::nchw;
    return l;
  }
  // The inner layout for n samples (see the top), the batch norms in it, and x and
  // relu(bn1) as the block keeps them: in NCHW x itself and r1; else x moved into xin (its
  // fp32 copy xl, or with bf16 copies straight into xb), the convolutions reading xc (xl or
  // xb), the identity shortcut adding x (xl, or xb where that is x exactly: x holds bf16
  // values, LayerCtx::x_bf16), and with bf16 copies bn1 writing relu(bn1) straight into r1b
  // (conv2's input and ReLU's mask; r1 unused). packs_x: xb made from xl (x not bf16 values).
  struct Inner {
    ImageLayout l;
    ChannelNorm bn;
    ConvLayouts io;
    View xin, r1;
    CView x, xc;
    bool packs_x;
    bool nchw() const { return l == ImageLayout::nchw; }
  };
  Inner inner(const LayerCtx& c, const float* x, const Saved& s, int64_t n) const {
    Inner in{inner_layout(c.be, n, c.precision), bn_, {}, View(nullptr), s.r1, x, x, false};
    in.bn.layout = in.l;
    in.io = {in.l, in.l};
    if (in.nchw()) return in;
    in.xin = s.xl, in.x = s.xl, in.xc = s.xl;
    if (!s.xb) return in;
    const bool exact = proj_ || c.x_bf16;
    if (exact) in.xin = as_bf16(s.xb), in.x = as_bf16(s.xb);
    in.packs_x = !exact;
    in.xc = as_bf16(s.xb), in.r1 = as_bf16(s.r1b);
    return in;
  }
  int64_t in_hw() const { return in_.h() * in_.w(); }
  // The inner output gradients; those only the convolutions read (dc2, dc1, dcp) in bf16
  // where the convolutions read bf16 copies of their inputs (the batch norms' backward then
  // rounds them as the convolutions' would, in the same pass; their slots keep fp32 size).
  struct Kept {
    float *ds, *db1;
    View dc2, dc1, dcp;
  };
  Kept kept(const float* keep, int64_t n, const Inner& in) const {
    Carve k{const_cast<float*>(keep), n};
    const DType t = in.xc.dtype;
    Kept v{k.take(O()), nullptr, nullptr, nullptr, nullptr};
    v.dc2 = {k.take(O()), t}, v.db1 = k.take(O()), v.dc1 = {k.take(O()), t};
    v.dcp = {proj_ ? k.take(O()) : nullptr, t};
    return v;
  }
  // Which weight gradients the input half computed already (the fused backward): conv2's,
  // conv1's with the shortcut's (only where there is a dx), and the batch norms'.
  struct ConvGradsDone {
    bool conv2, conv1, norms;
  };
  // dw_convs: not null in the fused backward, then each convolution's weight gradient comes
  // with its input gradient, and each batch norm's weight and bias gradients with its input
  // gradient (one pass for the channel sums both need).
  void input_half(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy, float* dx,
                  const float* aux, float* keep, int64_t n, float* dw_convs) const;
  void weight_half(const LayerCtx& c, ParamView w, const float* x, float* dw, const float* aux, const float* keep,
                   int64_t n, ConvGradsDone done) const;

  WindowGeom g1_, g2_, gp_;
  bool proj_;
  ChannelNorm bn_;
};

std::vector<ParamTensor> ResidualBlock::params() const {
  const Offsets o = off();
  const int64_t C = bn_.C, Ci = in_.c();
  std::vector<ParamTensor> p = {{"conv1.weight", {C, Ci, 3, 3}, o.c1, w1()}, {"bn1.weight", {C}, o.b1, C},
                                {"bn1.bias", {C}, o.b1 + C, C},           {"conv2.weight", {C, C, 3, 3}, o.c2, w2()},
                                {"bn2.weight", {C}, o.b2, C},             {"bn2.bias", {C}, o.b2 + C, C}};
  if (proj_) {
    p.push_back({"downsample.0.weight", {C, Ci, 1, 1}, o.cp, C * Ci});
    p.push_back({"downsample.1.weight", {C}, o.bp, C});
    p.push_back({"downsample.1.bias", {C}, o.bp + C, C});
  }
  return p;
}

// Convolutions as PyTorch's default (U(+-1/sqrt(fan_in))) keyed by (seed, layer, tensor
// index above); batch norms (1, 0).
void ResidualBlock::init_params(float* host, uint64_t seed) const {
  int t = 0;
  for (const ParamTensor& p : params()) {
    if (p.shape.size() == 4) {
      const float fan_in = static_cast<float>(p.shape[1] * p.shape[2] * p.shape[3]);
      init_uniform(host + p.offset, p.size, 1.0f / std::sqrt(fan_in), seed, index(), t);
    } else {
      init_constant(host + p.offset, p.size, p.name.find("weight") != std::string::npos ? 1.0f : 0.0f);
    }
    ++t;
  }
}

void ResidualBlock::forward(const LayerCtx& c, ParamView w, const float* x, float* y, float* aux,
                            int64_t n) const {
  Backend& be = c.be;
  const Offsets o = off();
  const Saved s = saved(aux, n, c.precision);
  float* st = c.state;
  const int64_t S = 2 * bn_.C;  // state floats per batch norm
  const Inner in = inner(c, x, s, n);
  if (!in.nchw()) be.relayout(n, in_.c(), in_hw(), ImageLayout::nchw, x, in.l, in.xin);
  if (in.packs_x) be.pack_bf16(static_cast<size_t>(n * in_.numel()), s.xl, s.xb);
  be.conv2d_forward(g1_, n, in.xc, w + o.c1, nullptr, s.c1, c.precision, in.io);
  in.bn.forward(c, w + o.b1, s.c1, in.r1, s.st1, st, n, CView(nullptr), true);
  be.conv2d_forward(g2_, n, in.r1, w + o.c2, nullptr, s.c2, c.precision, in.io);
  CView shortcut = in.x;
  if (proj_) {
    be.conv2d_forward(gp_, n, in.xc, w + o.cp, nullptr, s.cp, c.precision, in.io);
    in.bn.forward(c, w + o.bp, s.cp, c.work, s.stp, st ? st + 2 * S : nullptr, n);
    shortcut = c.work;
  }
  // relu(bn2 + shortcut), written to y in NCHW (the move out in the same pass)
  in.bn.forward(c, w + o.b2, s.c2, y, s.st2, st ? st + S : nullptr, n, shortcut, true, !in.nchw());
}

void ResidualBlock::input_half(const LayerCtx& c, ParamView w, const float* x, const float* y, const float* dy,
                               float* dx, const float* aux, float* keep, int64_t n, float* dw_convs) const {
  Backend& be = c.be;
  const Offsets o = off();
  const Saved s = saved(aux, n, c.precision);
  const Inner in = inner(c, x, s, n);
  const Kept k = kept(keep, n, in);
  const size_t no = static_cast<size_t>(n * O());
  float* dr1 = c.work;
  float* dxp = c.work + n * O();
  auto dw_of = [&](int64_t off) { return dw_convs ? dw_convs + off : nullptr; };
  be.relu_backward_relayout(n, bn_.C, bn_.HW, y, dy, in.l, k.ds);  // the move in, in the same pass
  in.bn.backward(be, w + o.b2, s.c2, s.st2, k.ds, k.dc2, dw_of(o.b2), n);
  be.conv2d_backward(g2_, n, in.r1, w + o.c2, k.dc2, dr1, dw_of(o.c2), nullptr, c.precision, in.io);
  be.relu_backward(no, in.r1, dr1, k.db1);
  in.bn.backward(be, w + o.b1, s.c1, s.st1, k.db1, k.dc1, dw_of(o.b1), n);
  if (proj_) in.bn.backward(be, w + o.bp, s.cp, s.stp, k.ds, k.dcp, dw_of(o.bp), n);
  if (!dx) return;
  // dx in the inner layout: dx itself in NCHW, else dxp (moved into dx at the end, the
  // shortcut's dx in dx meanwhile)
  float* dxa = in.nchw() ? dx : dxp;
  be.conv2d_backward(g1_, n, in.xc, w + o.c1, k.dc1, dxa, dw_of(o.c1), nullptr, c.precision, in.io);
  if (proj_) {
    float* dxs = in.nchw() ? dxp : dx;
    be.conv2d_backward(gp_, n, in.xc, w + o.cp, k.dcp, dxs, dw_of(o.cp), nullptr, c.precision, in.io);
    be.axpy(static_cast<size_t>(n * in_.numel()), 1.0f, dxs, dxa);
  } else {
    be.axpy(no, 1.0f, k.ds, dxa);
  }
  if (!in.nchw()) be.relayout(n, in_.c(), in_hw(), in.l, dxa, ImageLayout::nchw, dx);
}

void ResidualBlock::weight_half(const LayerCtx& c, ParamView w, const float* x, float* dw, const float* aux,
                                const float* keep, int64_t n, ConvGradsDone done) const {
  Backend& be = c.be;
  const Offsets o = off();
  const Saved s = saved(aux, n, c.precision);
  const Inner in = inner(c, x, s, n);
  const Kept k = kept(keep, n, in);
  const Precision p = c.precision;
  if (!done.conv2) be.conv2d_backward(g2_, n, in.r1, w + o.c2, k.dc2, nullptr, dw + o.c2, nullptr, p, in.io);
  if (!done.norms) in.bn.backward_weight(be, w + o.b2, s.c2, s.st2, k.ds, dw + o.b2, n);
  if (!done.conv1) be.conv2d_backward(g1_, n, in.xc, w + o.c1, k.dc1, nullptr, dw + o.c1, nullptr, p, in.io);
  if (!done.norms) in.bn.backward_weight(be, w + o.b1, s.c1, s.st1, k.db1, dw + o.b1, n);
  if (!proj_) return;
  if (!done.conv1) be.conv2d_backward(gp_, n, in.xc, w + o.cp, k.dcp, nullptr, dw + o.cp, nullptr, p, in.io);
  if (!done.norms) in.bn.backward_weight(be, w + o.bp, s.cp, s.stp, k.ds, dw + o.bp, n);
}

LayerType residual_block_type() {
  LayerType t;
  t.name = "residual_block";
  t.doc = "ResNet basic block: relu(bn(conv3x3(relu(bn(conv3x3/stride(x))))) + shortcut), shortcut = x or "
          "bn(conv1x1/stride(x)) when channels or stride change; one link of the chain";
  t.pytorch = "torchvision.models.resnet.BasicBlock(in, channels, stride, downsample=Sequential(Conv2d(in, channels, 1, "
              "stride, bias=False), BatchNorm2d(channels)) when needed)";
  using S = ResidualSettings;
  t.keys = layer_keys<S>(concat_keys<S>(
      {required_key("channels", &S::channels, key_gt(0), "output channels"),
       key("stride", &S::stride, 1, key_gt(0), "stride of the first conv and the shortcut (default 1)")},
      batchnorm_keys<S>()));
  t.make = [](const LayerSpec& s, const Shape& in, const std::string& prev) -> std::unique_ptr<Layer> {
    require_input(s, in, 3, "an image [C, H, W]", prev);
    return std::make_unique<ResidualBlock>(s, in);
  };
  return t;
}

}  // namespace

PT_REGISTER_LAYER(residual_block, residual_block_type())

}  // namespace pt::layers
