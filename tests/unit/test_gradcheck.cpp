// Finite-difference gradient checks of every layer's backward (and of a whole stage),
// independent of any reference implementation. For a layer with output y, the scalar is
// L = sum(y * r) with fixed random weights r (so dL/dy = r, passed as dy); the loss layer,
// whose backward ignores dy, is checked against L = loss_scale * sum(per-sample loss).
// Each input and parameter element is perturbed by +-h in float (the step actually taken,
// fl(v + h) - v, is the denominator) and the central difference is compared with the
// analytic gradient: |num - ana| <= atol + rtol |ana| per element (README: tolerances).
// Non-smooth layers get inputs away from their kinks: relu |x| >= 0.1, maxpool values on
// a grid of spacing 0.1 (no ties, no argmax change under a 0.01 step). Token inputs
// (embedding) are not differentiable: only its parameters are checked. Layers with batch
// statistics run their training forward without running state (nothing to update).
// residual_block has relus after batch norms: its norms get weights in [0.05, 0.15] and
// biases of +-1 (bn1) and +-3 (bn2) by channel, so every relu input stays at least 0.16
// away from 0 (|normalised value| <= sqrt(samples - 1)) and both relu branches are taken.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "fixture_util.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/stage.hpp"

namespace pt::test {
namespace {

enum class Input { uniform, away_from_zero, distinct, tokens };

struct GradCase {
  std::string name;
  std::string layer;  // the [[model.layers]] body, e.g. "type = \"linear\"\nout = 5\n"
  Shape in;
  int64_t n;
  Input input;
  double h;
  Tol tol;
  bool positive_gamma = false;  // layernorm: weight 1 + U(-0.5, 0.5)
  int64_t classes = 0;          // the data's classes (vocabulary) when not the default
  // adjusts the random parameters (by tensor), e.g. to keep relu inputs off their kink
  std::function<void(const ParamTensor&, float*)> set_param = nullptr;
};

bool loss_layer(const std::string& layer) {
  return layer.find("softmax_cross_entropy") != std::string::npos || layer.find("lm_head") != std::string::npos;
}

std::string deck_for(const std::string& layer, const Shape& in, int64_t classes, bool is_loss) {
  std::ostringstream o;
  o << "[data]\nsource = \"synthetic\"\n";
  if (in.rank == 3) o << "shape = [" << in.c() << ", " << in.h() << ", " << in.w() << "]\n";
  else o << "shape = [" << in.numel() << "]\n";  // not used: Model gets `in`
  o << "classes = " << classes << "\n[model]\n[[model.layers]]\n" << layer;
  if (!is_loss)
    o << "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = " << classes << "\n"
         "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  return o.str();
}

std::vector<float> make_input(Rand& rnd, size_t count, Input kind, int64_t classes) {
  std::vector<float> x(count);
  if (kind == Input::tokens) {
    for (auto& v : x) v = static_cast<float>(rnd.below(classes));
  } else if (kind == Input::uniform) {
    for (auto& v : x) v = rnd.uniform(-2.0f, 2.0f);
  } else if (kind == Input::away_from_zero) {
    for (auto& v : x) {
      const float m = rnd.uniform(0.1f, 2.0f);
      v = rnd.uniform() < 0.5 ? -m : m;
    }
  } else {  // a shuffled grid: distinct values 0.1 apart
    std::vector<int64_t> perm(count);
    std::iota(perm.begin(), perm.end(), 0);
    for (size_t i = count; i > 1; --i) std::swap(perm[i - 1], perm[static_cast<size_t>(rnd.below(static_cast<int64_t>(i)))]);
    for (size_t i = 0; i < count; ++i) x[i] = 0.1f * static_cast<float>(perm[i]) - 0.05f * static_cast<float>(count);
  }
  return x;
}

// Indices to perturb: all when few, else an even spread of `most` (always first and last).
std::vector<size_t> coords(size_t count, size_t most = 400) {
  std::vector<size_t> c;
  if (count <= most) {
    for (size_t i = 0; i < count; ++i) c.push_back(i);
  } else {
    for (size_t k = 0; k < most; ++k) c.push_back(k * (count - 1) / (most - 1));
  }
  return c;
}

struct Check {
  Check(std::string w, Tol t) : what(std::move(w)), tol(t) {}
  std::string what;
  Tol tol;
  Worst worst;
  size_t checked = 0, bad = 0;
  std::string first_bad;
  void add(size_t i, double num, double ana) {
    const double q = std::fabs(num - ana) / (tol.atol + tol.rtol * std::fabs(ana));
    ++checked;
    if (!(q <= 1.0)) {
      if (!bad++) first_bad = "element " + std::to_string(i) + ": numeric " + std::to_string(num) + ", analytic " +
                              std::to_string(ana);
    }
    if (!(q <= worst.ratio)) worst = {std::isfinite(q) ? q : INFINITY, i, ana, num};
  }
  void report() {
    note_ratio("gradcheck " + what, worst);
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << checked << " elements outside atol " << tol.atol
                       << " + rtol " << tol.rtol << " |analytic|; first " << first_bad << "; worst ratio "
                       << worst.ratio;
    EXPECT_GT(checked, 0u);
  }
};

void gradcheck_on(Backend& backend, const std::string& tag, const GradCase& gc) {
  SCOPED_TRACE(tag + gc.name);
  const bool is_loss = loss_layer(gc.layer);
  const int64_t classes = gc.classes ? gc.classes : is_loss ? gc.in.numel() : 2;
  const Deck deck = parse_deck_text(deck_for(gc.layer, gc.in, classes, is_loss), gc.name + ".toml", {});
  const Model model(deck, gc.in, classes);
  const Layer& L = model.layer(0);
  ASSERT_FALSE(L.is_view());
  const int64_t n = gc.n, fi = L.in_shape().numel(), fo = L.out_shape().numel();
  const size_t nx = static_cast<size_t>(n * fi), ny = static_cast<size_t>(n * fo);
  const size_t np = static_cast<size_t>(L.num_params()), na = static_cast<size_t>(std::max<int64_t>(1, n * L.aux_per_sample()));
  Rand rnd(std::hash<std::string>{}(gc.name) & 0xffff);
  std::vector<float> x = make_input(rnd, nx, gc.input, classes);
  std::vector<float> w = rnd.vec(np, -0.5f, 0.5f);
  if (gc.positive_gamma)
    for (size_t i = 0; i < np / 2; ++i) w[i] += 1.0f;
  if (gc.set_param)
    for (const ParamTensor& p : L.params()) gc.set_param(p, w.data() + p.offset);
  std::vector<int64_t> labels(static_cast<size_t>(n * L.labels_per_sample()));
  for (auto& l : labels) l = rnd.below(classes);
  const float loss_scale = 1.0f / static_cast<float>(n);
  std::vector<float> r = is_loss ? std::vector<float>(ny, loss_scale) : rnd.vec(ny, -1.0f, 1.0f);

  Backend* be = &backend;
  Labels lab(*be, labels);
  LayerCtx ctx{*be};
  ctx.seed = 77;
  ctx.sample0 = 1000;
  ctx.training = true;
  ctx.labels = lab.p;
  ctx.loss_scale = loss_scale;
  Buffer xb = on_backend(*be, x), wb(*be, std::max<size_t>(1, np)), yb(*be, ny), aux(*be, na);
  Buffer work(*be, static_cast<size_t>(std::max<int64_t>(1, n * L.workspace_per_sample())));
  ctx.work = work.data();
  if (np) be->from_host(wb.data(), w.data(), np);
  auto forward = [&]() {
    L.forward(ctx, wb.data(), xb.data(), yb.data(), aux.data(), n);
    return to_host(*be, yb.data(), ny);
  };
  // analytic
  forward();
  Buffer dy = on_backend(*be, r), dx(*be, nx), dw(*be, std::max<size_t>(1, np));
  L.backward(ctx, wb.data(), xb.data(), yb.data(), dy.data(), dx.data(), dw.data(), aux.data(), n);
  const auto dx_ana = to_host(*be, dx.data(), nx), dw_ana = to_host(*be, dw.data(), np);
  // numeric: sum over outputs of (y+ - y-) r, in double
  auto central = [&](float* dev, std::vector<float>& host, size_t i) {
    const float v = host[i];
    const float vp = static_cast<float>(v + gc.h), vm = static_cast<float>(v - gc.h);
    be->from_host(dev + i, &vp, 1);
    const auto yp = forward();
    be->from_host(dev + i, &vm, 1);
    const auto ym = forward();
    be->from_host(dev + i, &v, 1);
    double s = 0;
    for (size_t k = 0; k < ny; ++k) s += (static_cast<double>(yp[k]) - static_cast<double>(ym[k])) * r[k];
    return s / (static_cast<double>(vp) - static_cast<double>(vm));
  };
  if (gc.input != Input::tokens) {
    Check cx{tag + gc.name + " dx", gc.tol};
    for (size_t i : coords(nx)) cx.add(i, central(xb.data(), x, i), dx_ana[i]);
    cx.report();
  }
  if (np) {
    Check cw{tag + gc.name + " dparams", gc.tol};
    for (size_t i : coords(np)) cw.add(i, central(wb.data(), w, i), dw_ana[i]);
    cw.report();
  }
}

void gradcheck_layer(const GradCase& gc) {
  for (auto& tb : test_backends()) gradcheck_on(*tb.be, tb.tag, gc);
}

// Layers linear in the perturbed variable have no truncation error: only float rounding
// of the outputs, ~1e-7 |y| / h per changed output. Smooth nonlinear ones (gelu,
// layernorm, softmax) add O(h^2) truncation.
const Tol kLinearTol{2e-4, 1e-3};
const Tol kSmoothTol{5e-4, 5e-3};

}  // namespace

TEST(GradCheck, Linear) {
  gradcheck_layer({"linear", "type = \"linear\"\nout = 6\n", Shape::vec(10), 4, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, LinearNoBias) {
  gradcheck_layer(
      {"linear_nobias", "type = \"linear\"\nout = 3\nbias = false\n", Shape::vec(7), 3, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, Relu) {
  gradcheck_layer({"relu", "type = \"relu\"\n", Shape::chw(2, 4, 4), 3, Input::away_from_zero, 0.01, kLinearTol});
}
TEST(GradCheck, Gelu) {
  gradcheck_layer({"gelu", "type = \"gelu\"\n", Shape::vec(40), 4, Input::uniform, 0.01, kSmoothTol});
}
TEST(GradCheck, Conv2dK3S1P1) {
  gradcheck_layer({"conv2d_k3s1p1", "type = \"conv2d\"\nchannels = 3\nkernel = 3\npadding = 1\n", Shape::chw(2, 6, 6),
                   2, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, Conv2dK3S2P0) {
  gradcheck_layer({"conv2d_k3s2p0", "type = \"conv2d\"\nchannels = 2\nkernel = 3\nstride = 2\n", Shape::chw(3, 7, 7),
                   2, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, Conv2dK5S1P2NoBias) {
  gradcheck_layer({"conv2d_k5s1p2_nobias", "type = \"conv2d\"\nchannels = 2\nkernel = 5\npadding = 2\nbias = false\n",
                   Shape::chw(2, 6, 6), 2, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, Conv2dK3S2P1) {
  gradcheck_layer({"conv2d_k3s2p1", "type = \"conv2d\"\nchannels = 2\nkernel = 3\nstride = 2\npadding = 1\n",
                   Shape::chw(2, 8, 8), 2, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, MaxPoolK2) {
  gradcheck_layer({"maxpool2d_k2", "type = \"maxpool2d\"\nkernel = 2\n", Shape::chw(2, 6, 6), 2, Input::distinct, 0.01,
                   kLinearTol});
}
TEST(GradCheck, MaxPoolK3S2P1) {
  gradcheck_layer({"maxpool2d_k3s2p1", "type = \"maxpool2d\"\nkernel = 3\nstride = 2\npadding = 1\n",
                   Shape::chw(2, 7, 7), 2, Input::distinct, 0.01, kLinearTol});
}
TEST(GradCheck, AvgPoolK2) {
  gradcheck_layer({"avgpool2d_k2", "type = \"avgpool2d\"\nkernel = 2\n", Shape::chw(2, 6, 6), 2, Input::uniform, 0.05,
                   kLinearTol});
}
TEST(GradCheck, AvgPoolK3S1P1) {
  gradcheck_layer({"avgpool2d_k3s1p1", "type = \"avgpool2d\"\nkernel = 3\nstride = 1\npadding = 1\n",
                   Shape::chw(2, 5, 5), 2, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, LayerNormImage) {
  gradcheck_layer({"layernorm", "type = \"layernorm\"\n", Shape::chw(2, 3, 3), 3, Input::uniform, 0.01, kSmoothTol,
                   true});
}
TEST(GradCheck, LayerNormVector) {
  gradcheck_layer({"layernorm_vec", "type = \"layernorm\"\neps = 0.001\n", Shape::vec(12), 3, Input::uniform, 0.01,
                   kSmoothTol, true});
}
TEST(GradCheck, DropoutTraining) {
  gradcheck_layer({"dropout", "type = \"dropout\"\np = 0.4\n", Shape::vec(30), 3, Input::uniform, 0.05, kLinearTol});
}
TEST(GradCheck, SoftmaxCrossEntropy) {
  gradcheck_layer({"softmax_xent", "type = \"softmax_cross_entropy\"\n", Shape::vec(7), 5, Input::uniform, 0.01,
                   kSmoothTol});
}

// ---- sequence and residual layers ---------------------------------------------------

TEST(GradCheck, LayerNormPerPosition) {
  gradcheck_layer({"layernorm_seq", "type = \"layernorm\"\n", Shape::seq(4, 6), 2, Input::uniform, 0.01, kSmoothTol, true});
}
TEST(GradCheck, EmbeddingParameters) {
  GradCase gc{"embedding", "type = \"embedding\"\ndim = 5\n", Shape::tokens(6), 3, Input::tokens, 0.05, kLinearTol};
  gc.classes = 4;  // 18 tokens over 4 ids: every row is hit several times
  gradcheck_layer(gc);
}
TEST(GradCheck, Attention) {
  gradcheck_layer({"attention", "type = \"attention\"\nheads = 2\n", Shape::seq(5, 6), 2, Input::uniform, 0.01, kSmoothTol});
}
TEST(GradCheck, AttentionWithProbabilityDropout) {
  gradcheck_layer({"attention_dropout", "type = \"attention\"\nheads = 3\ndropout = 0.3\n", Shape::seq(6, 6), 2,
                   Input::uniform, 0.01, kSmoothTol});
}
TEST(GradCheck, TransformerBlock) {
  gradcheck_layer({"transformer_block", "type = \"transformer_block\"\nheads = 2\nmlp_ratio = 2\n", Shape::seq(4, 6), 2,
                   Input::uniform, 0.01, kSmoothTol});
}
TEST(GradCheck, TransformerBlockWithDropout) {
  gradcheck_layer({"transformer_block_dropout", "type = \"transformer_block\"\nheads = 2\ndropout = 0.25\n",
                   Shape::seq(5, 4), 2, Input::uniform, 0.01, kSmoothTol});
}
TEST(GradCheck, LmHeadLoss) {
  GradCase gc{"lm_head", "type = \"lm_head\"\nbias = true\n", Shape::seq(4, 6), 3, Input::uniform, 0.01, kSmoothTol};
  gc.classes = 7;
  gradcheck_layer(gc);
}
TEST(GradCheck, BatchNorm2dBatchStatistics) {
  gradcheck_layer({"batchnorm2d", "type = \"batchnorm2d\"\n", Shape::chw(3, 3, 3), 3, Input::uniform, 0.01, kSmoothTol});
}
namespace {

// Norm weights in [0.05, 0.15], biases +-1 (bn1), +-3 (bn2), 0 (shortcut) by channel: with
// inputs in [-2, 2] no relu input comes within 0.16 of its kink.
void residual_params_off_kinks(const ParamTensor& p, float* w) {
  if (p.shape.size() != 1) return;
  const bool weight = p.name.find("weight") != std::string::npos;
  const float b = p.name.rfind("bn1", 0) == 0 ? 1.0f : p.name.rfind("bn2", 0) == 0 ? 3.0f : 0.0f;
  for (int64_t c = 0; c < p.size; ++c) w[c] = weight ? 0.05f + 0.1f * (0.5f + 0.5f * std::sin(3.0f * c)) : (c % 2 ? -b : b);
}

}  // namespace

TEST(GradCheck, ResidualBlockIdentity) {
  GradCase gc{"residual_block", "type = \"residual_block\"\nchannels = 2\n", Shape::chw(2, 4, 4), 2, Input::uniform,
              0.01, kSmoothTol};
  gc.set_param = residual_params_off_kinks;
  gradcheck_layer(gc);
}
TEST(GradCheck, ResidualBlockProjection) {
  GradCase gc{"residual_block_proj", "type = \"residual_block\"\nchannels = 3\nstride = 2\n", Shape::chw(2, 5, 5), 2,
              Input::uniform, 0.01, kSmoothTol};
  gc.set_param = residual_params_off_kinks;
  gradcheck_layer(gc);
}
TEST(GradCheck, GlobalAvgPool) {
  gradcheck_layer({"global_avgpool", "type = \"global_avgpool\"\n", Shape::chw(3, 4, 2), 2, Input::uniform, 0.05, kLinearTol});
}

// A whole stage of smooth layers (flatten and dropout included): the stage's backward
// wiring (ping-pong scratch, the view, accumulation into one flat gradient buffer)
// against central differences of the mean loss.
TEST(GradCheck, WholeStage) {
  const std::string text =
      "[data]\nsource = \"synthetic\"\nshape = [2, 8, 8]\nclasses = 5\n[model]\n"
      "[[model.layers]]\ntype = \"conv2d\"\nchannels = 3\nkernel = 3\npadding = 1\n"
      "[[model.layers]]\ntype = \"gelu\"\n"
      "[[model.layers]]\ntype = \"avgpool2d\"\nkernel = 2\n"
      "[[model.layers]]\ntype = \"conv2d\"\nchannels = 4\nkernel = 3\nstride = 2\npadding = 1\n"
      "[[model.layers]]\ntype = \"layernorm\"\n"
      "[[model.layers]]\ntype = \"flatten\"\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 8\n"
      "[[model.layers]]\ntype = \"gelu\"\n"
      "[[model.layers]]\ntype = \"dropout\"\np = 0.25\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 5\n"
      "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  const Deck deck = parse_deck_text(text, "stage.toml", {});
  const Model model(deck, Shape::chw(2, 8, 8), 5);
  const int64_t n = 3;
  for (auto& tb : test_backends()) {
    auto& be = tb.be;
    Stage st(*be, model, 0, model.size(), n, n);
    const size_t np = static_cast<size_t>(st.num_params()), nx = static_cast<size_t>(n * st.in_shape().numel());
    std::vector<float> w(np);
    st.init_params(w.data(), 3);
    Rand rnd(4);
    for (auto& v : w) v += rnd.uniform(-0.1f, 0.1f);  // layernorm: not exactly (1, 0)
    std::vector<float> x = rnd.vec(nx, -1.0f, 1.0f);
    std::vector<int64_t> labels = {1, 4, 0};
    Labels lab(*be, labels);
    Buffer slot(*be, static_cast<size_t>(st.slot_floats())), wb = on_backend(*be, w), grads(*be, np), dx(*be, nx);
    Stage::Slot s = st.carve(slot.data(), lab.p);
    LayerCtx ctx{*be};
    ctx.seed = 11;
    ctx.sample0 = 64;
    ctx.training = true;
    ctx.labels = lab.p;
    ctx.loss_scale = 1.0f / static_cast<float>(n);
    be->from_host(s.input, x.data(), nx);
    auto loss = [&]() {
      st.forward(s, wb.data(), ctx, n, {});
      const auto l = to_host(*be, st.output(s), static_cast<size_t>(n));
      double sum = 0;
      for (float v : l) sum += v;
      return sum / static_cast<double>(n);
    };
    loss();
    st.backward(s, wb.data(), grads.data(), nullptr, dx.data(), ctx, n, {});
    const auto g_ana = to_host(*be, grads.data(), np), dx_ana = to_host(*be, dx.data(), nx);
    const double h = 1e-2;
    auto central = [&](float* dev, std::vector<float>& host, size_t i) {
      const float v = host[i], vp = static_cast<float>(v + h), vm = static_cast<float>(v - h);
      be->from_host(dev + i, &vp, 1);
      const double lp = loss();
      be->from_host(dev + i, &vm, 1);
      const double lm = loss();
      be->from_host(dev + i, &v, 1);
      return (lp - lm) / (static_cast<double>(vp) - static_cast<double>(vm));
    };
    const Tol tol{1e-4, 1e-2};
    Check cx{tb.tag + "stage dx", tol};
    for (size_t i : coords(nx, 200)) cx.add(i, central(s.input, x, i), dx_ana[i]);
    cx.report();
    for (int l = 0; l < model.size(); ++l) {
      const Layer& layer = model.layer(l);
      for (const auto& p : layer.params()) {
        Check cw{tb.tag + "stage layer " + std::to_string(l) + " " + layer.type() + " " + p.name, tol};
        const size_t base = static_cast<size_t>(st.param_offset(l) + p.offset);
        for (size_t k : coords(static_cast<size_t>(p.size), 120)) cw.add(k, central(wb.data(), w, base + k), g_ana[base + k]);
        cw.report();
      }
    }
  }
}

}  // namespace pt::test
