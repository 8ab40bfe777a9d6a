// Optimizers against torch.optim (PyTorch 1.13): SGD (plain, momentum, Nesterov, weight
// decay, a step schedule) and AdamW (plain; warm-up + cosine) over 5 steps of random
// gradients on a random vector, including grad_scale and the optimizer state. Learning-rate
// schedules against the documented rules, written out by tools/make_fixtures.py as an
// explicit Python formula that it cross-checks with torch.optim.lr_scheduler. State names
// match the state buffers (none on a stage without parameters).
#include <gtest/gtest.h>

#include "fixture_util.hpp"
#include "pipetrain/optim.hpp"

namespace pt::test {
namespace {

// Weights are N(0, 1); float32 updates differ from PyTorch's by a few ulps per step.
// The optimizer state gets the same few-ulp tolerance: AdamW forms 1 - beta, 1 - lr*wd and
// the bias corrections in double, as PyTorch does with Python floats (forming 1 - beta2 in
// float instead gave 9.99987e-4 for 0.999 and exp_avg_sq 1.3e-5 relative off).
const Tol kWeights{1e-6, 1e-5};
const Tol kState{1e-7, 1e-5};

void check_optimizer(Backend& backend, const std::string& tag, const std::string& name) {
  SCOPED_TRACE(tag + "fixture optim_" + name);
  Fixture fx("optim_" + name);
  const OptimConfig cfg = train_settings(sets_from(fx));
  const auto w0 = fx.floats("w0"), grads = fx.floats("grads"), wref = fx.floats("w");
  const auto lrs = fx.doubles("lr");
  const size_t n = w0.size();
  const int64_t steps = fx.i("total");
  ASSERT_EQ(grads.size(), n * static_cast<size_t>(steps));
  ASSERT_EQ(wref.size(), n * static_cast<size_t>(steps));
  const float grad_scale = static_cast<float>(fx.d("grad_scale"));
  Backend* be = &backend;
  Optimizer opt(cfg, *be, n, steps);
  Buffer w = on_backend(*be, w0), g(*be, n);
  for (int64_t t = 0; t < steps; ++t) {
    EXPECT_NEAR(opt.current_lr(), lrs[static_cast<size_t>(t)], 1e-12 * lrs[static_cast<size_t>(t)]) << "step " << t;
    be->from_host(g.data(), grads.data() + t * n, n);
    opt.step(w.data(), g.data(), grad_scale);
    const std::vector<float> want(wref.begin() + t * n, wref.begin() + (t + 1) * n);
    EXPECT_TRUE(all_close(name + " w after step " + std::to_string(t + 1), to_host(*be, w.data(), n), want, kWeights));
  }
  EXPECT_EQ(opt.updates(), steps);
  auto state = opt.state();
  for (size_t k = 0; k < 2; ++k) {
    const std::string ds = "state" + std::to_string(k);
    if (!fx.has(ds)) {
      EXPECT_LE(state.size(), k) << name << ": pipetrain keeps state PyTorch does not";
      continue;
    }
    ASSERT_GT(state.size(), k) << name << ": no optimizer state " << ds;
    EXPECT_TRUE(all_close(tag + name + " " + opt.state_names()[k], to_host(*be, state[k]->data(), n), fx.floats(ds), kState));
  }
}

}  // namespace

TEST(OptimVsTorch, SgdPlain) {
  for (auto& tb : test_backends()) check_optimizer(*tb.be, tb.tag, "sgd_plain");
}
TEST(OptimVsTorch, SgdMomentum) {
  for (auto& tb : test_backends()) check_optimizer(*tb.be, tb.tag, "sgd_momentum");
}
TEST(OptimVsTorch, SgdNesterovWeightDecayGradScale) {
  for (auto& tb : test_backends()) check_optimizer(*tb.be, tb.tag, "sgd_nesterov_wd");
}
TEST(OptimVsTorch, SgdWeightDecayStepSchedule) {
  for (auto& tb : test_backends()) check_optimizer(*tb.be, tb.tag, "sgd_wd_step");
}
TEST(OptimVsTorch, AdamW) {
  for (auto& tb : test_backends()) check_optimizer(*tb.be, tb.tag, "adamw");
}
TEST(OptimVsTorch, AdamWWarmupCosineGradScale) {
  for (auto& tb : test_backends()) check_optimizer(*tb.be, tb.tag, "adamw_warmup_cosine");
}

// A stage without parameters (n = 0) holds no optimizer state, and names none: checkpoints
// list exactly the buffers they write (a resume of AdamW with such a stage read "exp_avg").
TEST(Optim, NamesExactlyTheStateItHolds) {
  for (auto& tb : test_backends())
    for (const char* kind : {"sgd", "adamw"})
      for (size_t n : {size_t{0}, size_t{3}}) {
        OptimConfig cfg;
        cfg.optimizer = find_optimizer(kind);
        cfg.momentum = 0.9;
        Optimizer opt(cfg, *tb.be, n, 10);
        EXPECT_EQ(opt.state_names().size(), opt.state().size()) << tb.tag << kind << " n = " << n;
        EXPECT_EQ(opt.state().size(), n == 0 ? 0u : std::string(kind) == "sgd" ? 1u : 2u) << tb.tag << kind << " n = " << n;
      }
}

// pt::learning_rate(t) for t = 0..total against the documented rules:
//   step:   lr * gamma^floor(t / step_size)
//   cosine: min_lr + (lr - min_lr) (1 + cos(pi min(t, total) / total)) / 2
//   warm-up (any schedule): times (t + 1) / warmup_steps while t < warmup_steps
TEST(LrSchedule, MatchesDocumentedRules) {
  Fixture fx("lr_schedules");
  const int64_t total = fx.i("total");
  std::stringstream cases(fx.s("cases"));
  int count = 0;
  for (std::string name; std::getline(cases, name, ',');) {
    SCOPED_TRACE("schedule " + name);
    h5::Handle g(H5Gopen2(fx.id(), name.c_str(), H5P_DEFAULT), H5Gclose);
    ASSERT_TRUE(g) << name;
    const auto sd = [&](const char* k) { return h5::read_attr_double(g.id(), k, fx.path()); };
    const auto si = [&](const char* k) { return h5::read_attr_int(g.id(), k, fx.path()); };
    const OptimConfig cfg = train_settings({
        "train.lr=" + fmt(sd("lr")),
        "train.lr_schedule=\"" + h5::read_attr_string(g.id(), "lr_schedule", fx.path()) + "\"",
        "train.warmup_steps=" + std::to_string(si("warmup_steps")),
        "train.step_size=" + std::to_string(si("step_size")),
        "train.gamma=" + fmt(sd("gamma")),
        "train.min_lr=" + fmt(sd("min_lr")),
    });
    const auto ref = fx.read_doubles(g.id(), "lr");
    ASSERT_EQ(ref.size(), static_cast<size_t>(total + 1));
    double worst = 0;
    for (int64_t t = 0; t <= total; ++t) {
      const double got = learning_rate(cfg, t, total), want = ref[static_cast<size_t>(t)];
      EXPECT_NEAR(got, want, 1e-12 * std::fabs(want) + 1e-15) << name << " at update " << t;
      worst = std::max(worst, std::fabs(got - want) / (1e-12 * std::fabs(want) + 1e-15));
    }
    note_ratio("lr schedule " + name, {worst, 0, 0, 0});
    ++count;
  }
  EXPECT_EQ(count, 7);
}

}  // namespace pt::test
