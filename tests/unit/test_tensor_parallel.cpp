// Tensor parallelism's pieces below the grid (issue 25): how a parameter tensor is cut into
// parts and laid back (take_shard / place_shard, against hand-written rows and columns), and
// the split transformer_block and attention layers run by t threads, each with its own host
// backend and a thread TensorGroup (the sum in rank order, as MpiTensorGroup adds it),
// against the whole layer: the output and the input gradient (the same bits on every rank),
// and the parts' weight gradients laid out whole, within 1e-5 of the tensor's largest
// magnitude in fp32 (the t partial sums are added in another order than one K-long dot
// product) and 2e-2 under bf16 (an fp32 difference can move a bf16 rounding by one ulp,
// 2^-8). A layer that skipped either sum (Megatron's f or g) is off by the other parts'
// share, tens of percent.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "model_decks.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/model.hpp"
#include "test_support.hpp"

namespace pt::test {
namespace {

std::string block_deck(int64_t heads, int64_t ratio) {
  return "[data]\nsource = \"synthetic\"\nshape = [6]\nclasses = 11\n[model]\n"
         "[[model.layers]]\ntype = \"embedding\"\ndim = 16\n"
         "[[model.layers]]\ntype = \"transformer_block\"\nheads = " + std::to_string(heads) +
         "\nmlp_ratio = " + std::to_string(ratio) + "\n"
         "[[model.layers]]\ntype = \"attention\"\nheads = " + std::to_string(heads) + "\n"
         "[[model.layers]]\ntype = \"lm_head\"\n";
}

// t threads meeting at a generation barrier: sum() adds every rank's x in rank order.
class ThreadGroup {
 public:
  explicit ThreadGroup(int t) : t_(t), ptrs_(static_cast<size_t>(t)) {}
  void arrive() {
    std::unique_lock<std::mutex> lk(m_);
    const int64_t gen = gen_;
    if (++waiting_ == t_) {
      waiting_ = 0, ++gen_;
      cv_.notify_all();
    } else {
      cv_.wait(lk, [&] { return gen_ != gen; });
    }
  }
  struct Rank final : TensorGroup {
    Rank(ThreadGroup* group, int k) : g(group), r(k) {}
    ThreadGroup* g;
    int r;
    int size() const override { return g->t_; }
    int rank() const override { return r; }
    void sum(Backend&, float* x, int64_t count) const override {
      g->ptrs_[static_cast<size_t>(r)] = x;
      g->arrive();
      std::vector<float> s(g->ptrs_[0], g->ptrs_[0] + count);
      for (int k = 1; k < g->t_; ++k)
        for (int64_t i = 0; i < count; ++i) s[static_cast<size_t>(i)] += g->ptrs_[static_cast<size_t>(k)][i];
      g->arrive();
      std::copy(s.begin(), s.end(), x);
    }
    void gather(const double*, double*, int64_t) const override { FAIL() << "not used by layers"; }
    void allgather(Backend&, float*, int64_t, int64_t) const override { FAIL() << "not used by layers"; }
  };
  Rank rank(int r) { return Rank(this, r); }

 private:
  int t_, waiting_ = 0;
  int64_t gen_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<float*> ptrs_;
};

// One layer's forward and fused backward on n samples: y, dx, dw.
struct Pass {
  std::vector<float> y, dx, dw;
};
Pass run_layer(const Layer& l, const std::vector<float>& w, const std::vector<float>& x, const std::vector<float>& dy,
               int64_t n, Precision p, const TensorGroup* g) {
  auto be = make_host_backend();
  LayerCtx c{*be, 7, 0, true, nullptr, 1.0f};
  c.precision = p, c.tensor = g;
  const Recompute none = Recompute::none;
  std::vector<float> aux(static_cast<size_t>(n * (l.aux_floats(none, p) + l.split_aux_floats(none)) + 1));
  std::vector<float> work(static_cast<size_t>(n * std::max(l.workspace_floats(none), l.split_aux_floats(none) + l.workspace_floats(none)) + 1));
  c.work = work.data();
  Pass o;
  o.y.resize(dy.size()), o.dx.resize(x.size()), o.dw.assign(w.size(), 0.0f);
  l.forward(c, w.data(), x.data(), o.y.data(), aux.data(), n);
  l.backward(c, w.data(), x.data(), o.y.data(), dy.data(), o.dx.data(), o.dw.data(), aux.data(), n);
  return o;
}

float max_abs(const float* a, int64_t n) {
  float m = 0;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, std::fabs(a[i]));
  return m;
}

// every element of b within tol * max|a| of a
void expect_close(const float* a, const float* b, int64_t n, double tol, const std::string& what) {
  const double bound = tol * std::max(1e-6f, max_abs(a, n));
  double worst = 0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - b[i])));
  EXPECT_LE(worst, bound) << what << ": worst " << worst << " against " << bound;
}

// Layer `li` of the deck split over t threads against the whole layer.
void check_split_layer(int li, int t, Precision p, double tol) {
  const Deck deck = parse_deck_text(block_deck(4, 2), "tp.toml", {});
  const Model whole(deck, Shape::tokens(6), 11);
  const Layer& L = whole.layer(li);
  const int64_t n = 3, in = n * L.in_shape().numel(), out = n * L.out_shape().numel();
  std::vector<float> w(static_cast<size_t>(L.num_params())), x(static_cast<size_t>(in)), dy(static_cast<size_t>(out));
  L.init_params(w.data(), 5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 0.1f * std::cos(0.11f * static_cast<float>(i));
  const Pass ref = run_layer(L, w, x, dy, n, p, nullptr);

  std::vector<std::unique_ptr<Model>> parts;
  for (int k = 0; k < t; ++k) parts.push_back(std::make_unique<Model>(deck, Shape::tokens(6), 11, TensorShard{t, k}));
  ThreadGroup group(t);
  std::vector<Pass> got(static_cast<size_t>(t));
  std::vector<std::thread> th;
  for (int k = 0; k < t; ++k)
    th.emplace_back([&, k] {
      const Layer& part = parts[static_cast<size_t>(k)]->layer(li);
      std::vector<float> wk(static_cast<size_t>(part.num_params()));
      part.init_params(wk.data(), 5);  // the whole layer's values, cut
      const ThreadGroup::Rank me = group.rank(k);
      got[static_cast<size_t>(k)] = run_layer(part, wk, x, dy, n, p, &me);
    });
  for (std::thread& h : th) h.join();
  const std::string what = L.type() + " t = " + std::to_string(t) + (p == Precision::bf16 ? " bf16" : " fp32");
  for (int k = 0; k < t; ++k) {
    EXPECT_EQ(got[static_cast<size_t>(k)].y, got[0].y) << what << ": rank " << k << "'s output differs from rank 0's";
    EXPECT_EQ(got[static_cast<size_t>(k)].dx, got[0].dx) << what << ": rank " << k << "'s input gradient";
  }
  expect_close(ref.y.data(), got[0].y.data(), out, tol, what + " output");
  expect_close(ref.dx.data(), got[0].dx.data(), in, tol, what + " input gradient");
  std::vector<float> dw(ref.dw.size(), 0.0f);
  const std::vector<ParamTensor> ps = parts[0]->layer(li).params(), ws = L.params();
  for (size_t i = 0; i < ps.size(); ++i) {
    for (int k = 0; k < t; ++k) place_shard(ps[i], t, k, got[static_cast<size_t>(k)].dw.data() + ps[i].offset, dw.data() + ws[i].offset);
    expect_close(ref.dw.data() + ws[i].offset, dw.data() + ws[i].offset, ws[i].size, tol, what + " gradient of " + ws[i].name);
  }
}

}  // namespace

TEST(TensorShards, PartsAreTheRowsAndColumnsMegatronCuts) {
  const Deck deck = parse_deck_text(block_deck(4, 2), "tp.toml", {});
  const Model whole(deck, Shape::tokens(6), 11), part1(deck, Shape::tokens(6), 11, TensorShard{2, 1});
  const std::vector<ParamTensor> ps = part1.layer(1).params(), ws = whole.layer(1).params();
  ASSERT_EQ(ps.size(), ws.size());
  std::vector<float> full(static_cast<size_t>(whole.layer(1).num_params()));
  for (size_t i = 0; i < full.size(); ++i) full[i] = static_cast<float>(i);
  std::vector<float> mine(static_cast<size_t>(part1.layer(1).num_params()));
  for (size_t i = 0; i < ps.size(); ++i) take_shard(ps[i], 2, 1, full.data() + ws[i].offset, mine.data() + ps[i].offset);
  auto at = [&](const std::string& name, const std::vector<ParamTensor>& v) {
    return *std::find_if(v.begin(), v.end(), [&](const ParamTensor& p) { return p.name == name; });
  };
  // in_proj [48, 16]: part 1 holds q rows 8-15, k rows 24-31, v rows 40-47 (the second half of each)
  const ParamTensor q = at("attn.in_proj_weight", ps), qw = at("attn.in_proj_weight", ws);
  EXPECT_EQ(q.shape, (std::vector<int64_t>{24, 16}));
  EXPECT_EQ(q.full_shape, (std::vector<int64_t>{48, 16}));
  for (int64_t r : {0, 7, 8, 15, 16, 23}) {
    const int64_t whole_row = (r / 8) * 16 + 8 + r % 8;
    EXPECT_EQ(mine[static_cast<size_t>(q.offset + r * 16 + 3)], full[static_cast<size_t>(qw.offset + whole_row * 16 + 3)]) << r;
  }
  // out_proj [16, 16]: part 1 holds columns 8-15; fc2 [16, 32]: columns 16-31; their biases whole
  const ParamTensor o = at("attn.out_proj.weight", ps), ow = at("attn.out_proj.weight", ws);
  EXPECT_EQ(mine[static_cast<size_t>(o.offset + 5 * 8 + 2)], full[static_cast<size_t>(ow.offset + 5 * 16 + 8 + 2)]);
  const ParamTensor f2 = at("mlp.2.weight", ps), f2w = at("mlp.2.weight", ws);
  EXPECT_EQ(mine[static_cast<size_t>(f2.offset + 3 * 16 + 1)], full[static_cast<size_t>(f2w.offset + 3 * 32 + 16 + 1)]);
  EXPECT_EQ(at("mlp.2.bias", ps).split_dim, -1);
  EXPECT_EQ(at("ln1.weight", ps).split_dim, -1);
  EXPECT_EQ(at("mlp.0.bias", ps).shape, (std::vector<int64_t>{16}));
  // the parts of every split tensor cover the whole exactly once (part k marks its elements k + 1)
  for (int t : {2, 4}) {
    const Model pk(deck, Shape::tokens(6), 11, TensorShard{t, 0});
    const std::vector<ParamTensor> pp = pk.layer(1).params();
    for (size_t i = 0; i < pp.size(); ++i) {
      if (pp[i].split_dim < 0) {
        EXPECT_EQ(pp[i].size, ws[i].size) << ws[i].name << " is replicated: every rank holds all of it";
        continue;
      }
      EXPECT_EQ(pp[i].size * t, ws[i].size) << ws[i].name;
      std::vector<float> cover(static_cast<size_t>(ws[i].size), 0.0f);
      for (int k = 0; k < t; ++k) {
        std::vector<float> mark(static_cast<size_t>(pp[i].size), static_cast<float>(k + 1));
        place_shard(pp[i], t, k, mark.data(), cover.data());
      }
      for (int k = 0; k < t; ++k)
        EXPECT_EQ(std::count(cover.begin(), cover.end(), static_cast<float>(k + 1)), pp[i].size) << ws[i].name << " t " << t;
    }
  }
  EXPECT_EQ(whole.num_params(0, whole.size()) - whole.layer(1).num_params(),
            part1.num_params(0, part1.size()) - part1.layer(1).num_params() + (whole.layer(2).num_params() - part1.layer(2).num_params()))
      << "only the split layers change size";
}

TEST(TensorParallel, SplitBlockEqualsTheWholeBlock) {
  for (int t : {2, 4}) check_split_layer(1, t, Precision::fp32, 1e-5);
  check_split_layer(1, 2, Precision::bf16, 2e-2);
}

TEST(TensorParallel, SplitAttentionEqualsTheWholeAttention) {
  check_split_layer(2, 2, Precision::fp32, 1e-5);
  check_split_layer(2, 4, Precision::bf16, 2e-2);
}

TEST(TensorParallel, SplitsAreCheckedAgainstTheHeadsAndTheMlp) {
  const Deck deck = parse_deck_text(block_deck(4, 2), "tp.toml", {});
  try {
    Model m(deck, Shape::tokens(6), 11, TensorShard{3, 0});
    FAIL() << "4 heads split over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be a multiple of parallel.tensor = 3"), std::string::npos) << e.what();
  }
}

}  // namespace pt::test
