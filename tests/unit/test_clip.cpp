// Gradient-norm clipping (clip.hpp): the fixed-order sum of squares against a long-double
// reference, its independence from the address; the model's tensors in
// index order with a tied head's mirror left out, and the norm bitwise the same whatever
// the split; the coefficient as torch.nn.utils.clip_grad_norm_; asynchronous stages' shares;
// and the cosine schedule's floor under a warm-up longer than the run.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "pipetrain/clip.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/optim.hpp"

namespace pt::test {
namespace {

std::vector<float> random_floats(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f), e(-20.0f, 20.0f);
  std::vector<float> x(n);
  for (float& v : x) v = u(g) * std::exp2(e(g));  // magnitudes over 12 decades
  return x;
}

long double reference(const float* x, size_t n) {
  long double s = 0;
  for (size_t i = 0; i < n; ++i) s += static_cast<long double>(x[i]) * x[i];
  return s;
}

TEST(Clip, SumOfSquaresAgainstLongDouble) {
  auto be = make_host_backend();
  for (size_t n : {0, 1, 7, 16, 17, 1000, 100003}) {
    const std::vector<float> x = random_floats(n + 3, static_cast<uint32_t>(n + 1));
    Buffer b(*be, n + 3);
    be->from_host(b.data(), x.data(), n + 3);
    const double got = be->sum_squares(n, b.data());
    const long double want = reference(x.data(), n);
    if (n == 0) EXPECT_EQ(got, 0.0);
    else EXPECT_NEAR(got / static_cast<double>(want), 1.0, 1e-14) << n;
    // the tensor at another address gives the same bits
    if (n > 0) {
      be->from_host(b.data() + 3, x.data(), n);
      EXPECT_EQ(be->sum_squares(n, b.data() + 3), got) << n;
    }
  }
  // exact where every partial sum is: integers
  std::vector<float> ints(1000);
  for (size_t i = 0; i < ints.size(); ++i) ints[i] = static_cast<float>(i % 97) - 48.0f;
  double want = 0;
  for (float v : ints) want += static_cast<double>(v) * v;
  EXPECT_EQ(be->sum_squares(ints.size(), ints.data()), want);
}

const char* kTiedDeck =
    "[data]\nsource = \"tokens\"\nvocab = 32\nseq_len = 4\ntrain = \"none.bin\"\ntest = \"none.bin\"\n"
    "[model]\n"
    "[[model.layers]]\ntype = \"embedding\"\nname = \"tok\"\ndim = 8\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
    "[[model.layers]]\ntype = \"lm_head\"\ntie = \"tok\"\n";

// The gradient of layer l's tensors, whatever stage holds it: a function of (l, position).
std::vector<float> stage_grads(const Stage& st) {
  std::vector<float> g(static_cast<size_t>(st.num_params()));
  for (int l = st.first(); l < st.last(); ++l) {
    const std::vector<float> v = random_floats(static_cast<size_t>(st.model().layer(l).num_params()), 100 + l);
    std::copy(v.begin(), v.end(), g.begin() + st.param_offset(l));
  }
  return g;
}

TEST(Clip, NormOverTensorsIsTheSameOnEverySplit) {
  const Deck deck = parse_deck_text(kTiedDeck, "tied.toml", {});
  const Model model(deck, Shape::tokens(4), 32);
  auto be = make_host_backend();
  const int T = norm_tensor_count(model);
  std::vector<double> ref_sums;
  double ref = -1;
  for (const std::vector<int>& first : {std::vector<int>{0, 4}, {0, 2, 4}, {0, 1, 3, 4}, {0, 1, 2, 3, 4}}) {
    std::vector<double> sums(static_cast<size_t>(T), 0.0);
    int counted = 0;
    for (size_t s = 0; s + 1 < first.size(); ++s) {
      const Stage st(*be, model, first[s], first[s + 1], 2, 2);
      const std::vector<NormTensor> tensors = norm_tensors(st);
      counted += static_cast<int>(tensors.size());
      const std::vector<float> g = stage_grads(st);
      sums_of_squares(*be, g.data(), tensors, sums);
    }
    EXPECT_EQ(counted, T - 1) << "the head's mirror of the embedding matrix counts once, at the embedding";
    const double norm = total_norm(sums);
    if (ref < 0) ref = norm, ref_sums = sums;
    EXPECT_EQ(sums, ref_sums);
    EXPECT_EQ(norm, ref) << first.size() - 1 << " stages";
  }
  // against a direct long-double sum over every layer's tensors, the tied one once
  long double want = 0;
  for (int l = 0; l < model.size(); ++l) {
    const std::vector<float> v = random_floats(static_cast<size_t>(model.layer(l).num_params()), 100 + l);
    const std::vector<ParamTensor> ps = model.layer(l).params();
    for (size_t t = 0; t < ps.size(); ++t)
      if (model.layer(l).tied_to(static_cast<int>(t)).empty()) want += reference(v.data() + ps[t].offset, static_cast<size_t>(ps[t].size));
  }
  EXPECT_NEAR(ref / std::sqrt(static_cast<double>(want)), 1.0, 1e-14);
  EXPECT_EQ(model_norm_floats(model), model.num_params(0, model.size()) - 32 * 8);
}

TEST(Clip, CoefficientAsClipGradNorm) {
  EXPECT_EQ(clip_coefficient(2.0, 1.0), static_cast<float>(1.0 / (2.0 + 1e-6)));
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(1.0, 1.0), static_cast<float>(1.0 / (1.0 + 1e-6)));  // as PyTorch: scaled by 0.999999
  EXPECT_EQ(clip_coefficient(0.999, 1.0), 1.0f);
  EXPECT_EQ(clip_coefficient(3.0, 0.0), 1.0f);   // off
  EXPECT_EQ(clip_coefficient(NAN, 1.0), 1.0f);   // the update is skipped or aborted instead
  EXPECT_EQ(clip_coefficient(INFINITY, 1.0), 1.0f);
  auto be = make_host_backend();
  std::vector<float> g = {3.0f, -4.0f, 1.0f};
  const float c = clip_coefficient(5.0, 1.0);
  apply_clip(*be, g.data(), 2, c);
  EXPECT_EQ(g[0], 3.0f * c);
  EXPECT_EQ(g[1], -4.0f * c);
  EXPECT_EQ(g[2], 1.0f);  // past n: untouched (the loss rides there)
}

TEST(Clip, AsynchronousSharesSquareToTheThreshold) {
  const std::vector<int64_t> floats = {1000, 7, 123456, 50};
  int64_t all = 0;
  for (int64_t f : floats) all += f;
  double sq = 0;
  for (int64_t f : floats) sq += std::pow(stage_clip_threshold(0.7, f, all), 2);
  EXPECT_NEAR(sq, 0.49, 1e-12);
  EXPECT_EQ(stage_clip_threshold(0.7, all, all), 0.7);
}

// A warm-up longer than the run: the cosine's ramped rate falls back after its peak; once it
// has reached train.min_lr it never goes below it. Runs whose warm-up ends in time, and runs
// whose ramp never reaches min_lr, keep their rates.
TEST(Clip, CosineNeverFallsBelowMinLrOnceReached) {
  auto config = [](int64_t warmup, double min_lr) {
    const Deck d = parse_deck_text("[model]\n[[model.layers]]\ntype='flatten'\n[[model.layers]]\ntype='linear'\nout=10\n"
                                   "[[model.layers]]\ntype='softmax_cross_entropy'\n[train]\nlr=0.001\nlr_schedule='cosine'\n",
                                   "lr.toml", {"train.warmup_steps=" + std::to_string(warmup), "train.min_lr=" + std::to_string(min_lr)});
    return optim_config(d.train);
  };
  auto plain = [](const OptimConfig& c, int64_t t, int64_t total) {  // the schedule times the ramp
    double lr = c.lr_schedule->rate(c, t, total);
    if (t < c.warmup_steps) lr *= static_cast<double>(t + 1) / static_cast<double>(c.warmup_steps);
    return lr;
  };
  const OptimConfig longer = config(100, 1e-4);  // the run: 50 steps, 100 warm-up steps
  bool reached = false, clamped = false;
  for (int64_t t = 0; t < 50; ++t) {
    const double lr = learning_rate(longer, t, 50);
    if (reached) { EXPECT_GE(lr, 1e-4) << "step " << t + 1; }
    clamped = clamped || lr != plain(longer, t, 50);
    reached = reached || lr >= 1e-4;
  }
  EXPECT_TRUE(reached && clamped);
  EXPECT_EQ(learning_rate(longer, 49, 50), 1e-4);
  // tinygpt's 12-step runs (tools/bitwise_runs.sh): the ramp peaks at 4e-5, below min_lr: unchanged
  for (int64_t t = 0; t < 12; ++t) EXPECT_EQ(learning_rate(longer, t, 12), plain(longer, t, 12)) << t;
  const OptimConfig normal = config(10, 1e-4);
  for (int64_t t = 0; t < 200; ++t) EXPECT_EQ(learning_rate(normal, t, 200), plain(normal, t, 200)) << t;
}

}  // namespace
}  // namespace pt::test
