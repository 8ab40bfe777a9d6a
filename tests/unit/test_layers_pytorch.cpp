// Every layer against PyTorch 1.13 (CPU, float32; the sequence and residual layers'
// references in float64): forward output, input gradient and parameter gradients on the
// fixtures of tools/make_fixtures.py, run on the host backend as one batch, in chunks
// (per-sample and uneven: exercises the conv GEMM grouping and the += accumulation of
// parameter gradients), and with dx = null (first layer). Layers with batch statistics
// (batchnorm2d, residual_block) run as one batch, twice in training (running statistics),
// then backward, then in evaluation. Dropout cannot match PyTorch's RNG: its properties
// are tested instead.
#include <gtest/gtest.h>

#include <algorithm>
#include <iomanip>
#include <set>

#include "fixture_util.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/stage.hpp"

namespace pt::test {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

Shape fixture_shape(const Fixture& fx) {
  if (fx.i("rank") == 3) return Shape::chw(fx.i("c"), fx.i("h"), fx.i("w"));
  if (fx.i("rank") == 2) return Shape::seq(fx.i("c"), fx.i("h"));
  return fx.has_attr("tokens") && fx.i("tokens") ? Shape::tokens(fx.i("c")) : Shape::vec(fx.i("c"));
}

bool is_loss_type(const std::string& type) { return type == "softmax_cross_entropy" || type == "lm_head"; }

// The data's classes: the fixture's (a vocabulary), the logits of a softmax loss, else 2.
int64_t fixture_classes(const Fixture& fx) {
  if (fx.has_attr("classes")) return fx.i("classes");
  return fx.s("type") == "softmax_cross_entropy" ? fixture_shape(fx).numel() : 2;
}

// A deck whose layer 0 is the fixture's layer (the deck must end in the loss, so a
// flatten + linear + loss tail follows unless the layer is the loss).
std::string layer_deck(const Fixture& fx) {
  const std::string type = fx.s("type");
  const Shape in = fixture_shape(fx);
  const bool loss = is_loss_type(type);
  std::ostringstream o;
  o << std::setprecision(17);
  o << "[data]\nsource = \"synthetic\"\n";  // the shape here is not used: Model gets the fixture's
  if (in.rank == 3) o << "shape = [" << in.c() << ", " << in.h() << ", " << in.w() << "]\n";
  else o << "shape = [" << in.numel() << "]\n";
  o << "classes = " << fixture_classes(fx) << "\n\n[model]\n[[model.layers]]\ntype = \"" << type << "\"\n";
  if (fx.has_attr("deck")) o << fx.s("deck");  // the layer's keys as TOML
  else if (type == "linear") o << "out = " << fx.i("out") << "\nbias = " << (fx.i("bias") ? "true" : "false") << "\n";
  else if (type == "conv2d")
    o << "channels = " << fx.i("channels") << "\nkernel = " << fx.i("kernel") << "\nstride = " << fx.i("stride")
      << "\npadding = " << fx.i("padding") << "\nbias = " << (fx.i("bias") ? "true" : "false") << "\n";
  else if (type == "maxpool2d" || type == "avgpool2d")
    o << "kernel = " << fx.i("kernel") << "\nstride = " << fx.i("stride") << "\npadding = " << fx.i("padding") << "\n";
  else if (type == "layernorm") o << "eps = " << fx.d("eps") << "\n";
  if (!loss)
    o << "[[model.layers]]\ntype = \"flatten\"\n[[model.layers]]\ntype = \"linear\"\nout = " << fixture_classes(fx)
      << "\n[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  return o.str();
}

// The fixture's layer as layer 0 of a model.
struct FixtureModel {
  explicit FixtureModel(const Fixture& fx)
      : deck(parse_deck_text(layer_deck(fx), fx.path() + ".toml", {})), model(deck, fixture_shape(fx), fixture_classes(fx)) {}
  Deck deck;
  Model model;
};

struct LayerTol {
  Tol y, dx, dw;
};

struct Run {
  std::vector<float> y, dx, dw;
};

// Forward then backward of `layer` over the batch in chunks of `chunk` samples (the
// loss scale stays 1/n, so chunked gradients sum to the batch's). dw starts from a
// known nonzero pattern, which is subtracted again: the layer must accumulate (+=).
// dx starts as NaN: the layer must overwrite it.
Run run_layer(Backend& be, const Layer& L, const Fixture& fx, int64_t n, int64_t chunk, bool with_dx) {
  const int64_t fi = L.in_shape().numel(), fo = L.out_shape().numel(), fa = L.aux_per_sample();
  const size_t np = static_cast<size_t>(L.num_params());
  std::vector<float> pattern(np);
  for (size_t i = 0; i < np; ++i) pattern[i] = 0.0625f * static_cast<float>(static_cast<int>(i % 5) - 2);
  Buffer x = on_backend(be, fx.floats("x"));
  Buffer w = np ? on_backend(be, fx.floats("params")) : Buffer();
  Buffer dw = np ? on_backend(be, pattern) : Buffer();
  Buffer y = filled(be, static_cast<size_t>(n * fo), kNaN);
  Buffer aux = filled(be, static_cast<size_t>(std::max<int64_t>(1, n * fa)), kNaN);
  // the loss ignores dy: give it NaN to prove that
  Buffer dy = L.is_loss() ? filled(be, static_cast<size_t>(n * fo), kNaN) : on_backend(be, fx.floats("dy"));
  Buffer dx = filled(be, static_cast<size_t>(n * fi), kNaN);
  Buffer work = filled(be, static_cast<size_t>(std::max<int64_t>(1, n * L.workspace_per_sample())), kNaN);
  std::unique_ptr<Labels> labels;
  if (L.is_loss()) labels = std::make_unique<Labels>(be, fx.ints("labels"));
  const int64_t lps = L.labels_per_sample();
  LayerCtx ctx{be};
  ctx.seed = 5;
  ctx.training = true;
  ctx.loss_scale = L.is_loss() ? static_cast<float>(fx.d("loss_scale")) : 1.0f;
  ctx.work = work.data();
  for (int64_t s0 = 0; s0 < n; s0 += chunk) {
    const int64_t m = std::min(chunk, n - s0);
    ctx.sample0 = s0;
    ctx.labels = labels ? labels->p + s0 * lps : nullptr;
    L.forward(ctx, w.data(), x.data() + s0 * fi, y.data() + s0 * fo, aux.data() + s0 * fa, m);
  }
  for (int64_t s0 = 0; s0 < n; s0 += chunk) {
    const int64_t m = std::min(chunk, n - s0);
    ctx.sample0 = s0;
    ctx.labels = labels ? labels->p + s0 * lps : nullptr;
    L.backward(ctx, w.data(), x.data() + s0 * fi, y.data() + s0 * fo, dy.data() + s0 * fo,
               with_dx ? dx.data() + s0 * fi : nullptr, dw.data(), aux.data() + s0 * fa, m);
  }
  Run r;
  r.y = to_host(be, y.data(), y.size());
  r.dx = to_host(be, dx.data(), dx.size());
  r.dw = to_host(be, dw.data(), np);
  for (size_t i = 0; i < np; ++i) r.dw[i] -= pattern[i];
  return r;
}

void check_layer(const std::string& name, const LayerTol& tol) {
  SCOPED_TRACE("fixture layer_" + name);
  Fixture fx("layer_" + name);
  const std::string type = fx.s("type");
  const int64_t n = fx.i("n");
  const Shape in = fixture_shape(fx);
  const FixtureModel fm(fx);
  const Layer& L = fm.model.layer(0);
  ASSERT_EQ(L.type(), type);
  ASSERT_FALSE(L.is_view());
  const auto y_ref = fx.floats("y"), dx_ref = fx.floats("dx");
  ASSERT_EQ(static_cast<int64_t>(fx.floats("x").size()), n * in.numel());
  ASSERT_EQ(static_cast<int64_t>(y_ref.size()), n * L.out_shape().numel()) << "output shape " << L.out_shape().str();
  std::vector<float> dw_ref;
  if (L.num_params() || fx.has("params")) {
    dw_ref = fx.floats("dparams");
    ASSERT_EQ(static_cast<int64_t>(fx.floats("params").size()), L.num_params());
    ASSERT_EQ(dw_ref.size(), fx.floats("params").size());
  }
  for (auto& tb : test_backends()) {
    auto& be = tb.be;
    const std::string label = tb.tag + name;
    for (int64_t chunk : {n, int64_t(1), int64_t(2)}) {
      const std::string tag = label + (chunk == n ? "" : " (chunks of " + std::to_string(chunk) + ")");
      Run r = run_layer(*be, L, fx, n, chunk, true);
      EXPECT_TRUE(all_close(tag + " y", r.y, y_ref, tol.y));
      EXPECT_TRUE(all_close(tag + " dx", r.dx, dx_ref, tol.dx));
      if (!dw_ref.empty()) {
        EXPECT_TRUE(all_close(tag + " dparams", r.dw, dw_ref, tol.dw));
      }
    }
    // first layer of a model: no input gradient wanted; parameter gradients unchanged
    Run r = run_layer(*be, L, fx, n, n, false);
    for (float v : r.dx) ASSERT_TRUE(std::isnan(v)) << label << ": dx written although null was passed";
    if (!dw_ref.empty()) {
      EXPECT_TRUE(all_close(label + " dparams (dx null)", r.dw, dw_ref, tol.dw));
    }
  }
}

// Tolerances (see tests/fixtures/README.md): |got - ref| <= atol + rtol |ref| per element.
const Tol kFwd{1e-5, 1e-4};
const Tol kGrad{1e-5, 1e-4};
const Tol kConvGrad{3e-5, 3e-4};
const Tol kExact{1e-7, 1e-6};  // relu, pooling: copies, maxima and sums of a few terms

}  // namespace

TEST(LayerVsTorch, Linear) { check_layer("linear", {kFwd, kGrad, kGrad}); }
TEST(LayerVsTorch, LinearNoBias) { check_layer("linear_nobias", {kFwd, kGrad, kGrad}); }
TEST(LayerVsTorch, Relu) { check_layer("relu", {kExact, kExact, {}}); }
TEST(LayerVsTorch, GeluExactErf) { check_layer("gelu", {{1e-6, 1e-5}, {1e-6, 1e-5}, {}}); }
TEST(LayerVsTorch, Conv2dK3S1P1) { check_layer("conv2d_k3s1p1", {kFwd, kConvGrad, kConvGrad}); }
TEST(LayerVsTorch, Conv2dK3S2P0) { check_layer("conv2d_k3s2p0", {kFwd, kConvGrad, kConvGrad}); }
TEST(LayerVsTorch, Conv2dK3S2P1) { check_layer("conv2d_k3s2p1", {kFwd, kConvGrad, kConvGrad}); }
TEST(LayerVsTorch, Conv2dK5S1P2MultiChannel) { check_layer("conv2d_k5s1p2", {kFwd, kConvGrad, kConvGrad}); }
TEST(LayerVsTorch, Conv2dNoBias) { check_layer("conv2d_nobias", {kFwd, kConvGrad, kConvGrad}); }
TEST(LayerVsTorch, Conv2dGemmGroups) { check_layer("conv2d_groups", {kFwd, kConvGrad, kConvGrad}); }
TEST(LayerVsTorch, MaxPoolK2) { check_layer("maxpool2d_k2", {kExact, kExact, {}}); }
TEST(LayerVsTorch, MaxPoolK3S2P1) { check_layer("maxpool2d_k3s2p1", {kExact, kExact, {}}); }
TEST(LayerVsTorch, MaxPoolK2TiesFirstWins) { check_layer("maxpool2d_k2_ties", {kExact, kExact, {}}); }
TEST(LayerVsTorch, MaxPoolK3S2P1TiesFirstWins) { check_layer("maxpool2d_k3s2p1_ties", {kExact, kExact, {}}); }
TEST(LayerVsTorch, AvgPoolK2) { check_layer("avgpool2d_k2", {kExact, kExact, {}}); }
TEST(LayerVsTorch, AvgPoolK3S1P1CountIncludePad) { check_layer("avgpool2d_k3s1p1", {kExact, kExact, {}}); }
TEST(LayerVsTorch, LayerNormImage) { check_layer("layernorm", {kFwd, {2e-5, 2e-4}, {2e-5, 2e-4}}); }
TEST(LayerVsTorch, LayerNormVector) { check_layer("layernorm_vec", {kFwd, {2e-5, 2e-4}, {2e-5, 2e-4}}); }
TEST(LayerVsTorch, SoftmaxCrossEntropy) { check_layer("softmax_xent", {{1e-6, 1e-5}, {1e-7, 1e-5}, {}}); }
TEST(LayerVsTorch, SoftmaxCrossEntropyLargeLogits) {
  check_layer("softmax_xent_large", {{1e-6, 1e-5}, {1e-7, 1e-5}, {}});
}

// ---- sequence layers (references in float64: the tolerances are pipetrain's fp32 error) ----

namespace {

// Forward outputs and gradients of the sequence layers: sums of <= 4D products and
// softmaxes over <= 9 positions; rtol 1e-5 with an atol of 1e-6 (a few ulp of the O(1)
// values: elements that cancel to ~0 carry the rounding of their terms).
const Tol kSeq{1e-6, 1e-5};
// Parameter gradients through attention: dW sums n T products that cancel (an element of
// 0.0199 from terms of ~0.5); PyTorch's own float32 result sits at half of kSeq's limit
// there (0.47), so its atol is doubled.
const Tol kAttnGrad{2e-6, 1e-5};

}  // namespace

TEST(LayerVsTorch, LayerNormPerPosition) { check_layer("layernorm_seq", {kSeq, kSeq, kSeq}); }
TEST(LayerVsTorch, EmbeddingScatterAddsRepeatedTokens) { check_layer("embedding", {kSeq, kSeq, kSeq}); }
TEST(LayerVsTorch, AttentionCausalThreeHeads) { check_layer("attention", {kSeq, kSeq, kAttnGrad}); }
TEST(LayerVsTorch, AttentionCausalFourHeads) { check_layer("attention_h4", {kSeq, kSeq, kAttnGrad}); }
TEST(LayerVsTorch, TransformerBlock) { check_layer("transformer_block", {kSeq, kSeq, kAttnGrad}); }
TEST(LayerVsTorch, TransformerBlockMlpRatio2) { check_layer("transformer_block_r2", {kSeq, kSeq, kAttnGrad}); }
TEST(LayerVsTorch, LmHeadMeanTokenLoss) { check_layer("lm_head", {kSeq, kSeq, kSeq}); }
TEST(LayerVsTorch, LmHeadWithBias) { check_layer("lm_head_bias", {kSeq, kSeq, kSeq}); }
TEST(LayerVsTorch, GlobalAvgPool) { check_layer("global_avgpool", {kSeq, kSeq, {}}); }

// ---- batch statistics: batchnorm2d and residual_block ---------------------------------

namespace {

struct StatefulRun {
  std::vector<float> y, dx, dw, state, y_eval;
};

// Two training forwards (x0, then x: the running statistics follow both), the backward of
// the second, and an evaluation forward of x with the running statistics.
StatefulRun run_stateful(Backend& be, const Layer& L, const Fixture& fx, int64_t n) {
  const int64_t fi = L.in_shape().numel(), fo = L.out_shape().numel();
  const size_t np = static_cast<size_t>(L.num_params()), ns = static_cast<size_t>(L.num_state());
  std::vector<float> state0(ns);
  L.init_state(state0.data());
  Buffer x0 = on_backend(be, fx.floats("x0")), x = on_backend(be, fx.floats("x")), w = on_backend(be, fx.floats("params"));
  Buffer state = on_backend(be, state0), dw(be, np), dy = on_backend(be, fx.floats("dy"));
  Buffer y = filled(be, static_cast<size_t>(n * fo), kNaN), dx = filled(be, static_cast<size_t>(n * fi), kNaN);
  Buffer aux = filled(be, static_cast<size_t>(n * L.aux_per_sample()), kNaN);
  Buffer work = filled(be, static_cast<size_t>(std::max<int64_t>(1, n * L.workspace_per_sample())), kNaN);
  LayerCtx ctx{be};
  ctx.state = state.data();
  ctx.work = work.data();
  L.forward(ctx, w.data(), x0.data(), y.data(), aux.data(), n);
  L.forward(ctx, w.data(), x.data(), y.data(), aux.data(), n);
  StatefulRun r;
  r.y = to_host(be, y.data(), y.size());
  L.backward(ctx, w.data(), x.data(), y.data(), dy.data(), dx.data(), dw.data(), aux.data(), n);
  r.dx = to_host(be, dx.data(), dx.size());
  r.dw = to_host(be, dw.data(), np);
  r.state = to_host(be, state.data(), ns);
  ctx.training = false;
  L.forward(ctx, w.data(), x.data(), y.data(), aux.data(), n);
  r.y_eval = to_host(be, y.data(), y.size());
  return r;
}

void check_stateful(const std::string& name, Tol tol, Tol state_tol) {
  SCOPED_TRACE("fixture layer_" + name);
  Fixture fx("layer_" + name);
  const FixtureModel fm(fx);
  const Layer& L = fm.model.layer(0);
  ASSERT_EQ(L.type(), fx.s("type"));
  ASSERT_EQ(static_cast<int64_t>(fx.floats("params").size()), L.num_params());
  ASSERT_EQ(static_cast<int64_t>(fx.floats("state").size()), L.num_state());
  for (auto& tb : test_backends()) {
    const StatefulRun r = run_stateful(*tb.be, L, fx, fx.i("n"));
    EXPECT_TRUE(all_close(tb.tag + name + " y", r.y, fx.floats("y"), tol));
    EXPECT_TRUE(all_close(tb.tag + name + " dx", r.dx, fx.floats("dx"), tol));
    EXPECT_TRUE(all_close(tb.tag + name + " dparams", r.dw, fx.floats("dparams"), tol));
    EXPECT_TRUE(all_close(tb.tag + name + " running statistics", r.state, fx.floats("state"), state_tol));
    EXPECT_TRUE(all_close(tb.tag + name + " evaluation y", r.y_eval, fx.floats("y_eval"), tol));
  }
}

// Running statistics: two momentum updates of float32 state from double statistics.
const Tol kState{1e-7, 1e-6};

}  // namespace

TEST(LayerVsTorch, BatchNorm2dTwoTrainingForwardsThenEval) { check_stateful("batchnorm2d", kSeq, kState); }
TEST(LayerVsTorch, BatchNorm2dMomentum03Eps1e3) { check_stateful("batchnorm2d_m3", kSeq, kState); }
TEST(LayerVsTorch, ResidualBlockIdentityShortcut) { check_stateful("residual_block", kSeq, kState); }
TEST(LayerVsTorch, ResidualBlockProjectionShortcut) { check_stateful("residual_block_proj", kSeq, kState); }

// Flatten is a view: no buffer and no kernel; the stage aliases its output to its input
// and passes the gradient through. Checked through a one-layer stage.
TEST(LayerVsTorch, FlattenThroughStage) {
  Fixture fx("layer_flatten");
  const int64_t n = fx.i("n");
  const Shape in = fixture_shape(fx);
  const Deck deck = parse_deck_text(layer_deck(fx), "layer_flatten.toml", {});
  const Model model(deck, in, 2);
  ASSERT_TRUE(model.layer(0).is_view());
  ASSERT_EQ(model.layer(0).out_shape(), Shape::vec(in.numel()));
  for (auto& tb : test_backends()) {
    auto& be = tb.be;
    Stage st(*be, model, 0, 1, n, n);
    Buffer slot(*be, static_cast<size_t>(st.slot_floats()));
    Buffer params(*be, 1), grads(*be, 1);
    Stage::Slot s = st.carve(slot.data(), nullptr);
    const auto x = fx.floats("x");
    be->from_host(s.input, x.data(), x.size());
    LayerCtx ctx{*be};
    st.forward(s, params.data(), ctx, n, {});
    EXPECT_TRUE(all_close(tb.tag + "flatten y", to_host(*be, st.output(s), x.size()), fx.floats("y"), kExact));
    Buffer dy = on_backend(*be, fx.floats("dy"));
    Buffer dx = filled(*be, x.size(), kNaN);
    st.backward(s, params.data(), grads.data(), dy.data(), dx.data(), ctx, n, {});
    EXPECT_TRUE(all_close(tb.tag + "flatten dx", to_host(*be, dx.data(), x.size()), fx.floats("dx"), kExact));
  }
}

// ---- dropout: properties (PyTorch's RNG cannot be matched) ---------------------------

namespace {

struct DropoutModel {
  Deck deck;
  Model model;
  DropoutModel(double p, int64_t f)
      : deck(parse_deck_text("[data]\nsource = \"synthetic\"\nshape = [" + std::to_string(f) +
                                 "]\nclasses = 2\n[model]\n[[model.layers]]\ntype = \"dropout\"\np = " +
                                 std::to_string(p) +
                                 "\n[[model.layers]]\ntype = \"dropout\"\np = " + std::to_string(p) +
                                 "\n[[model.layers]]\ntype = \"linear\"\nout = 2\n"
                                 "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n",
                             "dropout.toml", {})),
        model(deck, Shape::vec(f), 2) {}
};

std::vector<float> dropout_fwd(Backend& be, const Layer& L, const std::vector<float>& x, int64_t n, uint64_t seed,
                               int64_t sample0, bool training) {
  Buffer xb = on_backend(be, x), yb = filled(be, x.size(), kNaN);
  LayerCtx ctx{be};
  ctx.seed = seed;
  ctx.sample0 = sample0;
  ctx.training = training;
  L.forward(ctx, nullptr, xb.data(), yb.data(), nullptr, n);
  return to_host(be, yb.data(), x.size());
}

std::vector<float> dropout_bwd(Backend& be, const Layer& L, const std::vector<float>& dy, int64_t n, uint64_t seed,
                               int64_t sample0) {
  Buffer dyb = on_backend(be, dy), dxb = filled(be, dy.size(), kNaN);
  LayerCtx ctx{be};
  ctx.seed = seed;
  ctx.sample0 = sample0;
  L.backward(ctx, nullptr, nullptr, nullptr, dyb.data(), dxb.data(), nullptr, nullptr, n);
  return to_host(be, dxb.data(), dy.size());
}

}  // namespace

TEST(DropoutProperties, KeepFractionScaleAndMask) {
  const double p = 0.3;
  const int64_t n = 8, f = 1000;
  DropoutModel dm(p, f);
  const Layer& L = dm.model.layer(0);
  for (auto& tb : test_backends()) {
    auto& be = tb.be;
    SCOPED_TRACE(tb.tag);
    Rand rnd(1);
    const auto x = rnd.vec(static_cast<size_t>(n * f), 0.5f, 2.0f);  // nonzero: a zero output means dropped
    const auto dy = rnd.vec(x.size(), -1.0f, 1.0f);
    const auto y = dropout_fwd(*be, L, x, n, 42, 100, true);
    const auto dx = dropout_bwd(*be, L, dy, n, 42, 100);
    const float scale = 1.0f / (1.0f - static_cast<float>(p));
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_TRUE(std::isfinite(y[i]) && std::isfinite(dx[i])) << i;
      if (y[i] != 0.0f) {
        ++kept;
        ASSERT_NEAR(y[i], x[i] * scale, 1e-6 * std::fabs(x[i] * scale)) << "kept value not scaled by 1/(1-p) at " << i;
        ASSERT_NEAR(dx[i], dy[i] * scale, 1e-6 * std::fabs(dy[i] * scale) + 1e-12) << "backward mask differs at " << i;
      } else {
        ASSERT_EQ(dx[i], 0.0f) << "backward passes a gradient where forward dropped, at " << i;
      }
    }
    // 8000 Bernoulli(0.7) draws: sd 0.0051; 4 sd
    const double frac = static_cast<double>(kept) / static_cast<double>(x.size());
    EXPECT_NEAR(frac, 1.0 - p, 0.02);
    // each sample row gets its own mask
    std::set<std::vector<bool>> rows;
    for (int64_t s = 0; s < n; ++s) {
      std::vector<bool> m(static_cast<size_t>(f));
      for (int64_t j = 0; j < f; ++j) m[static_cast<size_t>(j)] = y[static_cast<size_t>(s * f + j)] != 0.0f;
      rows.insert(m);
    }
    EXPECT_EQ(rows.size(), static_cast<size_t>(n));
  }
}

TEST(DropoutProperties, MaskDependsOnlyOnSeedLayerAndGlobalSample) {
  const int64_t n = 6, f = 257;
  DropoutModel dm(0.5, f);
  std::vector<bool> first_backend;
  for (auto& tb : test_backends()) {
    auto& be = tb.be;
    SCOPED_TRACE(tb.tag);
    Rand rnd(2);
    const auto x = rnd.vec(static_cast<size_t>(n * f), 0.5f, 2.0f);
    const auto mask = [&](const std::vector<float>& y) {
      std::vector<bool> m(y.size());
      for (size_t i = 0; i < y.size(); ++i) m[i] = y[i] != 0.0f;
      return m;
    };
    const Layer& L0 = dm.model.layer(0);
    const auto full = mask(dropout_fwd(*be, L0, x, n, 9, 40, true));  // samples 40..45
    // the same mask on every backend (counter-based keys)
    if (first_backend.empty()) first_backend = full;
    EXPECT_EQ(full, first_backend);
    // samples 43..45 alone (sample0 = 43): the same masks at a different batch position
    std::vector<float> tail(x.begin() + 3 * f, x.end());
    const auto part = mask(dropout_fwd(*be, L0, tail, n - 3, 9, 43, true));
    EXPECT_TRUE(std::equal(part.begin(), part.end(), full.begin() + 3 * f));
    // sample 45 as the first of a one-sample batch
    std::vector<float> last(x.end() - f, x.end());
    const auto one = mask(dropout_fwd(*be, L0, last, 1, 9, 45, true));
    EXPECT_TRUE(std::equal(one.begin(), one.end(), full.end() - f));
    // the mask does not depend on the values
    auto x2 = x;
    for (auto& v : x2) v = 3.0f - v;
    EXPECT_EQ(mask(dropout_fwd(*be, L0, x2, n, 9, 40, true)), full);
    // ... but does depend on the seed, the layer index and the sample offset
    EXPECT_NE(mask(dropout_fwd(*be, L0, x, n, 10, 40, true)), full);
    EXPECT_NE(mask(dropout_fwd(*be, dm.model.layer(1), x, n, 9, 40, true)), full);
    EXPECT_NE(mask(dropout_fwd(*be, L0, x, n, 9, 41, true)), full);
    // backward of a shifted chunk uses the same mask as its forward
    const auto dx = dropout_bwd(*be, L0, tail, n - 3, 9, 43);
    EXPECT_EQ(mask(dx), part);
  }
}

TEST(DropoutProperties, EvaluationAndZeroPAreIdentity) {
  const int64_t n = 4, f = 100;
  for (auto& tb : test_backends()) {
    auto& be = tb.be;
    SCOPED_TRACE(tb.tag);
    Rand rnd(3);
    const auto x = rnd.vec(static_cast<size_t>(n * f), -2.0f, 2.0f);
    DropoutModel dm(0.5, f);
    EXPECT_EQ(dropout_fwd(*be, dm.model.layer(0), x, n, 1, 0, false), x);
    DropoutModel d0(0.0, f);
    EXPECT_EQ(dropout_fwd(*be, d0.model.layer(0), x, n, 1, 0, true), x);
    EXPECT_EQ(dropout_bwd(*be, d0.model.layer(0), x, n, 1, 0), x);
  }
}

}  // namespace pt::test
