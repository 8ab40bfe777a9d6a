// bf16 against PyTorch 1.13's bfloat16 autocast (tests/fixtures/bf16_*.h5, written by
// tools/make_bf16_fixtures.py; docs/PRECISION.md, "Agreement with PyTorch autocast"): every
// layer with a matrix kernel (linear, conv2d, attention, transformer_block, lm_head,
// residual_block) run alone on the host backend with LayerCtx::precision = bf16, and the
// embedding, a small MLP and a small CNN run through a Stage with precision bf16 as
// train.precision = "bf16" runs them. Forward output, input
// gradient and parameter gradients are compared per element with the first-order error bound
// the fixture carries (derived from where each side rounds to bf16; see the generator's
// docstring):
//   |pipetrain - autocast| <= (1 + 1/16) (B_pt + B_ac) + 2 b32      (the agreement)
//   |pipetrain - reference| <= (1 + 1/16) B_pt + b32                 (pipetrain rounds where and only where documented)
// and normwise (max |difference| / max |float64 result|):
//   e(pipetrain, autocast) <= 2 e(autocast, float64)   (pipetrain rounds at a subset of autocast's
//                                                       places, so it is no farther from the exact result)
//   e(pipetrain bf16, pipetrain fp32) > 64 e(pipetrain fp32, float64)   (bf16 is really on)
// and the fp32 path within its own bound, |pipetrain fp32 - float64| <= b32. Host backend only:
// on the GPU cuDNN also rounds convolution outputs (docs/PRECISION.md, "GPU difference").
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "fixture_util.hpp"
#include "pipetrain/layers.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/stage.hpp"

namespace pt::test {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

// The normwise multiple of autocast's own error allowed to pipetrain's distance from autocast.
constexpr double kMultiple = 2.0;
// bf16 is on: pipetrain's bf16 result is this many times farther (normwise) from its fp32 result
// than the fp32 result is from the exact one. bf16 rounding moves a result by ~u = 4e-3 of its
// scale, float32 by ~1e-7; 64 leaves a wide margin both ways (measured: docs/PRECISION.md).
constexpr double kBf16Visible = 64.0;

Shape fixture_shape(const Fixture& fx) {
  if (fx.i("rank") == 3) return Shape::chw(fx.i("c"), fx.i("h"), fx.i("w"));
  if (fx.i("rank") == 2) return Shape::seq(fx.i("c"), fx.i("h"));
  return fx.has_attr("tokens") && fx.i("tokens") ? Shape::tokens(fx.i("c")) : Shape::vec(fx.i("c"));
}

struct Run {
  std::vector<float> y, dx, dw;
};

// One layer alone, one batch: forward, then backward with the fixture's dy (a loss layer
// ignores dy and uses loss_scale). Running state (batch norm) starts at its initial values.
Run run_layer(Backend& be, const Layer& L, const Fixture& fx, int64_t n, Precision p) {
  const int64_t fi = L.in_shape().numel(), fo = L.out_shape().numel();
  const size_t np = static_cast<size_t>(L.num_params());
  Buffer x = on_backend(be, fx.floats("x")), w = on_backend(be, fx.floats("params")), dw(be, np);
  Buffer y = filled(be, static_cast<size_t>(n * fo), kNaN), dx = filled(be, static_cast<size_t>(n * fi), kNaN);
  Buffer aux = filled(be, static_cast<size_t>(std::max<int64_t>(1, n * L.aux_per_sample())), kNaN);
  Buffer work = filled(be, static_cast<size_t>(std::max<int64_t>(1, n * L.workspace_per_sample())), kNaN);
  Buffer dy = L.is_loss() ? filled(be, static_cast<size_t>(n * fo), kNaN) : on_backend(be, fx.floats("dy"));
  std::vector<float> state0(static_cast<size_t>(L.num_state()));
  L.init_state(state0.data());
  Buffer state = on_backend(be, state0);
  std::unique_ptr<Labels> labels;
  if (L.is_loss()) labels = std::make_unique<Labels>(be, fx.ints("labels"));
  LayerCtx ctx{be};
  ctx.precision = p;
  ctx.training = true;
  ctx.labels = labels ? labels->p : nullptr;
  ctx.loss_scale = L.is_loss() ? static_cast<float>(fx.d("loss_scale")) : 1.0f;
  ctx.state = L.num_state() ? state.data() : nullptr;
  ctx.work = work.data();
  L.forward(ctx, w.data(), x.data(), y.data(), aux.data(), n);
  L.backward(ctx, w.data(), x.data(), y.data(), dy.data(), dx.data(), dw.data(), aux.data(), n);
  return {to_host(be, y.data(), y.size()), to_host(be, dx.data(), dx.size()), to_host(be, dw.data(), np)};
}

// Elements that are not bf16 values (bf16_round changes them).
size_t not_bf16(const std::vector<float>& v) {
  size_t bad = 0;
  for (float e : v) bad += bf16_round(e) != e;
  return bad;
}

// Layers [0, last) through a Stage, as training runs them: with bf16 activations when asked
// (then every layer output but the loss's, and the input gradient, must hold bf16 values).
// A stage ending in the loss takes no dy; token inputs get no dx.
Run run_stage(Backend& be, const Model& model, int last, const Fixture& fx, int64_t n, bool bf16_activations) {
  Stage st(be, model, 0, last, n, n, false, Recompute::none, bf16_activations ? Precision::bf16 : Precision::fp32);
  const size_t np = static_cast<size_t>(st.num_params());
  Buffer slot(be, static_cast<size_t>(st.slot_floats())), params = on_backend(be, fx.floats("params")), grads(be, np);
  std::unique_ptr<Labels> labels;
  if (st.has_loss()) labels = std::make_unique<Labels>(be, fx.ints("labels"));
  Stage::Slot s = st.carve(slot.data(), labels ? labels->p : nullptr);
  const auto x = fx.floats("x");
  be.from_host(s.input, x.data(), x.size());
  LayerCtx ctx{be};
  ctx.training = true;
  ctx.labels = labels ? labels->p : nullptr;
  ctx.loss_scale = st.has_loss() ? static_cast<float>(fx.d("loss_scale")) : 1.0f;
  st.forward(s, params.data(), ctx, n, {});
  for (int l = 0; l < last && bf16_activations; ++l) {
    const Layer& L = model.layer(l);
    if (L.is_view() || L.is_loss()) continue;
    EXPECT_EQ(0u, not_bf16(to_host(be, s.out[static_cast<size_t>(l)], static_cast<size_t>(n * L.out_shape().numel()))))
        << "layer " << l << " (" << L.type() << ") output not rounded to bf16 by the Stage";
  }
  Run r;
  r.y = to_host(be, st.output(s), static_cast<size_t>(n * st.out_shape().numel()));
  Buffer dy = st.has_loss() ? Buffer() : on_backend(be, fx.floats("dy"));
  const bool want_dx = !st.in_shape().is_tokens;
  Buffer dx = want_dx ? filled(be, x.size(), kNaN) : Buffer();
  st.backward(s, params.data(), grads.data(), st.has_loss() ? nullptr : dy.data(), want_dx ? dx.data() : nullptr, ctx,
              n, {});
  if (want_dx) {
    r.dx = to_host(be, dx.data(), x.size());
    if (bf16_activations) {
      EXPECT_EQ(0u, not_bf16(r.dx)) << "input gradient not rounded to bf16 by the Stage";
    }
  } else {
    r.dx.assign(x.size(), 0.0f);  // the fixture's dx of token ids: zeros
  }
  r.dw = to_host(be, grads.data(), np);
  return r;
}

double max_abs_d(const std::vector<float>& v) {
  double m = 0;
  for (float e : v) m = std::max(m, std::fabs(static_cast<double>(e)));
  return m;
}

// max |a - b| / scale (a NaN counts as infinitely far)
double normwise(const std::vector<float>& a, const std::vector<float>& b, double scale) {
  if (a.size() != b.size()) return INFINITY;
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
    if (!std::isfinite(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m / std::max(scale, 1e-300);
}

// Worst |got - want_i| / tol_i; a NaN, or a difference where the tolerance is 0, counts as infinite.
Worst worst_per_element(const std::vector<float>& got, const std::vector<float>& want, const std::vector<double>& tol) {
  Worst w;
  if (got.size() != want.size() || got.size() != tol.size()) {
    w.ratio = INFINITY;
    return w;
  }
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i]));
    double q = d == 0 ? 0 : d / tol[i];
    if (!std::isfinite(d) || std::isnan(q)) q = INFINITY;
    if (q > w.ratio) w = {q, i, got[i], want[i]};
  }
  return w;
}

// What a case checks beyond the per-element bounds.
struct Expect {
  // pipetrain rounds at a subset of autocast's places for this quantity (else, e.g. the
  // embedding that autocast keeps in float32, the normwise multiple does not apply)
  bool subset = true;
  // pipetrain's bf16 result differs from its fp32 one (false where bf16 changes no operation
  // of this quantity by design)
  bool differs = true;
};

void check_quantity(const Fixture& fx, const std::string& tag, const std::string& q, const std::vector<float>& pt16,
                    const std::vector<float>& pt32, const Expect& ex) {
  SCOPED_TRACE(tag + " " + q);
  const auto ac = fx.floats(q), f64 = fx.floats(q + "_f64"), ref = fx.floats(q + "_ref");
  const auto bac = fx.floats(q + "_bac"), bpt = fx.floats(q + "_bpt"), b32 = fx.floats(q + "_b32");
  const double so = fx.d("second_order");
  ASSERT_EQ(pt16.size(), ac.size()) << "pipetrain's " << q << " has another size than the fixture's";
  std::vector<double> agree(ac.size()), model(ac.size()), fp32(ac.size());
  for (size_t i = 0; i < ac.size(); ++i) {
    agree[i] = so * (double(bpt[i]) + double(bac[i])) + 2.0 * double(b32[i]);
    model[i] = so * double(bpt[i]) + double(b32[i]);
    fp32[i] = double(b32[i]);
  }
  const Worst wa = worst_per_element(pt16, ac, agree);
  const Worst wm = worst_per_element(pt16, ref, model);
  const Worst w32 = worst_per_element(pt32, f64, fp32);
  const double scale = max_abs_d(f64);
  const double e_pa = normwise(pt16, ac, scale), e_af = normwise(ac, f64, scale), e_pf = normwise(pt16, f64, scale);
  // bf16 on: the bf16 result's normwise distance from the fp32 one against the fp32 one's own
  // measured error (floored at 2^-20, should float32 happen to be exact)
  const double diff32 = normwise(pt16, pt32, scale), e32 = std::max(normwise(pt32, f64, scale), std::ldexp(1.0, -20));
  note_ratio(tag + " " + q + " |pt-ac| / bound", wa);
  note_ratio(tag + " " + q + " |pt-ref| / B_pt", wm);
  note_ratio(tag + " " + q + " fp32 |pt-f64| / b32", w32);
  if (std::getenv("PT_PRINT_RATIOS"))
    std::printf("[bf16] %-20s %-7s e(pt,ac) %.2e  e(ac,f64) %.2e  e(pt,f64) %.2e  e(pt,pt32) %.2e  e(pt32,f64) %.2e\n",
                tag.c_str(), q.c_str(), e_pa, e_af, e_pf, diff32, normwise(pt32, f64, scale));
  EXPECT_LE(wa.ratio, 1.0) << "pipetrain outside the bound of autocast at " << wa.at << ": got " << wa.got
                           << ", autocast " << wa.want << " (tolerance " << agree[std::min(wa.at, agree.size() - 1)] << ")";
  EXPECT_LE(wm.ratio, 1.0) << "pipetrain's bf16 result outside its own rounding model at " << wm.at << ": got " << wm.got
                           << ", reference " << wm.want;
  EXPECT_LE(w32.ratio, 1.0) << "pipetrain's fp32 result outside the float32 bound at " << w32.at << ": got " << w32.got
                            << ", float64 " << w32.want;
  if (ex.subset) {
    EXPECT_LE(e_pa, kMultiple * e_af) << "normwise |pipetrain - autocast| " << e_pa << " exceeds " << kMultiple
                                      << " x |autocast - float64| = " << kMultiple * e_af;
  }
  if (ex.differs) {
    EXPECT_GT(diff32, kBf16Visible * e32) << "pipetrain's bf16 " << q << " is as close to its fp32 " << q
                                          << " as float32 is to the exact result: is bf16 on?";
  } else {
    EXPECT_EQ(pt16, pt32) << "bf16 changed a quantity that it should not touch";
  }
}

struct CaseExpect {
  Expect y, dx, dw;
};

void check_case(const std::string& name, const CaseExpect& ex) {
  const std::string fname = "bf16_" + name;
  SCOPED_TRACE("fixture " + fname);
  Fixture fx(fname);
  const int64_t n = fx.i("n");
  const Deck deck = parse_deck_text(fx.s("deck"), fx.path() + ".toml", {});
  const int64_t classes = fx.has_attr("classes") ? fx.i("classes") : 2;
  const Model model(deck, fixture_shape(fx), classes);
  const std::string type = fx.s("type");
  const bool stage = fx.has_attr("stage") && fx.i("stage");
  // a chain runs whole; a layer fixture's layer is layer 0 of its deck
  const int last = type == "chain" ? model.size() : 1;
  if (type != "chain") {
    ASSERT_EQ(model.layer(0).type(), type);
  }
  int64_t np = 0;
  for (int l = 0; l < last; ++l) np += model.layer(l).num_params();
  ASSERT_EQ(static_cast<int64_t>(fx.floats("params").size()), np) << "the deck's parameters no longer match the fixture";
  auto be = make_host_backend();
  const auto run = [&](Precision p) {
    return stage ? run_stage(*be, model, last, fx, n, p == Precision::bf16) : run_layer(*be, model.layer(0), fx, n, p);
  };
  const Run r16 = run(Precision::bf16), r32 = run(Precision::fp32);
  check_quantity(fx, name, "y", r16.y, r32.y, ex.y);
  if (!fixture_shape(fx).is_tokens) check_quantity(fx, name, "dx", r16.dx, r32.dx, ex.dx);
  check_quantity(fx, name, "dparams", r16.dw, r32.dw, ex.dw);
}

const CaseExpect kAll{};

}  // namespace

// Linear: both round x and W identically; autocast also rounds the bias, y, dx, dW and db
// (it returns bf16 tensors), pipetrain adds the bias in fp32 and sums db from the unrounded
// dy (its GEMMs round dy). Bound: u (|y| + |b|) on y, u |dx| on dx, u |dW| on dW, u (|db| +
// sum |dy|) on db, plus the float32 term.
TEST(Bf16VsAutocast, Linear) { check_case("linear", kAll); }
// Convolution: as linear; pipetrain's db is the sum of the rounded dy, as autocast's.
TEST(Bf16VsAutocast, Conv2d) { check_case("conv2d", kAll); }
TEST(Bf16VsAutocast, Conv2dStride2NoBias) { check_case("conv2d_s2_nobias", kAll); }
// Attention: autocast also rounds q, k, v, the scores, the probabilities and the head
// outputs (and their gradients); pipetrain rounds only the inputs of its GEMMs and keeps the
// scores and the softmax in fp32. The bound propagates each rounding through the softmax.
TEST(Bf16VsAutocast, AttentionCausal) { check_case("attention", kAll); }
// Transformer block: the attention's roundings, autocast's bf16 fc1 output and GELU (of
// bf16, returning bf16); layer norms, residual sums fp32 on both sides.
TEST(Bf16VsAutocast, TransformerBlock) { check_case("transformer_block", kAll); }
// lm_head: layer norm fp32; autocast's logits bf16 (cross entropy casts them to fp32) and the
// logit gradient rounded; pipetrain keeps the logits fp32 and rounds their gradient for its
// GEMMs.
TEST(Bf16VsAutocast, LmHead) { check_case("lm_head", kAll); }
// residual_block: autocast rounds every conv and batch-norm output (and their gradients) and,
// with the projection, the residual sum and hence dy; pipetrain rounds the conv inputs and
// the conv output gradients for its conv kernels. The batch-norm shifts keep every relu
// input farther from its kink than the bound.
TEST(Bf16VsAutocast, ResidualBlockIdentity) { check_case("residual_block", kAll); }
TEST(Bf16VsAutocast, ResidualBlockProjection) { check_case("residual_block_proj", kAll); }
// Embedding through a one-layer Stage: autocast keeps embedding in float32 (not on its list),
// the Stage rounds the output (u |y|): pipetrain rounds where autocast does not, so the
// normwise multiple does not apply to y; dparams are the float32 scatter-add of the
// unrounded incoming dy on both sides (the Stage rounds input gradients, not its dy), the
// same in bf16 and fp32.
TEST(Bf16VsAutocast, EmbeddingThroughStage) {
  CaseExpect ex;
  ex.y.subset = false;
  ex.dw.subset = false;
  ex.dw.differs = false;
  check_case("embedding", ex);
}
// The chains: every layer output and input gradient rounded on both sides (autocast's
// linear/conv return bf16, relu and pooling of bf16 are exact, the gradients are bf16), the
// loss in fp32 on both. Biases are placed so that no relu input, and no pooling maximum,
// is within the bound of a kink or a tie.
TEST(Bf16VsAutocast, MlpChainThroughStage) { check_case("mlp", kAll); }
TEST(Bf16VsAutocast, CnnChainThroughStage) { check_case("cnn", kAll); }

}  // namespace pt::test
