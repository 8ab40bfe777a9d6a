// The memory model (memory_model.hpp): its stage footprints are the engine's own allocations
// (a Stage, its StagePools, WeightStore and evaluation buffers built for real report the
// same sizes), the short IR it reads units in flight and versions from gives what the whole
// segment's IR gives for every registered schedule, the evaluation microbatch that
// train.eval_batch_size = 0 picks fits its share of the budget, the fit check's message
// names the rank, category, budget and remedies, data_info predicts what the opened data
// hold, and a convolution's kernel bytes are what its oneDNN plan keeps once run.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <malloc.h>
#include <fstream>
#include <memory>
#include <string>
#include <unistd.h>

#include "../../src/kernels/host/host_backend.hpp"
#include "../../src/kernels/host/onednn.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/engine.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

const char* kDeck =
    "[data]\nsource = \"synthetic\"\nshape = [6]\nclasses = 3\ntrain_samples = 64\ntest_samples = 40\n"
    "[model]\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 5\n"
    "[[model.layers]]\ntype = \"relu\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 4\n"
    "[[model.layers]]\ntype = \"layernorm\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 3\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n"
    "[train]\nbatch_size = 8\nmax_steps = 4\noptimizer = \"adamw\"\n"
    "[parallel]\nsplit = [2, 4]\nmicrobatches = 4\n";

Deck deck_with(const std::vector<std::string>& sets) { return parse_deck_text(kDeck, "mem.toml", sets); }

// Every stage of a 3-stage layout, built as the trainer builds it, reports what the model's
// footprint says, for a fused and a split backward, in fp32 and bf16, without and with full
// recomputation (its recompute buffers: 1 + the units between an I and its W).
TEST(MemoryModel, FootprintsAreWhatTheEngineAllocates) {
  for (const Recompute rc : {Recompute::none, Recompute::full})
  for (const char* sched : {"1f1b", "zb-h1", "pipedream"})
    for (const char* prec : {"fp32", "bf16"}) {
      const Deck deck = deck_with({std::string("parallel.schedule=\"") + sched + "\"", std::string("train.precision=\"") + prec + "\"",
                                   std::string("parallel.microbatches=") + (std::string(sched) == "pipedream" ? "1" : "4")});
      const TrainSetup setup = TrainSetup::from_deck(deck, 3);
      const bool bf16 = deck.train.precision == Precision::bf16;
      auto be = make_host_backend();
      const Schedule ir = make_schedule(*setup.def, setup.layout, 4, setup.microbatches);
      ModelMemoryInputs mi;
      mi.bf16 = bf16, mi.optimizer_states = 2, mi.labels_per_sample = 1, mi.eval_mb = 7;
      const auto src = model_footprints(*setup.model, mi);
      for (int s = 0; s < 3; ++s) {
        StageRuntime r(*be, *setup.model, setup.layout, s, setup.mb_size, 7, setup.def->split_backward, deck.train, 4, rc);
        r.pools.prepare(ir, s, s, setup.mb_size, 1);
        r.weights->prepare(ir, s, s);
        r.eval_buffers(7);
        const StageFootprint f =
            src->stage(setup.layout.first_layer(s), setup.layout.end_layer(s), setup.mb_size, setup.def->split_backward, rc);
        const std::string what = std::string(sched) + " " + prec + " " + enum_name(rc) + " stage " + std::to_string(s);
        EXPECT_EQ(f.geo.slot_floats, r.stage->unit_floats()) << what;
        EXPECT_EQ(f.geo.layout_floats, r.stage->slot_floats()) << what;
        const int rec = rc == Recompute::full ? 1 + max_between_i_and_w(ir, s, s) : 0;
        EXPECT_EQ(rec * f.geo.recompute_floats * 4, r.pools.recompute_bytes()) << what;
        if (rc == Recompute::full) { EXPECT_LT(f.geo.slot_floats, f.geo.layout_floats) << what; }
        EXPECT_EQ(f.params, r.stage->num_params()) << what;
        const int n = r.pools.size(), v = r.weights->max_held();
        EXPECT_EQ(n, max_in_flight(ir, s, s)) << what;
        EXPECT_EQ(n * (f.unit.activation_bytes() - f.unit.labels * 4) + r.pools.recompute_bytes(), r.pools.activation_bytes()) << what;
        EXPECT_EQ(stage_memory(f, n, v, rec)[MemCategory::activations] - stage_memory(f, n, v, 0)[MemCategory::activations],
                  r.pools.recompute_bytes()) << what;
        EXPECT_EQ(n * f.unit.buffer_bytes(), r.pools.buffer_bytes()) << what;
        EXPECT_EQ(WeightStore::sizes(static_cast<size_t>(f.params), bf16, max_versions_held(ir, s, s)).bytes(), r.weights->bytes()) << what;
        EXPECT_EQ(static_cast<int64_t>(r.grads.bytes()), (f.params + 1) * 4) << what;
        int64_t opt = 0;
        for (Buffer* b : r.opt->state()) opt += static_cast<int64_t>(b->bytes());
        EXPECT_EQ(opt, f.optimizer_floats * 4) << what;
        const StageRuntime::EvalBuffers& eb = r.eval_buffers(7);
        EXPECT_EQ(static_cast<int64_t>(eb.in[0].bytes() + eb.in[1].bytes() + eb.out[0].bytes() + eb.out[1].bytes()) +
                      (r.last ? f.eval.labels * 4 : 0),
                  f.eval.bytes()) << what;
        (void)v;
      }
    }
}

// Backend::conv_kernel_bytes before a convolution ran equals what the oneDNN plans keep after
// its forward, weight and data passes (layout copies, bf16 copies, accumulators), in both
// precisions, and the evaluation's forward at another size adds its own plan.
TEST(MemoryModel, ConvKernelBytesAreWhatThePlansKeep) {
  WindowGeom g;
  g.c_in = 32, g.h_in = g.w_in = 14, g.c_out = 64, g.h_out = g.w_out = 14, g.kernel = 3, g.padding = 1;
  const int64_t n = 8, e = 5, in = n * 32 * 14 * 14, out = n * 64 * 14 * 14, wn = 64 * 32 * 9;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    host::HostBackend be;
    const ConvKernelBytes train = be.conv_kernel_bytes(g, n, true, true, true, p), eval = be.conv_kernel_bytes(g, e, true, false, false, p);
    EXPECT_GT(train.kept, 0);
    std::vector<float> x(in, 0.5f), y(out), dy(out, 0.25f), dx(in), w(wn, 0.1f), b(64, 0.0f), dw(wn), db(64);
    be.conv2d_forward(g, n, x.data(), w.data(), b.data(), y.data(), p);
    be.conv2d_backward(g, n, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), p);
    EXPECT_EQ(be.onednn().conv_plans_bytes(), train.kept) << (p == Precision::bf16 ? "bf16" : "fp32");
    be.conv2d_forward(g, e, x.data(), w.data(), b.data(), y.data(), p);
    EXPECT_EQ(be.onednn().conv_plans_bytes(), train.kept + eval.kept) << (p == Precision::bf16 ? "bf16" : "fp32");
  }
}

// A bf16 convolution whose activations lie in the layout conv_layout names and arrive as
// bf16 views (the residual block's copies) keeps no rounded copy of them: its plans keep
// exactly conv_kernel_bytes(io), and less than the same passes fed fp32 tensors in that
// layout, which round each into a copy at first use (the ports allocate it then, not before).
TEST(MemoryModel, Bf16ViewsInTheConvolutionsLayoutKeepNoRoundedCopy) {
  WindowGeom g;
  g.c_in = 32, g.h_in = g.w_in = 14, g.c_out = 32, g.h_out = g.w_out = 14, g.kernel = 3, g.padding = 1;
  const int64_t n = 8, count = n * 32 * 14 * 14, wn = 32 * 32 * 9;
  const Precision p = Precision::bf16;
  host::HostBackend views, floats;
  const ImageLayout l = views.conv_layout(g, n, p);
  if (l == ImageLayout::nchw) GTEST_SKIP() << "oneDNN takes NCHW for this convolution here: no bf16 views in another layout";
  if (views.onednn().widens_bf16()) GTEST_SKIP() << "bf16 widened to fp32: every input gets its widened copy";
  const ConvLayouts io{l, l};
  const ConvKernelBytes want = views.conv_kernel_bytes(g, n, false, true, true, p, io);
  std::vector<float> x(count, 0.5f), dy(count, 0.25f), y(count), dx(count), w(wn, 0.1f), dw(wn);
  std::vector<float> xb(count / 2), dyb(count / 2);
  views.pack_bf16(x.size(), x.data(), xb.data());
  views.pack_bf16(dy.size(), dy.data(), dyb.data());
  views.conv2d_forward(g, n, as_bf16(xb.data()), w.data(), nullptr, y.data(), p, io);
  views.conv2d_backward(g, n, as_bf16(xb.data()), w.data(), as_bf16(dyb.data()), dx.data(), dw.data(), nullptr, p, io);
  EXPECT_EQ(views.onednn().conv_plans_bytes(), want.kept);
  floats.conv2d_forward(g, n, x.data(), w.data(), nullptr, y.data(), p, io);
  floats.conv2d_backward(g, n, x.data(), w.data(), dy.data(), dx.data(), dw.data(), nullptr, p, io);
  EXPECT_LT(views.onednn().conv_plans_bytes(), floats.onednn().conv_plans_bytes());
}

// What a convolution's plan keeps besides its ports (ConvKernelBytes::held: measured once
// per process, shape and pass, rounded up to 64 KiB) is positive, the same from another
// backend of the process, and with the plans' ports it accounts for the heap a fresh
// backend's passes keep, within the library's scratchpad and 10% (malloc's own bookkeeping,
// oneDNN's small caches).
TEST(MemoryModel, ConvHeldIsWhatThePrimitivesKeep) {
  auto heap = [] {
    const struct mallinfo2 m = mallinfo2();
    return static_cast<int64_t>(m.uordblks + m.hblkhd);
  };
  WindowGeom g;
  g.c_in = 32, g.h_in = g.w_in = 14, g.c_out = 64, g.h_out = g.w_out = 14, g.kernel = 3, g.padding = 1;
  const int64_t n = 8, in = n * 32 * 14 * 14, out = n * 64 * 14 * 14, wn = 64 * 32 * 9;
  for (Precision p : {Precision::fp32, Precision::bf16}) {
    SCOPED_TRACE(p == Precision::bf16 ? "bf16" : "fp32");
    host::HostBackend a;
    const ConvKernelBytes k = a.conv_kernel_bytes(g, n, true, true, true, p);
    EXPECT_GT(k.held, 0);
    EXPECT_EQ(a.conv_kernel_bytes(g, n, true, true, true, p).held, k.held);
    std::vector<float> x(in, 0.5f), y(out), dy(out, 0.25f), dx(in), w(wn, 0.1f), b(64, 0.0f), dw(wn), db(64);
    const int64_t before = heap();
    auto fresh = std::make_unique<host::HostBackend>();
    fresh->conv2d_forward(g, n, x.data(), w.data(), b.data(), y.data(), p);
    fresh->conv2d_backward(g, n, x.data(), w.data(), dy.data(), dx.data(), dw.data(), db.data(), p);
    const int64_t kept = heap() - before, model = fresh->onednn().conv_plans_bytes() + k.held;
    EXPECT_LE(std::llabs(kept - model), k.scratchpad + kept / 10) << "kept " << kept << ", model " << model;
    fresh.reset();
    host::HostBackend c;
    EXPECT_EQ(c.conv_kernel_bytes(g, n, true, true, true, p).held, k.held) << "remembered for the process";
  }
}

// The IR of memory_ir_steps minibatches holds as many units in flight and weight versions,
// on every rank and stage, as the whole segment's, for every registered schedule.
TEST(MemoryModel, ShortIrHasTheSegmentsUnitsAndVersions) {
  struct Case {
    std::vector<int> first, reps;
    Placement placement;
    int layers;
  };
  const std::vector<Case> cases = {{{0}, {1}, Placement::contiguous, 8},      {{0, 4}, {1, 1}, Placement::contiguous, 8},
                                   {{0, 2, 5}, {1, 1, 1}, Placement::contiguous, 8}, {{0, 4}, {2, 1}, Placement::contiguous, 8},
                                   {{0, 3}, {2, 2}, Placement::contiguous, 8},  {{0, 2, 4, 6}, {1, 1}, Placement::looped, 8},
                                   {{0, 2, 4, 6}, {1, 1}, Placement::v, 8},     {{0, 1, 2, 3, 4, 5, 6, 7}, {1, 1, 1, 1}, Placement::v, 8}};
  int checked = 0;
  for (const ScheduleDef* def : schedule_defs()) {
    if (!def->deck_choice) continue;
    for (const Case& c : cases) {
      if (c.placement != def->placement) continue;
      const Layout l = Layout::make(c.first, c.layers, c.reps, c.placement);
      for (int M : {1, 2, 4, 8}) {
        if (!def->problem(l, M).empty()) continue;
        const int64_t stride = def->boundary_stride(l);
        const int64_t longest = stride * 24;
        const int64_t steps = memory_ir_steps(*def, l, M, longest);
        ASSERT_LE(steps, longest);
        const Schedule shorter = make_schedule(*def, l, steps, M), whole = make_schedule(*def, l, longest, M);
        for (int r = 0; r < l.ranks(); ++r)
          for (int s : l.stages_of_rank(r)) {
            EXPECT_EQ(max_in_flight(shorter, r, s), max_in_flight(whole, r, s)) << def->name << " " << l.str() << " M=" << M;
            EXPECT_EQ(max_versions_held(shorter, r, s), max_versions_held(whole, r, s)) << def->name << " " << l.str() << " M=" << M;
          }
        ++checked;
      }
    }
  }
  EXPECT_GT(checked, 40);
}

TEST(MemoryModel, EvalBatchSizedToFitItsShare) {
  const Deck deck = deck_with({});
  EXPECT_EQ(deck.train.eval_batch_size, 0);  // auto is the default
  const TrainSetup setup = TrainSetup::from_deck(deck, 3);
  // no budget known: the cap (and the test set)
  EXPECT_EQ(resolve_eval_batch(deck, *setup.model, 40, 1, 0), 40);
  EXPECT_EQ(resolve_eval_batch(deck, *setup.model, 1000, 1, 0), kEvalAutoMax);
  // a tight budget: the largest e whose evaluation buffers fit 1/8 of it
  for (int64_t budget : {int64_t{20000}, int64_t{60000}, int64_t{200000}}) {
    const int64_t e = resolve_eval_batch(deck, *setup.model, 1000, 1, budget);
    ModelMemoryInputs mi;
    auto bytes = [&](int64_t x) {
      mi.eval_mb = x;
      return stage_memory(model_footprints(*setup.model, mi)->stage(0, setup.model->size(), 1, false, Recompute::none), 1, 1)[MemCategory::evaluation];
    };
    EXPECT_GE(e, 1);
    if (e > 1) { EXPECT_LE(static_cast<double>(bytes(e)), kEvalBudgetShare * static_cast<double>(budget)) << budget; }
    if (e < kEvalAutoMax) { EXPECT_GT(static_cast<double>(bytes(e + 1)), kEvalBudgetShare * static_cast<double>(budget)) << budget; }
  }
  // an explicit size is kept (at most the test set)
  const Deck fixed = deck_with({"train.eval_batch_size=500"});
  EXPECT_EQ(resolve_eval_batch(fixed, *setup.model, 1000, 1, 1), 500);
  EXPECT_EQ(resolve_eval_batch(fixed, *setup.model, 40, 1, 1), 40);
}

TEST(MemoryModel, FitCheckNamesRankCategoryBudgetAndRemedies) {
  const Deck deck = deck_with({"cluster.memory=1e5"});
  const TrainSetup setup = TrainSetup::from_deck(deck, 3);
  RunMemoryInputs in;
  in.train_samples = 64, in.test_samples = 40, in.base = {1000};
  const std::vector<RankMemory> est = run_memory(deck, setup, in, 8);
  ASSERT_EQ(est.size(), 3u);
  for (const RankMemory& m : est) EXPECT_EQ(m[MemCategory::runtime], 1000);
  MemoryBudget big = memory_budget(deck, 3);
  EXPECT_TRUE(big.from_deck);
  EXPECT_EQ(big.bytes, 100000);
  big.bytes = int64_t{1} << 40;
  EXPECT_EQ(fit_problem(deck, setup, est, {big}, 8), "");
  MemoryBudget tight = memory_budget(deck, 3);
  tight.bytes = est[1].total() - 1;  // rank 0 fits, rank 1 does not
  std::vector<MemoryBudget> budgets = {big, tight, big};
  const std::string msg = fit_problem(deck, setup, est, budgets, 8);
  EXPECT_NE(msg.find("rank 1 does not fit in memory"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::string("(largest: ") + memory_category_name(est[1].largest())), std::string::npos) << msg;
  EXPECT_NE(msg.find("from cluster.memory (command line '--set cluster.memory=1e5')"), std::string::npos) << msg;
  for (const char* remedy : {"parallel.microbatches = 4", "parallel.recompute", "more stages", "train.eval_batch_size = 8"})
    EXPECT_NE(msg.find(remedy), std::string::npos) << remedy << ": " << msg;
}

// A replicated stage's gradient allreduce reduces through MPI's scratch copy of the message
// (gpt2_small split [7], replicas [2, 2]: replica 1's peak 1.25 GB, its estimate 1.08 GB
// without it); a snapshot never overlaps a reduction and reuses that room. So both replicas
// of a stage are estimated alike, a checkpoint's copies are unchanged, and a stage without
// replicas has no scratch.
TEST(MemoryModel, ReplicasReduceThroughAScratchCopyThatSnapshotsReuse) {
  StageFootprint f;
  f.params = 1 << 20;
  MemoryShared none;
  none.checkpoints = false;
  auto terms = [&](bool replica0, int64_t scratch, const MemoryShared& s) {
    RankMemory m;
    RankRole role;
    role.replica0 = replica0, role.allreduce_bytes = scratch;
    add_rank_terms(m, {&f}, s, role);
    return m;
  };
  const int64_t scratch = replica_allreduce_bytes(f);
  EXPECT_GE(scratch, f.params * 4);
  const RankMemory r0 = terms(true, scratch, none), r1 = terms(false, scratch, none), alone = terms(true, 0, none);
  EXPECT_EQ(r0.total(), r1.total()) << "replica 0's end-of-run copy fits in the room replica 1's allreduce took";
  EXPECT_EQ(r1[MemCategory::messages] - alone[MemCategory::messages], scratch);
  EXPECT_EQ(r0[MemCategory::snapshots], 0);
  EXPECT_GT(alone[MemCategory::snapshots], 0) << "unreplicated, replica 0 copies its weights at the end";
  EXPECT_LE(alone[MemCategory::snapshots], scratch);
  MemoryShared ckpt = none;
  ckpt.checkpoints = true;
  const RankMemory c0 = terms(true, scratch, ckpt), c_alone = terms(true, 0, ckpt);
  EXPECT_EQ(c0.total(), c_alone.total()) << "a checkpoint's copies are larger than the scratch: the peak is theirs";
}

// A checkpoint's weights and optimizer state are written by replica 0 only, so only it copies
// them to the host (Trainer::drained_states, Executor::capture); every replica copies its
// running state. On --resume every replica reads them (replica 0's file) and holds them.
TEST(MemoryModel, OnlyReplicaZeroCopiesACheckpointsWeightsUnlessResuming) {
  StageFootprint f;
  f.params = 1 << 20, f.state = 1 << 10;
  auto snapshots = [&](bool replica0, bool resuming, bool cut = false) {
    MemoryShared s;
    s.checkpoints = true, s.resuming = resuming, s.mid_segment = cut;
    RankMemory m;
    RankRole role;
    role.replica0 = replica0, role.asynchronous = cut;
    add_rank_terms(m, {&f}, s, role);
    return m[MemCategory::snapshots];
  };
  const int64_t weights = f.params * 4, state = f.state * 4;
  EXPECT_GE(snapshots(true, false), 2 * weights + state) << "replica 0: its weights, their read-back buffer, the state";
  EXPECT_GE(snapshots(false, false), 2 * state);
  EXPECT_LT(snapshots(false, false), weights) << "replica 1 copies only its running state";
  EXPECT_EQ(snapshots(false, true), snapshots(true, true)) << "resuming, every replica holds what it loaded";
  f.unit.slot_floats = 1 << 16;  // a cut inside an asynchronous segment: the file's largest dataset may be a unit's slot
  EXPECT_GE(snapshots(false, false, true), state + f.unit.slot_floats * 4) << "the state, and the slot read back";
}

// data_info predicts the samples and bytes open_data's splits hold.
TEST(MemoryModel, DataInfoPredictsTheHeldBytes) {
  char dir[] = "/tmp/pt_memdata.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string text = std::string(dir) + "/corpus.txt";
  {
    std::ofstream f(text);
    for (int i = 0; i < 400; ++i) f << "line " << i << " of a small corpus for the memory model test\n";
  }
  std::vector<std::vector<std::string>> decks = {{}, {"data.source=\"text\"", "data.path=\"" + text + "\"", "data.seq_len=16"}};
  if (access("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz", R_OK) == 0) decks.push_back({"data.source=\"fashion-mnist\""});
  for (const auto& sets : decks) {
    const Deck d = deck_with(sets);
    const DataInfo info = data_info(d);
    const DataSplit s = open_data(d);
    EXPECT_EQ(info.train_samples, s.train->size()) << enum_name(d.data.source);
    EXPECT_EQ(info.test_samples, s.test->size()) << enum_name(d.data.source);
    EXPECT_EQ(info.held_bytes, s.train->held_bytes() + s.test->held_bytes()) << enum_name(d.data.source);
  }
  std::remove(text.c_str());
  rmdir(dir);
}

}  // namespace
}  // namespace pt
