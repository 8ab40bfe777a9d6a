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
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <limits>
#include <mutex>
#include <thread>

#include "model_decks.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/model.hpp"
#include "test_support.hpp"

namespace pt::test {
namespace {

std::string block_deck(int64_t heads, int64_t ratio, const std::string& dropout = "0.0", bool sequence = false) {
  return "[data]\nsource = \"synthetic\"\nshape = [6]\nclasses = 12\n[model]\n"
         "[[model.layers]]\ntype = \"embedding\"\ndim = 16\n"
         "[[model.layers]]\ntype = \"transformer_block\"\nheads = " + std::to_string(heads) +
         "\nmlp_ratio = " + std::to_string(ratio) + "\ndropout = " + dropout +
         (sequence ? "\nsequence_parallel = true" : "") + "\n"
         "[[model.layers]]\ntype = \"attention\"\nheads = " + std::to_string(heads) + "\ndropout = " + dropout + "\n"
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
    // every rank's x at a barrier: x <- f(the t ranks' x) (a copy first, then a barrier
    // before anyone writes)
    template <class F>
    void exchange(float* x, int64_t count, F f) const {
      g->ptrs_[static_cast<size_t>(r)] = x;
      g->arrive();
      std::vector<float> s(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) s[static_cast<size_t>(i)] = f(i);
      g->arrive();
      std::copy(s.begin(), s.end(), x);
    }
    float at(int k, int64_t i) const { return g->ptrs_[static_cast<size_t>(k)][i]; }
    void sum(Backend&, float* x, int64_t count) const override {
      exchange(x, count, [&](int64_t i) {
        float v = at(0, i);
        for (int k = 1; k < g->t_; ++k) v += at(k, i);
        return v;
      });
    }
    void max(Backend&, float* x, int64_t count) const override {
      exchange(x, count, [&](int64_t i) {
        float v = at(0, i);
        for (int k = 1; k < g->t_; ++k) v = std::max(v, at(k, i));
        return v;
      });
    }
    void allgather(Backend&, float* x, int64_t count, int64_t part) const override {
      exchange(x, count, [&](int64_t i) { return at(static_cast<int>(std::min<int64_t>(i / part, g->t_ - 1)), i); });
    }
    // the reduce-scatter: this rank's part summed as sum() sums it, every other element NaN
    // (unspecified: a layer that reads it fails the comparison)
    void sum_part(Backend&, float* x, int64_t count, int64_t part) const override {
      ++g->scatters_;
      exchange(x, count, [&](int64_t i) {
        if (i / part != r) return std::numeric_limits<float>::quiet_NaN();
        float v = at(0, i);
        for (int k = 1; k < g->t_; ++k) v += at(k, i);
        return v;
      });
    }
    void gather(const double*, double*, int64_t) const override { FAIL() << "not used by layers"; }
  };
  Rank rank(int r) { return Rank(this, r); }
  int64_t scatters() const { return scatters_; }

 private:
  int t_, waiting_ = 0;
  std::atomic<int64_t> scatters_{0};
  int64_t gen_ = 0;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<float*> ptrs_;
};

// How a layer is run: the fused backward or the split one (backward_input, then
// backward_weight, the output gradients kept in the aux region as a Stage keeps them), with or
// without selective recomputation.
struct Mode {
  bool split = false, selective = false;
};

// One layer's forward and backward on n samples: y, dx, dw. The workspace is exactly
// n * workspace_floats(mode), followed by a canary that must come back untouched.
struct Pass {
  std::vector<float> y, dx, dw;
};
Pass run_layer(const Layer& l, const std::vector<float>& w, const std::vector<float>& x, const std::vector<float>& dy,
               int64_t n, Precision p, const TensorGroup* g, Mode mode = {}) {
  auto be = make_host_backend();
  std::vector<int32_t> labels(static_cast<size_t>(n * l.labels_per_sample()));
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int32_t>((5 * i + 3) % 12);
  LayerCtx c{*be, 7, 0, true, labels.data(), 0.25f};
  const bool selective = mode.selective && l.recomputes_selectively();
  const Recompute r = selective ? Recompute::selective : Recompute::none;
  c.precision = p, c.tensor = g, c.selective = selective;
  const bool split = mode.split && l.splits_backward();
  std::vector<float> aux(static_cast<size_t>(n * (l.aux_floats(r, p) + (split ? l.split_aux_floats(r) : 0)) + 1));
  const size_t need = static_cast<size_t>(n * l.workspace_floats(r)), canary = 4096;
  std::vector<float> work(need + canary, 0.0f);
  std::fill(work.begin() + static_cast<std::ptrdiff_t>(need), work.end(), 1234.5f);
  c.work = work.data();
  Pass o;
  o.y.resize(dy.size()), o.dx.resize(x.size()), o.dw.assign(w.size(), 0.0f);
  l.forward(c, w.data(), x.data(), o.y.data(), aux.data(), n);
  if (split) {
    l.backward_input(c, w.data(), x.data(), o.y.data(), dy.data(), o.dx.data(), o.dw.data(), aux.data(), n);
    l.backward_weight(c, w.data(), x.data(), o.y.data(), dy.data(), o.dw.data(), aux.data(), n);
  } else {
    l.backward(c, w.data(), x.data(), o.y.data(), dy.data(), o.dx.data(), o.dw.data(), aux.data(), n);
  }
  EXPECT_TRUE(std::all_of(work.begin() + static_cast<std::ptrdiff_t>(need), work.end(), [](float v) { return v == 1234.5f; }))
      << l.type() << ": wrote past its workspace of " << need << " floats";
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

// A flat model: a column-parallel linear into a row-parallel one.
std::string linear_deck() {
  return "[data]\nsource = \"synthetic\"\nshape = [12]\nclasses = 6\n[model]\n"
         "[[model.layers]]\ntype = \"linear\"\nout = 12\ntensor = \"column\"\n"
         "[[model.layers]]\ntype = \"relu\"\n"
         "[[model.layers]]\ntype = \"linear\"\nout = 6\ntensor = \"row\"\n"
         "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
}

struct Net {
  std::string deck;
  Shape in;
  int64_t classes;
};
const Net kBlocks{block_deck(4, 2), Shape::tokens(6), 12};
const Net kLinears{linear_deck(), Shape::vec(12), 6};

// Layer `li` of the net split over t threads against the whole layer; returns the reduce-scatters run.
int64_t check_split_layer(int li, int t, Precision p, double tol, const Net& net = kBlocks, Mode mode = {}) {
  const Deck deck = parse_deck_text(net.deck, "tp.toml", {});
  const Model whole(deck, net.in, net.classes);
  const Layer& L = whole.layer(li);
  const int64_t n = 3, in = n * L.in_shape().numel(), out = n * L.out_shape().numel();
  std::vector<float> w(static_cast<size_t>(L.num_params())), x(static_cast<size_t>(in)), dy(static_cast<size_t>(out));
  L.init_params(w.data(), 5);
  for (size_t i = 0; i < x.size(); ++i)  // token ids into the embedding, else activations
    x[i] = L.in_shape().is_tokens ? static_cast<float>((7 * i + 2) % 12) : std::sin(0.37f * static_cast<float>(i));
  for (size_t i = 0; i < dy.size(); ++i) dy[i] = 0.1f * std::cos(0.11f * static_cast<float>(i));
  const Pass ref = run_layer(L, w, x, dy, n, p, nullptr, mode);

  std::vector<std::unique_ptr<Model>> parts;
  for (int k = 0; k < t; ++k) parts.push_back(std::make_unique<Model>(deck, net.in, net.classes, TensorShard{t, k}));
  ThreadGroup group(t);
  std::vector<Pass> got(static_cast<size_t>(t));
  std::vector<std::thread> th;
  for (int k = 0; k < t; ++k)
    th.emplace_back([&, k] {
      const Layer& part = parts[static_cast<size_t>(k)]->layer(li);
      std::vector<float> wk(static_cast<size_t>(part.num_params()));
      part.init_params(wk.data(), 5);  // the whole layer's values, cut
      const ThreadGroup::Rank me = group.rank(k);
      got[static_cast<size_t>(k)] = run_layer(part, wk, x, dy, n, p, &me, mode);
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
    if (ps[i].split_dim >= 0) continue;
    for (int k = 1; k < t; ++k) {  // replicated (norms, row-parallel biases): the same gradient on every rank
      const auto first = got[0].dw.begin() + ps[i].offset, mine = got[static_cast<size_t>(k)].dw.begin() + ps[i].offset;
      EXPECT_TRUE(std::equal(first, first + ps[i].size, mine)) << what << ": rank " << k << "'s gradient of the replicated " << ws[i].name;
    }
  }
  return group.scatters();
}

}  // namespace

TEST(TensorShards, PartsAreTheRowsAndColumnsMegatronCuts) {
  const Deck deck = parse_deck_text(block_deck(4, 2), "tp.toml", {});
  const Model whole(deck, Shape::tokens(6), 12), part1(deck, Shape::tokens(6), 12, TensorShard{2, 1});
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
  // the embedding's and the head's vocabulary rows: part 1 of 2 holds tokens 6-11
  const ParamTensor e = part1.layer(0).params()[0], h = part1.layer(3).params()[2];
  EXPECT_EQ(e.shape, (std::vector<int64_t>{6, 16}));
  EXPECT_EQ(e.full_shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(h.name, "weight");
  EXPECT_EQ(h.full_shape, (std::vector<int64_t>{12, 16}));
  EXPECT_EQ(part1.layer(0).params()[1].split_dim, -1) << "the position table is whole on every rank";
  // the parts of every split tensor of every layer cover the whole exactly once (part k marks
  // its elements k + 1); a replicated tensor is whole on every rank
  for (int t : {2, 4}) {
    const Model pk(deck, Shape::tokens(6), 12, TensorShard{t, 0});
    for (int li = 0; li < whole.size(); ++li) {
      const std::vector<ParamTensor> pp = pk.layer(li).params(), wl = whole.layer(li).params();
      ASSERT_EQ(pp.size(), wl.size());
      for (size_t i = 0; i < pp.size(); ++i) {
        const std::string what = whole.layer(li).type() + " " + wl[i].name + " t " + std::to_string(t);
        if (pp[i].split_dim < 0) {
          EXPECT_EQ(pp[i].size, wl[i].size) << what << " is replicated: every rank holds all of it";
          continue;
        }
        EXPECT_EQ(pp[i].size * t, wl[i].size) << what;
        std::vector<float> cover(static_cast<size_t>(wl[i].size), 0.0f);
        for (int k = 0; k < t; ++k) {
          std::vector<float> mark(static_cast<size_t>(pp[i].size), static_cast<float>(k + 1));
          place_shard(pp[i], t, k, mark.data(), cover.data());
        }
        for (int k = 0; k < t; ++k) EXPECT_EQ(std::count(cover.begin(), cover.end(), static_cast<float>(k + 1)), pp[i].size) << what;
      }
    }
  }
}

TEST(TensorParallel, SplitBlockEqualsTheWholeBlock) {
  for (int t : {2, 4}) check_split_layer(1, t, Precision::fp32, 1e-5);
  check_split_layer(1, 2, Precision::bf16, 2e-2);
}

TEST(TensorParallel, SplitAttentionEqualsTheWholeAttention) {
  check_split_layer(2, 2, Precision::fp32, 1e-5);
  check_split_layer(2, 4, Precision::bf16, 2e-2);
}

TEST(TensorParallel, SplitLayersDropTheWholeLayersProbabilities) {
  // each part draws the whole layer's mask for its heads: the split equals the whole with
  // dropout on the probabilities (and the block's residual dropouts, whole on every rank)
  const Net dropped{block_deck(4, 2, "0.3"), Shape::tokens(6), 12};
  for (int li : {1, 2}) check_split_layer(li, 2, Precision::fp32, 1e-5, dropped);
  check_split_layer(2, 4, Precision::fp32, 1e-5, dropped);
}

// Sequence parallelism: the norms, dropouts and residual adds on 1/t of the rows, reduce-
// scatters in place of the sums (the thread group leaves the other rows NaN), the norms'
// weight gradients summed from the parts' rows: the whole block within the same bounds,
// with dropout too (the whole block's mask by element).
TEST(TensorParallel, SequenceParallelBlockEqualsTheWholeBlock) {
  const Net seq{block_deck(4, 2, "0.0", true), Shape::tokens(6), 12};
  const Net seq_dropped{block_deck(4, 2, "0.3", true), Shape::tokens(6), 12};
  EXPECT_EQ(check_split_layer(1, 2, Precision::fp32, 1e-5, seq), 2 * 2 * 2) << "2 reduce-scatters each way, per rank";
  check_split_layer(1, 2, Precision::fp32, 1e-5, seq_dropped);
  check_split_layer(1, 2, Precision::bf16, 2e-2, seq);
  check_split_layer(1, 2, Precision::bf16, 2e-2, seq_dropped);
  for (Mode m : {Mode{true, false}, Mode{false, true}, Mode{true, true}}) {  // split backward, selective, both
    check_split_layer(1, 2, Precision::fp32, 1e-5, seq_dropped, m);
    check_split_layer(1, 2, Precision::bf16, 2e-2, seq_dropped, m);
  }
  EXPECT_EQ(check_split_layer(1, 2, Precision::fp32, 1e-5), 0) << "no reduce-scatter without sequence_parallel";
}

TEST(TensorParallel, SequenceParallelNeedsTheSequenceToSplit) {
  const Deck deck = parse_deck_text(block_deck(4, 2, "0.0", true), "tp.toml", {});
  EXPECT_NO_THROW(Model(deck, Shape::tokens(6), 12)) << "a no-op at t = 1";
  try {
    Model m(deck, Shape::tokens(6), 12, TensorShard{4, 0});
    FAIL() << "6 positions split over 4 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers[1].sequence_parallel'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("6 positions"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, VocabularyParallelEmbeddingEqualsTheWholeEmbedding) {
  for (int t : {2, 4}) check_split_layer(0, t, Precision::fp32, 0.0);  // at most two terms per element: exact
}

TEST(TensorParallel, VocabularyParallelHeadEqualsTheWholeHead) {
  for (int t : {2, 4}) check_split_layer(3, t, Precision::fp32, 1e-6);
  check_split_layer(3, 2, Precision::bf16, 2e-2);
}

TEST(TensorParallel, ColumnAndRowLinearsEqualTheWholeLinears) {
  for (int li : {0, 2})
    for (int t : {2, 3}) check_split_layer(li, t, Precision::fp32, 1e-6, kLinears);
  check_split_layer(2, 2, Precision::bf16, 2e-2, kLinears);
  // the column linear holds rows of W and of its bias, the row linear columns of W and the whole bias
  const Deck deck = parse_deck_text(linear_deck(), "tp.toml", {});
  const Model part(deck, Shape::vec(12), 6, TensorShard{2, 1});
  EXPECT_EQ(part.layer(0).params()[0].shape, (std::vector<int64_t>{6, 12}));
  EXPECT_EQ(part.layer(0).params()[1].shape, (std::vector<int64_t>{6}));
  EXPECT_EQ(part.layer(2).params()[0].shape, (std::vector<int64_t>{6, 6}));
  EXPECT_EQ(part.layer(2).params()[0].split_dim, 1);
  EXPECT_EQ(part.layer(2).params()[1].split_dim, -1);
  EXPECT_NO_THROW(Model(deck, Shape::vec(12), 6, TensorShard{4, 0})) << "12 outputs and 12 inputs cut into 4";
  try {
    Model m(deck, Shape::vec(12), 6, TensorShard{5, 0});
    FAIL() << "12 outputs split over 5 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'model.layers[0].tensor'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("12 of them"), std::string::npos) << e.what();
  }
}

// Inside a GPT-2-small block (T 256, D 768, 12 heads) at t = 2: the weights per rank are half
// but for the replicated norms and row-parallel biases (6 D of 12 D^2 + 13 D), and the kept
// activations halve for q, k, v, the probabilities and the MLP's hidden units; the norms'
// outputs and statistics (read by the column-parallel products) and h stay whole, which
// sequence parallelism splits too: then every kept tensor halves. Printed: the figures
// ARCHITECTURE.md quotes.
TEST(TensorParallel, ABlocksWeightsAndActivationsHalveInsideIt) {
  const std::string deck_text =
      "[data]\nsource = \"synthetic\"\nshape = [256]\nclasses = 256\n[model]\n"
      "[[model.layers]]\ntype = \"embedding\"\ndim = 768\n"
      "[[model.layers]]\ntype = \"transformer_block\"\nheads = 12\n"
      "[[model.layers]]\ntype = \"transformer_block\"\nheads = 12\nsequence_parallel = true\n"
      "[[model.layers]]\ntype = \"lm_head\"\n";
  const Deck deck = parse_deck_text(deck_text, "gpt2_block.toml", {});
  const Model whole(deck, Shape::tokens(256), 256), part(deck, Shape::tokens(256), 256, TensorShard{2, 0});
  EXPECT_EQ(whole.layer(2).kept_floats(false, DType::f32), whole.layer(1).kept_floats(false, DType::f32))
      << "sequence_parallel changes nothing at t = 1";
  for (DType op : {DType::f32, DType::bf16}) {
    const double w = static_cast<double>(part.layer(1).num_params()) / static_cast<double>(whole.layer(1).num_params());
    const double a = static_cast<double>(part.layer(1).kept_floats(false, op)) / static_cast<double>(whole.layer(1).kept_floats(false, op));
    std::printf("gpt2_small block at t = 2 against t = 1 (%s operands): weights %.4f, kept activations %.4f\n",
                op == DType::bf16 ? "bf16" : "fp32", w, a);
    EXPECT_NEAR(w, 0.5, 0.001);
    EXPECT_GE(a, 0.5);
    // what stays whole: the two norms' outputs and statistics, about 2 T D of the whole
    // block's ~17 T D + H T T (fp32), so 0.5 + 2 / 17 / 2 ~ 0.56-0.60
    EXPECT_LE(a, 0.62) << "the split tensors dominate a block's kept activations";
    const double sp = static_cast<double>(part.layer(2).kept_floats(false, op)) / static_cast<double>(whole.layer(1).kept_floats(false, op));
    std::printf("  with sequence parallelism: kept activations %.4f\n", sp);
    EXPECT_NEAR(sp, 0.5, 0.001) << "every kept tensor halves";
  }
}

TEST(TensorParallel, SplitsAreCheckedAgainstTheHeadsAndTheMlp) {
  const Deck deck = parse_deck_text(block_deck(4, 2), "tp.toml", {});
  try {
    Model m(deck, Shape::tokens(6), 12, TensorShard{3, 0});
    FAIL() << "4 heads split over 3 ranks";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("must be a multiple of parallel.tensor = 3"), std::string::npos) << e.what();
  }
}

TEST(TensorParallel, TheVocabularyMustCutIntoTheParts) {
  const Deck deck = parse_deck_text(block_deck(4, 2), "tp.toml", {});
  try {
    Model m(deck, Shape::tokens(6), 11, TensorShard{2, 0});
    FAIL() << "a vocabulary of 11 split over 2 ranks";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Exit::bad_input);
    EXPECT_NE(std::string(e.what()).find("vocabulary of 11 tokens"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("tp.toml"), std::string::npos) << e.what();
  }
}

}  // namespace pt::test
