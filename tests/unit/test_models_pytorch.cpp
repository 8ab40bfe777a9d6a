// Whole models against PyTorch 1.13: the MLP of input/fashion_mlp.toml and the CNN of
// input/fashion_cnn.toml, built from the deck files themselves (pt::parse_deck_text +
// pt::Model + a one-stage pt::Stage on the host backend), on a batch of 16 random
// 28x28 inputs with random labels. One training step: the mean cross-entropy loss, then
// the weights after exactly one optimizer step (SGD momentum 0.9 lr 0.05; AdamW;
// SGD Nesterov + weight decay), compared with torch.optim's.
//
// Storage (tests/fixtures/README.md): the initial weights are generated on both sides by
// fixture_uniform() and checked against the fixture's per-tensor checksums; the reference
// updates w1 - w0 are stored per element for every weight of the SGD-momentum step
// (float16 of delta / max|delta| for tensors over 6144 elements, float32 otherwise), and
// for the AdamW and Nesterov steps on every element of the small tensors plus 6144
// sampled elements of each large one, with sum|delta| and sum delta^2 of every tensor.
#include <gtest/gtest.h>

#include "fixture_util.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/stage.hpp"

namespace pt::test {
namespace {

struct TensorAt {
  int layer;
  ParamTensor p;
  int64_t offset;  // in the stage's flat buffer
  double bound;    // PyTorch's default init bound, 1/sqrt(fan_in)
};

// Per element: |got - ref| <= atol + rtol |ref| with atol = 1e-4 max|ref| of the tensor
// + 2 ulp of its largest weight (w1 is rounded to float on both sides), rtol 2e-3 for
// float16 references (storage error 2^-11 relative) and 1e-3 for float32 ones. Tensor
// checksums sum|delta|, sum delta^2: relative 1e-4. Loss: 1e-6 + 1e-5 |loss|.
constexpr double kAtolOfMax = 1e-4, kRtolF16 = 2e-3, kRtolF32 = 1e-3, kMomentRtol = 1e-4;

void check_model(Backend& backend, const std::string& tag, const std::string& name, const std::string& deck_file) {
  SCOPED_TRACE(tag + "fixture model_" + name);
  Fixture fx("model_" + name);
  const int64_t n = fx.i("n"), tensors = fx.i("tensors");
  const uint64_t seed = static_cast<uint64_t>(fx.i("seed"));
  const auto x = fx.floats("x");
  const auto labels = fx.ints("labels");
  const std::string deck_path = fixtures_dir() + "/../../" + deck_file;
  const std::string text = read_text(deck_path);
  ASSERT_EQ(static_cast<int64_t>(x.size()), n * 28 * 28);
  std::stringstream optims(fx.s("optims"));
  int checked_optims = 0;
  for (std::string oname; std::getline(optims, oname, ',');) {
    SCOPED_TRACE("optimizer step " + oname);
    auto sets = sets_from(fx, oname + ".");
    sets.push_back("train.lr_schedule=\"constant\"");
    sets.push_back("train.warmup_steps=0");
    const Deck deck = parse_deck_text(text, deck_path, sets);
    const Model model(deck, Shape::chw(1, 28, 28), 10);

    // the parameter layout must be the one the fixture was made for
    std::vector<TensorAt> ts;
    Backend* be = &backend;
    Stage st(*be, model, 0, model.size(), n, n);
    for (int l = 0; l < model.size(); ++l) {
      double fan_in = 0;
      for (const auto& p : model.layer(l).params()) {
        if (p.name == "weight") {
          fan_in = 1;
          for (size_t k = 1; k < p.shape.size(); ++k) fan_in *= static_cast<double>(p.shape[k]);
        }
        ts.push_back({l, p, st.param_offset(l) + p.offset, 1.0 / std::sqrt(fan_in)});
      }
    }
    ASSERT_EQ(static_cast<int64_t>(ts.size()), tensors) << deck_file << " no longer matches the fixture";
    std::vector<float> w0(static_cast<size_t>(st.num_params()));
    for (size_t t = 0; t < ts.size(); ++t) {
      const std::string k = "w0." + std::to_string(t);
      ASSERT_EQ(fx.i(k + ".layer"), ts[t].layer) << "tensor " << t;
      ASSERT_EQ(fx.ints("w0/" + std::to_string(t) + "/shape"), ts[t].p.shape) << "tensor " << t;
      const auto v = fixture_uniform(seed, t, static_cast<size_t>(ts[t].p.size), ts[t].bound);
      double sum = 0, sumsq = 0, sumabs = 0;
      for (float e : v) sum += e, sumsq += double(e) * e, sumabs += std::fabs(e);
      ASSERT_NEAR(sum, fx.d(k + ".sum"), 1e-12 * sumabs) << "initial weights generator differs from the fixture's";
      ASSERT_NEAR(sumsq, fx.d(k + ".sumsq"), 1e-12 * sumsq);
      std::copy(v.begin(), v.end(), w0.begin() + ts[t].offset);
    }

    // one training step
    Buffer slot(*be, static_cast<size_t>(st.slot_floats())), params = on_backend(*be, w0),
        grads(*be, w0.size());
    Labels lab(*be, labels);
    Stage::Slot s = st.carve(slot.data(), lab.p);
    be->from_host(s.input, x.data(), x.size());
    LayerCtx ctx{*be};
    ctx.seed = static_cast<uint64_t>(deck.run.seed);
    ctx.sample0 = 0;
    ctx.training = true;
    ctx.labels = lab.p;
    ctx.loss_scale = 1.0f / static_cast<float>(n);
    st.forward(s, params.data(), ctx, n, {});
    const auto losses = to_host(*be, st.output(s), static_cast<size_t>(n));
    double loss = 0;
    for (float v : losses) loss += v;
    loss /= static_cast<double>(n);
    const double loss_ref = fx.d("loss");
    note_ratio(tag + name + " " + oname + " loss", {std::fabs(loss - loss_ref) / (1e-6 + 1e-5 * loss_ref), 0, loss, loss_ref});
    EXPECT_NEAR(loss, loss_ref, 1e-6 + 1e-5 * loss_ref);
    st.backward(s, params.data(), grads.data(), nullptr, nullptr, ctx, n, {});
    Optimizer opt(optim_config(deck.train), *be, w0.size(), 1);
    opt.step(params.data(), grads.data(), 1.0f);
    const auto w1 = to_host(*be, params.data(), w0.size());

    for (size_t t = 0; t < ts.size(); ++t) {
      const std::string ttag = tag + name + " " + oname + " layer " + std::to_string(ts[t].layer) + " " + ts[t].p.name;
      const std::string base = oname + "/" + std::to_string(t), ab = oname + "." + std::to_string(t);
      const size_t off = static_cast<size_t>(ts[t].offset), size = static_cast<size_t>(ts[t].p.size);
      std::vector<double> delta(size);
      double wmax = 0, abssum = 0, sqsum = 0;
      for (size_t i = 0; i < size; ++i) {
        delta[i] = double(w1[off + i]) - double(w0[off + i]);
        wmax = std::max(wmax, std::fabs(double(w0[off + i])));
        abssum += std::fabs(delta[i]);
        sqsum += delta[i] * delta[i];
      }
      const double absmax = fx.d(ab + ".absmax");
      ASSERT_GT(absmax, 0.0) << ttag << ": the reference step does not move this tensor";
      const double atol = kAtolOfMax * absmax + 2.4e-7 * (wmax + absmax);
      std::vector<double> got, want;
      double rtol = kRtolF32;
      std::string how;
      if (fx.has(base + "/delta_f16")) {
        const auto q = fx.floats(base + "/delta_f16");
        ASSERT_EQ(q.size(), size);
        for (size_t i = 0; i < size; ++i) want.push_back(double(q[i]) * absmax);
        got = delta;
        rtol = kRtolF16;
        how = " (all, f16 ref)";
      } else if (fx.has(base + "/index")) {
        const auto idx = fx.ints(base + "/index");
        const auto ref = fx.floats(base + "/delta");
        ASSERT_EQ(idx.size(), ref.size());
        for (size_t k = 0; k < idx.size(); ++k) {
          ASSERT_LT(static_cast<size_t>(idx[k]), size);
          got.push_back(delta[static_cast<size_t>(idx[k])]);
          want.push_back(ref[k]);
        }
        how = " (" + std::to_string(idx.size()) + " sampled of " + std::to_string(size) + ")";
      } else {
        const auto ref = fx.floats(base + "/delta");
        ASSERT_EQ(ref.size(), size);
        want.assign(ref.begin(), ref.end());
        got = delta;
        how = " (all)";
      }
      EXPECT_TRUE(all_close(ttag + " w1-w0" + how, got, want, {atol, rtol}));
      const Worst ms = worst_of(std::vector<double>{abssum, sqsum},
                                std::vector<double>{fx.d(ab + ".abssum"), fx.d(ab + ".sqsum")}, {0.0, kMomentRtol});
      note_ratio(ttag + " sum|d|, sum d^2", ms);
      EXPECT_LE(ms.ratio, 1.0) << ttag << ": sum|w1-w0| " << abssum << " vs " << fx.d(ab + ".abssum") << ", sum (w1-w0)^2 "
                               << sqsum << " vs " << fx.d(ab + ".sqsum");
    }
    ++checked_optims;
  }
  EXPECT_GE(checked_optims, 2);
}

}  // namespace

TEST(ModelVsTorch, FashionMlpOneStep) {
  for (auto& tb : test_backends()) check_model(*tb.be, tb.tag, "mlp", "input/fashion_mlp.toml");
}
TEST(ModelVsTorch, FashionCnnOneStep) {
  for (auto& tb : test_backends()) check_model(*tb.be, tb.tag, "cnn", "input/fashion_cnn.toml");
}

}  // namespace pt::test
