// The Executor without mpirun: the ranks of a pipeline are threads of this process, each
// with its own ParallelContext (one rank of the layout, no communicators), backend, data,
// stage runtimes and Executor, talking through a FakeTransport (fake_transport.hpp: a
// mailbox keyed by source, destination and tag; a send's buffer is read when its receive
// is posted). A small MLP built from a deck text trains over two segments (so the pools
// serve a second IR) under 1f1b and zb-h1 (I then W) on three stages, zb-v (four stages on
// two ranks: several stages per rank, self-sends) and 1f1b in bf16 (the wire copies), and
// gives bitwise the weights, the per-update losses and the evaluation of the same model
// on one stage; pipedream (asynchronous, weight stashing) on two stages gives bitwise the
// sequential emulator's weights (cmd_emulate). A pipedream run stopped at a checkpoint cut
// with units and messages in flight across it, resumed from the captured states, equals
// the uninterrupted run. A rank whose peer never sends fails at its deadline with the
// message naming what it waits for. Activation recomputation (parallel.recompute selective
// and full) gives bitwise the weights, losses and evaluation of none under every schedule
// family, on the MLP and on a tiny transformer (tied head, dropout, the fused and the
// composed attention), in bf16 too; a pipedream cut under full (or under none, resumed
// under full) resumes bitwise.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "data_test_util.hpp"
#include "fake_transport.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/engine.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/train.hpp"

namespace pt::test {
namespace {

const char* kMlp =
    "[run]\nseed = 3\n"
    "[data]\nsource = \"synthetic\"\nshape = [12]\nclasses = 3\ntrain_samples = 64\ntest_samples = 24\n"
    "[model]\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 16\n"
    "[[model.layers]]\ntype = \"relu\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 16\n"
    "[[model.layers]]\ntype = \"layernorm\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 3\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n"
    "[train]\nbatch_size = 8\nmax_steps = 6\neval_every = 4\neval_batch_size = 10\noptimizer = \"sgd\"\nlr = 0.02\nmomentum = 0.9\n";

// The GPTs' shared start: a text corpus (data.path is set per test), the token embedding and a block.
const std::string kGptStart =
    "[run]\nseed = 5\n"
    "[data]\nsource = \"text\"\nseq_len = 8\n"
    "[model]\n"
    "[[model.layers]]\ntype = \"embedding\"\nname = \"tok\"\ndim = 16\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n";

// A GPT with its head tied to the embedding (on a text file given by data.path).
const std::string kTiedGptText = kGptStart +
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
    "[[model.layers]]\ntype = \"lm_head\"\ntie = \"tok\"\n"
    "[train]\nbatch_size = 8\nmax_steps = 4\neval_every = 2\neval_batch_size = 16\noptimizer = \"adamw\"\nlr = 0.01\n";
const char* kTiedGpt = kTiedGptText.c_str();

// A tiny transformer on a text corpus (data.path is set per test): embedding, four blocks
// (the second with dropout: the composed attention path; the third with a narrower MLP),
// and a head tied to the embedding (untie it for asynchronous schedules).
const std::string kGptText = kGptStart +
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 4\ndropout = 0.1\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\nmlp_ratio = 2\n"
    "[[model.layers]]\ntype = \"transformer_block\"\nheads = 2\n"
    "[[model.layers]]\ntype = \"lm_head\"\ntie = \"tok\"\n"
    "[train]\nbatch_size = 8\nmax_steps = 6\neval_every = 4\neval_batch_size = 16\noptimizer = \"adamw\"\nlr = 0.01\n";
const char* kGpt = kGptText.c_str();

struct Options {
  const char* deck = kMlp;
  std::vector<std::string> sets;  // deck overrides (schedule, split, microbatches, ...)
  int ranks = 1;
  double timeout_s = 120;
  int64_t stop_at = -1;                                           // checkpoint_and_stop after this version
  const std::vector<std::vector<WorkerState>>* resume = nullptr;  // per rank: resume from these
  int only_rank = -1;                                             // run just this rank (the others stay silent)
};

struct Result {
  std::vector<std::vector<float>> weights;  // per layer, after training
  std::vector<double> losses;               // the last stage's summed loss per update
  std::vector<double> norms;                // the last stage's gradient norm per update (clipping)
  Executor::EvalResult eval;                // the reporter's, at the end
  std::vector<std::vector<WorkerState>> states;  // per rank, captured at the stop
  bool stopped = false;
  int64_t units_at_cut = 0, crossing_at_cut = 0;
};

// The trainer's side of the executor: losses, a stop at one version, the captured states.
class Control final : public TrainControl {
 public:
  Control(int last_stage, int64_t stop_at) : last_(last_stage), stop_at_(stop_at) {}
  void segment(int64_t epoch, int64_t start, int64_t steps) { epoch_ = epoch, start_ = start, steps_ = steps; }
  void on_update(const UpdateReport& r) override {
    if (r.stage == last_) losses.push_back(r.loss_sum);
    if (r.stage == last_ && r.grad_norm >= 0) norms.push_back(r.grad_norm);
  }
  CutAction at_boundary(int64_t v) override { return v == stop_at_ ? CutAction::checkpoint_and_stop : CutAction::none; }
  void save(std::vector<WorkerState>& states) override {
    for (WorkerState& st : states) st.epoch = epoch_, st.epoch_steps = steps_, st.epoch_start = start_;
    saved = states;
  }
  std::vector<double> losses, norms;
  std::vector<WorkerState> saved;

 private:
  int last_;
  int64_t stop_at_, epoch_ = 0, start_ = 0, steps_ = 0;
};

// One rank's stage runtimes, built and initialised as the trainer does.
std::vector<std::unique_ptr<StageRuntime>> build_stages(Backend& be, const Deck& deck, const TrainSetup& setup,
                                                        const ParallelContext& ctx, const DataSplit& data, int64_t total) {
  std::vector<std::unique_ptr<StageRuntime>> out;
  const int64_t eval_mb = std::min<int64_t>(deck.train.eval_batch_size, data.test->size());
  for (int s : ctx.stages()) {
    out.push_back(std::make_unique<StageRuntime>(be, *setup.model, setup.layout, s, setup.mb_size, eval_mb,
                                                 setup.def->split_backward, deck.train, total / setup.version_stride(s),
                                                 setup.recompute_of(s)));
    StageRuntime& r = *out.back();
    r.labels_per_sample = data.train->label_count();
    std::vector<float> w(static_cast<size_t>(r.stage->num_params())), st(static_cast<size_t>(r.stage->num_state()));
    r.stage->init_params(w.data(), static_cast<uint64_t>(deck.run.seed));
    be.from_host(r.weights->latest(), w.data(), w.size());
    r.stage->init_state(st.data());
    if (!st.empty()) be.from_host(r.state.data(), st.data(), st.size());
  }
  return out;
}

// One rank of the pipeline: segments (to the next evaluation) as the trainer runs them,
// then the evaluation; its stages' weights, losses and states go into res.
void run_rank(const Options& o, int rank, FakeNetwork& net, Result& res, std::mutex& mu) {
  const Deck deck = parse_deck_text(o.deck, "executor.toml", o.sets);
  const TrainSetup setup = TrainSetup::from_deck(deck, o.ranks);
  DataSplit data = open_data(deck);
  ParallelContext ctx(setup.layout, rank, o.timeout_s);
  auto be = make_host_backend();
  const int64_t N = data.train->size(), B = deck.train.batch_size;
  const int64_t spe = setup.steps_per_epoch(deck, N), total = setup.total_steps(deck, N);
  auto held = build_stages(*be, deck, setup, ctx, data, total);
  std::vector<StageRuntime*> rts;
  for (auto& r : held) rts.push_back(r.get());
  ExecutorConfig cfg;
  cfg.seed = static_cast<uint64_t>(deck.run.seed);
  cfg.batch_size = B;
  cfg.eval_mb = std::min<int64_t>(deck.train.eval_batch_size, data.test->size());
  cfg.clip_grad_norm = deck.train.clip_grad_norm;
  Executor ex(ctx, rts, *be, *data.train, *data.test, cfg, std::make_unique<FakeTransport>(net, rank));
  Control control(setup.layout.stages() - 1, o.stop_at);
  const std::vector<WorkerState>* resume = o.resume ? &(*o.resume)[static_cast<size_t>(rank)] : nullptr;
  int64_t done = resume ? resume->front().epoch_start : 0;
  bool stopped = false;
  while (done < total && !stopped) {
    const int64_t epoch = done / spe;
    const int64_t steps = resume ? resume->front().epoch_steps : TrainSetup::segment_steps(done, spe, total, deck.train.eval_every);
    const Schedule ir = setup.schedule(steps);
    PT_CHECK(validate(ir).empty(), validate(ir));
    data.train->set_epoch(epoch);
    const std::vector<int64_t> full = epoch_permutation(N, static_cast<uint64_t>(deck.run.seed), epoch);
    const std::vector<int64_t> perm(full.begin() + (done - epoch * spe) * B, full.end());
    control.segment(epoch, done, steps);
    stopped = !ex.train(ir, perm, done * B, control, resume);
    resume = nullptr;
    done += steps;
  }
  Executor::EvalResult ev;
  if (!stopped) ev = ex.evaluate(make_eval_schedule(setup.layout, (data.test->size() + cfg.eval_mb - 1) / cfg.eval_mb));
  std::lock_guard<std::mutex> g(mu);
  res.weights.resize(static_cast<size_t>(setup.model->size()));
  for (StageRuntime* r : rts) {
    std::vector<float> w(r->weights->size());
    be->to_host(w.data(), r->weights->latest(), w.size());
    for (int l = r->stage->first(); l < r->stage->last(); ++l) {
      const auto at = w.begin() + r->stage->param_offset(l);
      res.weights[static_cast<size_t>(l)].assign(at, at + setup.model->layer(l).num_params());
    }
    if (r->last) res.losses = control.losses, res.norms = control.norms;
  }
  if (ctx.is_reporter()) res.eval = ev;
  res.stopped = stopped;
  res.states[static_cast<size_t>(rank)] = control.saved;
  for (const WorkerState& st : control.saved)
    res.units_at_cut += static_cast<int64_t>(st.units.size()), res.crossing_at_cut += static_cast<int64_t>(st.crossing.size());
}

Result run_pipeline(const Options& o) {
  FakeNetwork net;
  Result res;
  res.states.resize(static_cast<size_t>(o.ranks));
  std::mutex mu;
  {  // Kokkos Serial sizes its reduction scratch on the first reduce: not from two threads at once
    auto be = make_host_backend();
    Buffer x(*be, 4);
    be->fill(x.data(), 1.0f, 4);
    (void)be->sum(4, x.data());
  }
  run_ranks(net, o.ranks, [&](int rank) {
    if (o.only_rank < 0 || rank == o.only_rank) run_rank(o, rank, net, res, mu);
  });
  EXPECT_EQ(net.unmatched(), 0u) << "messages posted on one side only";
  return res;
}

Options pipeline(const std::string& sched, int ranks, const std::string& split, int microbatches,
                 std::vector<std::string> extra = {}) {
  Options o;
  o.ranks = ranks;
  o.sets = {"parallel.schedule=\"" + sched + "\"", "parallel.split=" + split, "parallel.microbatches=" + std::to_string(microbatches)};
  for (auto& s : extra) o.sets.push_back(s);
  return o;
}

void expect_same_weights(const Result& a, const Result& b, const std::string& what) {
  ASSERT_EQ(a.weights.size(), b.weights.size()) << what;
  for (size_t l = 0; l < a.weights.size(); ++l) {
    ASSERT_EQ(a.weights[l].size(), b.weights[l].size()) << what << ": layer " << l;
    EXPECT_EQ(0, std::memcmp(a.weights[l].data(), b.weights[l].data(), a.weights[l].size() * sizeof(float)))
        << what << ": layer " << l << " weights differ";
  }
}

// The pipeline against the same model on one stage of one rank: weights after training,
// every update's loss (and gradient norm) and the evaluation, bitwise. The pipeline's result
// goes to *out.
void expect_equals_one_stage(const Options& o, Result* out = nullptr) {
  Options one = o;
  one.ranks = 1;
  one.sets.push_back("parallel.split=[]");
  one.sets.push_back("parallel.schedule=\"1f1b\"");
  const Result ref = run_pipeline(one), got = run_pipeline(o);
  ASSERT_EQ(got.weights.size(), 6u);
  EXPECT_FALSE(got.weights[0].empty());
  expect_same_weights(got, ref, o.sets[0]);
  ASSERT_EQ(got.losses.size(), 6u);
  EXPECT_EQ(got.losses, ref.losses);
  EXPECT_EQ(got.norms, ref.norms);
  EXPECT_EQ(got.eval.samples, 24);
  EXPECT_EQ(got.eval.loss_sum, ref.eval.loss_sum);
  EXPECT_EQ(got.eval.correct, ref.eval.correct);
  if (out) *out = got;
}

TEST(Executor, OneFOneBOnThreeStagesEqualsOneStage) { expect_equals_one_stage(pipeline("1f1b", 3, "[2,4]", 4)); }

TEST(Executor, ZeroBubbleH1SplitBackwardOnThreeStagesEqualsOneStage) {
  expect_equals_one_stage(pipeline("zb-h1", 3, "[2,4]", 4));
}

TEST(Executor, ZeroBubbleVFourStagesOnTwoRanksEqualsOneStage) {
  expect_equals_one_stage(pipeline("zb-v", 2, "[1,2,4]", 4));
}

TEST(Executor, Bf16OneFOneBOnThreeStagesEqualsOneStage) {
  expect_equals_one_stage(pipeline("1f1b", 3, "[2,4]", 4, {"train.precision=\"bf16\""}));
}

// train.clip_grad_norm under flush schedules: the IR's GRAD_NORM gathers the per-tensor sums
// of squares of every stage over the fake network, and the clipped run is bitwise one stage's,
// norms included; the threshold is small enough that every update is clipped.
TEST(Executor, ClippedFlushSchedulesEqualOneStage) {
  for (const auto& [sched, ranks, split] : {std::tuple<const char*, int, const char*>{"1f1b", 3, "[2,4]"},
                                            {"zb-h1", 3, "[2,4]"}, {"zb-v", 2, "[1,2,4]"}}) {
    Result got;
    expect_equals_one_stage(pipeline(sched, ranks, split, 4, {"train.clip_grad_norm=0.05"}), &got);
    ASSERT_EQ(got.norms.size(), 6u) << sched;
    for (double n : got.norms) EXPECT_GT(n, 0.05) << sched << ": clipping did not act";
  }
  // clipping changes the run (the negative control of the comparison above)
  const Result plain = run_pipeline(pipeline("1f1b", 3, "[2,4]", 4));
  EXPECT_TRUE(plain.norms.empty());
  EXPECT_NE(plain.weights[4], run_pipeline(pipeline("1f1b", 3, "[2,4]", 4, {"train.clip_grad_norm=0.05"})).weights[4]);
}

// A head tied to the embedding across stages: the tied gradient counts once (the embedding's,
// after the two are summed; the head's mirror is skipped), bitwise as one stage, on 1f1b over
// two ranks (the tie exchanged between ranks) and zb-v (both holders on rank 0).
TEST(Executor, ClippedTiedModelEqualsOneStage) {
  TempDir dir;
  write_plain(dir.file("corpus.txt"), noise(12000, 7));
  Options base;
  base.deck = kTiedGpt;
  base.sets = {"data.path=" + dir.file("corpus.txt"), "train.clip_grad_norm=0.2", "parallel.microbatches=4"};
  Options one = base;
  one.sets.push_back("parallel.split=[]");
  const Result ref = run_pipeline(one);
  ASSERT_EQ(ref.norms.size(), 4u);
  for (double n : ref.norms) EXPECT_GT(n, 0.2);
  for (const auto& [sched, ranks, split] : {std::tuple<const char*, int, const char*>{"1f1b", 2, "[2]"}, {"zb-v", 2, "[1,2,3]"},
                                            {"interleaved-1f1b", 2, "[1,2,3]"}}) {
    Options o = base;
    o.ranks = ranks;
    o.sets.push_back(std::string("parallel.schedule=\"") + sched + "\"");
    o.sets.push_back("parallel.split=" + std::string(split));
    const Result got = run_pipeline(o);
    expect_same_weights(got, ref, sched);
    EXPECT_EQ(got.losses, ref.losses) << sched;
    EXPECT_EQ(got.norms, ref.norms) << sched;
    EXPECT_EQ(got.eval.loss_sum, ref.eval.loss_sum) << sched;
  }
}

// PipeDream's stale, stashed versions against the emulator's formula (docs/ARCHITECTURE.md).
TEST(Executor, PipedreamOnTwoStagesEqualsTheEmulator) {
  const Options o = pipeline("pipedream", 2, "[2]", 1);
  const Result got = run_pipeline(o);
  TempDir dir;
  write_plain(dir.file("mlp.toml"), Bytes(kMlp, kMlp + std::strlen(kMlp)));
  EmulateArgs args;
  args.deck = dir.file("mlp.toml");
  args.sets = o.sets;
  args.sets.push_back("run.output_dir=\"" + dir.path() + "\"");
  args.sets.push_back("run.name=\"emu\"");
  args.ranks = 2;
  ASSERT_EQ(cmd_emulate(args), 0);
  const Deck deck = parse_deck_text(o.deck, "executor.toml", o.sets);
  const TrainSetup setup = TrainSetup::from_deck(deck, 2);
  Result emu;
  emu.weights = read_weights_h5(dir.path() + "/emu/weights.h5", *setup.model);
  expect_same_weights(got, emu, "pipedream vs the emulator");
  // the emulator's negative control: without the stale versions (one stage) the weights differ
  Options one = o;
  one.ranks = 1;
  one.sets.push_back("parallel.split=[]");
  EXPECT_NE(run_pipeline(one).weights[0], got.weights[0]);
}

// Asynchronous schedules clip each stage's update against its share of the threshold, as
// the emulator does: pipedream (stale, stashed versions) and 2bw, bitwise.
TEST(Executor, ClippedAsynchronousSchedulesEqualTheEmulator) {
  for (const auto& [sched, mbs] : {std::pair<const char*, int>{"pipedream", 1}, {"2bw", 2}}) {
    const Options o = pipeline(sched, 2, "[2]", mbs, {"train.clip_grad_norm=0.05"});
    const Result got = run_pipeline(o);
    ASSERT_EQ(got.norms.size(), 6u);
    TempDir dir;
    write_plain(dir.file("mlp.toml"), Bytes(kMlp, kMlp + std::strlen(kMlp)));
    EmulateArgs args;
    args.deck = dir.file("mlp.toml");
    args.sets = o.sets;
    args.sets.push_back("run.output_dir=\"" + dir.path() + "\"");
    args.sets.push_back("run.name=\"emu\"");
    args.ranks = 2;
    ASSERT_EQ(cmd_emulate(args), 0);
    const Deck deck = parse_deck_text(kMlp, "executor.toml", o.sets);
    const TrainSetup setup = TrainSetup::from_deck(deck, 2);
    Result emu;
    emu.weights = read_weights_h5(dir.path() + "/emu/weights.h5", *setup.model);
    expect_same_weights(got, emu, std::string(sched) + " clipped vs the emulator");
    // the clipped run differs from the unclipped one (each stage's share of 0.05 acts)
    EXPECT_NE(run_pipeline(pipeline(sched, 2, "[2]", mbs)).weights[0], got.weights[0]) << sched;
  }
}

// Stopped after update 3 (pipedream: units forwarded and messages sent across the cut),
// then resumed from the captured states: the uninterrupted run's weights and losses.
TEST(Executor, PipedreamStoppedAtACutAndResumedEqualsUninterrupted) {
  Options o = pipeline("pipedream", 2, "[2]", 1, {"train.eval_every=0"});
  const Result full = run_pipeline(o);
  o.stop_at = 3;
  const Result first = run_pipeline(o);
  ASSERT_TRUE(first.stopped);
  EXPECT_GT(first.units_at_cut, 0) << "no unit in flight across the cut: the test would not cover restore";
  EXPECT_GT(first.crossing_at_cut, 0) << "no message across the cut";
  o.stop_at = -1;
  o.resume = &first.states;
  const Result second = run_pipeline(o);
  expect_same_weights(second, full, "resumed vs uninterrupted");
  std::vector<double> losses = first.losses;
  losses.insert(losses.end(), second.losses.begin(), second.losses.end());
  EXPECT_EQ(losses, full.losses);
  EXPECT_EQ(second.eval.loss_sum, full.eval.loss_sum);
}

// Waits go through the transport with run.comm_timeout_s's deadline: rank 1 alone waits for
// stage 0's first activation and fails, naming it.
TEST(Executor, WaitingForASilentPeerFailsAtTheDeadline) {
  Options o = pipeline("1f1b", 2, "[2]", 2);
  o.only_rank = 1;
  o.timeout_s = 0.3;
  try {
    run_pipeline(o);
    ADD_FAILURE() << "rank 1 did not time out";
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(Exit::timeout));
    EXPECT_NE(std::string(e.what()).find("no progress for 0.3 s (run.comm_timeout_s) waiting for RECV_ACT mb 0 from rank 0 "
                                         "(rank 1, stage 1); the peer is hung, dead or took another path"),
              std::string::npos)
        << e.what();
  }
}

// ---- activation recomputation -----------------------------------------------------------

// The same pipeline under parallel.recompute = none, selective and full: bitwise the same
// weights, per-update losses and evaluation (the recomputed tensors are the forward's).
void expect_recompute_equals_none(const Options& o) {
  Options none = o;
  none.sets.push_back("parallel.recompute=\"none\"");
  const Result ref = run_pipeline(none);
  ASSERT_FALSE(ref.losses.empty());
  for (const char* mode : {"selective", "full"}) {
    Options r = o;
    r.sets.push_back(std::string("parallel.recompute=\"") + mode + "\"");
    const Result got = run_pipeline(r);
    const std::string what = o.sets[0] + " recompute " + mode;
    expect_same_weights(got, ref, what);
    EXPECT_EQ(got.losses, ref.losses) << what;
    EXPECT_EQ(got.eval.loss_sum, ref.eval.loss_sum) << what;
    EXPECT_EQ(got.eval.correct, ref.eval.correct) << what;
  }
}

// The tiny transformer over a small corpus written for the test.
struct GptCorpus {
  TempDir dir;
  GptCorpus() {
    std::string text;
    for (int i = 0; text.size() < 6000; ++i) text += "line " + std::to_string(i * 7919 % 1000) + " of the corpus; ";
    write_plain(dir.file("corpus.txt"), Bytes(text.begin(), text.end()));
  }
  Options pipeline(const std::string& sched, int ranks, const std::string& split, int microbatches, bool untie = false) const {
    Options o = test::pipeline(sched, ranks, split, microbatches, {"data.path=\"" + dir.file("corpus.txt") + "\""});
    o.deck = kGpt;
    if (untie) o.sets.push_back("model.layers.5.tie=\"\"");  // tied layers across stages need a flush schedule
    return o;
  }
};

TEST(Recompute, MlpUnderEveryScheduleFamilyEqualsNone) {
  expect_recompute_equals_none(pipeline("1f1b", 3, "[2,4]", 4));
  expect_recompute_equals_none(pipeline("zb-h1", 3, "[2,4]", 4));
  expect_recompute_equals_none(pipeline("zb-v", 2, "[1,2,4]", 4));
  expect_recompute_equals_none(pipeline("pipedream", 2, "[2]", 1));
  expect_recompute_equals_none(pipeline("1f1b", 3, "[2,4]", 4, {"train.precision=\"bf16\""}));
}

TEST(Recompute, TransformerFlushSchedulesEqualNone) {
  const GptCorpus c;
  expect_recompute_equals_none(c.pipeline("1f1b", 3, "[2,4]", 4));
  expect_recompute_equals_none(c.pipeline("zb-h1", 3, "[2,4]", 4));
  expect_recompute_equals_none(c.pipeline("zb-v", 2, "[1,3,4]", 4));
  expect_recompute_equals_none(c.pipeline("interleaved-1f1b", 2, "[1,3,4]", 4));
}

TEST(Recompute, TransformerAsynchronousSchedulesEqualNone) {
  const GptCorpus c;
  expect_recompute_equals_none(c.pipeline("pipedream", 2, "[3]", 1, true));
  expect_recompute_equals_none(c.pipeline("2bw", 2, "[3]", 4, true));
}

TEST(Recompute, TransformerBf16EqualsNone) {
  const GptCorpus c;
  Options o = c.pipeline("zb-h1", 2, "[3]", 4);
  o.sets.push_back("train.precision=\"bf16\"");
  expect_recompute_equals_none(o);
}

TEST(Recompute, PerStageModesEqualNone) {
  const GptCorpus c;
  Options o = c.pipeline("1f1b", 3, "[2,4]", 4);
  o.sets.push_back("parallel.recompute=[\"full\", \"selective\", \"none\"]");
  Options none = c.pipeline("1f1b", 3, "[2,4]", 4);
  const Result a = run_pipeline(o), b = run_pipeline(none);
  expect_same_weights(a, b, "per-stage recompute");
  EXPECT_EQ(a.losses, b.losses);
}

// Stopped at a pipedream cut (units in flight hold only their input and output under full),
// resumed from the captured states: the uninterrupted run; and units captured whole (none)
// resume into a fully recomputing stage as its input and output.
TEST(Recompute, PipedreamCutAndResumeEqualsUninterrupted) {
  const GptCorpus c;
  Options o = c.pipeline("pipedream", 2, "[3]", 1, true);
  o.sets.push_back("train.eval_every=0");
  const Result full = run_pipeline(o);
  for (const char* captured : {"full", "none"}) {
    Options cut = o;
    cut.sets.push_back(std::string("parallel.recompute=\"") + captured + "\"");
    cut.stop_at = 3;
    const Result first = run_pipeline(cut);
    ASSERT_TRUE(first.stopped);
    EXPECT_GT(first.units_at_cut, 0) << "no unit in flight across the cut";
    Options resumed = o;
    resumed.sets.push_back("parallel.recompute=\"full\"");
    resumed.resume = &first.states;
    const Result second = run_pipeline(resumed);
    expect_same_weights(second, full, std::string("captured under ") + captured + ", resumed under full");
    std::vector<double> losses = first.losses;
    losses.insert(losses.end(), second.losses.begin(), second.losses.end());
    EXPECT_EQ(losses, full.losses) << captured;
  }
}

}  // namespace
}  // namespace pt::test
