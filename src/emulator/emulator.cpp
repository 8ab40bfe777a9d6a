// The sequential emulator: one process, the same layers, and each schedule's update rule
// applied literally from its formula (not from the schedule IR), keeping every old weight
// version it needs. It is the reference the distributed asynchronous runs are tested
// against (docs/ARCHITECTURE.md, "Weight versions").
//
// Version ids count minibatches applied to a stage. For minibatch (unit) m of an epoch,
// stage s with r_s replicas and 1F1B depth d_s = ceil(ranks in stages >= s / r_s):
//   pipedream         forward = backward = r_s * max(0, floor(m / r_s) - d_s + 1)
//                     (straight pipeline: max(0, m - K + 1 + s), the paper's w_s(t-K+1+s))
//   pipedream-vsync   forward = backward = r_s * floor(v_0(m) / r_s), v_0 = stage 0's version
//   pipedream-nostash forward as pipedream; backward = the latest, r_s * floor(m / r_s)
//   2bw               batch t = floor(m / M): forward = backward = max(0, t - 1)  (W(t-1))
//   flush schedules   forward = backward = floor(m / M)
// with m counted from the start of the segment (an epoch, or up to the next evaluation with
// train.eval_every): the pipeline drains at segment ends.
// A stage's update applies the gradients of its group (r_s minibatches for the pipedream
// family, averaged; the M microbatches of a batch otherwise, summed with loss scale 1/B).
// In bf16 (train.precision) forward and backward read the bf16 copy of the version
// (round_bf16 of every parameter), as the runtime's WeightStore does; the versions kept and
// updated are fp32.
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

struct StageState {
  std::unique_ptr<Stage> stage;
  Buffer slot_mem, grads, dx, state;
  int32_t* labels = nullptr;
  Stage::Slot slot;
  std::map<int64_t, std::vector<float>> versions;  // absolute id -> weights
  int64_t latest = 0;
  std::unique_ptr<Optimizer> opt;
  std::vector<float> compute;  // bf16: the bf16 copy of version compute_id
  int64_t compute_id = -1;
};

// The parameters compute reads of version id: its fp32 weights, or in bf16 their bf16 copy
// (a version's values never change once made, so the copy is kept while id is read again).
const float* compute_params(Backend& be, StageState& x, int64_t id, int stage, bool bf16) {
  auto it = x.versions.find(id);
  PT_CHECK(it != x.versions.end(), "emulator: stage " << stage << " lacks version " << id);
  if (!bf16) return it->second.data();
  if (x.compute_id != id) {
    x.compute.resize(it->second.size());
    be.round_bf16(it->second.size(), it->second.data(), x.compute.data());
    x.compute_id = id;
  }
  return x.compute.data();
}

int64_t pipedream_version(int64_t m, int r, int d) {
  return static_cast<int64_t>(r) * std::max<int64_t>(0, m / r - d + 1);
}

}  // namespace

int cmd_emulate(const EmulateArgs& a) {
  const Deck deck = load_deck(a.deck, a.sets);
  TrainSetup setup = TrainSetup::from_deck(deck, a.ranks);
  const Layout& L = setup.layout;
  const Model& model = *setup.model;
  const int K = L.stages();
  const int M = setup.microbatches;
  const int64_t B = deck.train.batch_size, mb = setup.mb_size;
  DataSplit data = open_data(deck);
  const int64_t N = data.train->size();
  const int64_t spe = setup.steps_per_epoch(deck, N), total = setup.total_steps(deck, N);
  auto be = make_host_backend();
  be->set_precision(deck.train.precision);
  const bool bf16 = deck.train.precision == Precision::bf16;
  const uint64_t seed = static_cast<uint64_t>(deck.run.seed);

  std::vector<StageState> st(static_cast<size_t>(K));
  for (int s = 0; s < K; ++s) {
    StageState& x = st[static_cast<size_t>(s)];
    x.stage = std::make_unique<Stage>(*be, model, L.first_layer(s), L.end_layer(s), mb, 1);
    x.stage->set_activation_bf16(deck.train.precision == Precision::bf16);
    x.slot_mem = Buffer(*be, static_cast<size_t>(x.stage->slot_floats()));
    x.labels = be->alloc_int(static_cast<size_t>(mb * data.train->label_count()));
    x.slot = x.stage->carve(x.slot_mem.data(), x.labels);
    std::vector<float> init(static_cast<size_t>(x.stage->num_state()));
    x.stage->init_state(init.data());
    x.state = Buffer(*be, init.size());
    if (!init.empty()) be->from_host(x.state.data(), init.data(), init.size());
    x.grads = Buffer(*be, static_cast<size_t>(x.stage->num_params()));
    x.dx = Buffer(*be, static_cast<size_t>(mb * x.stage->in_shape().numel()));
    std::vector<float> w(static_cast<size_t>(x.stage->num_params()));
    x.stage->init_params(w.data(), seed);
    x.versions[0] = w;
    const int64_t stride = setup.per_minibatch_units() ? L.replicas[static_cast<size_t>(s)] : 1;
    x.opt = std::make_unique<Optimizer>(optim_config(deck.train), *be, w.size(), std::max<int64_t>(1, total / stride));
  }

  std::vector<double> step_loss;
  std::vector<float> host_x(static_cast<size_t>(mb * model.input_shape().numel()));
  std::vector<int32_t> host_labels(static_cast<size_t>(mb * data.train->label_count()));
  std::vector<int64_t> idx(static_cast<size_t>(mb));
  int64_t done = 0;
  // the same segments as a run: up to each epoch end or evaluation, where the pipeline drains
  while (done < total) {
    const int64_t epoch = done / spe, in_epoch = done - epoch * spe;
    const int64_t steps = TrainSetup::segment_steps(done, spe, total, deck.train.eval_every);
    const int64_t U = steps * M;
    data.train->set_epoch(epoch);
    const std::vector<int64_t> full = epoch_permutation(N, seed, epoch);
    const std::vector<int64_t> perm(full.begin() + in_epoch * B, full.end());
    std::vector<int64_t> base(static_cast<size_t>(K));
    for (int s = 0; s < K; ++s) base[static_cast<size_t>(s)] = st[static_cast<size_t>(s)].latest;
    double loss_acc = 0;
    for (int64_t m = 0; m < U; ++m) {
      // versions read by forward and backward, from the formulas above
      std::vector<int64_t> vf(static_cast<size_t>(K)), vb(static_cast<size_t>(K));
      const int64_t v0 = pipedream_version(m, L.replicas[0], L.in_flight_depth(0));
      for (int s = 0; s < K; ++s) {
        const int r = L.replicas[static_cast<size_t>(s)], d = L.in_flight_depth(s);
        int64_t f = 0, b = 0;
        switch (setup.def->versions) {
          case VersionRule::stash: f = b = pipedream_version(m, r, d); break;
          case VersionRule::vsync: f = b = r * (v0 / r); break;
          case VersionRule::nostash: f = pipedream_version(m, r, d); b = r * (m / r); break;
          case VersionRule::two_bw: f = b = std::max<int64_t>(0, m / M - 1); break;
          default: f = b = m / M;
        }
        vf[static_cast<size_t>(s)] = base[static_cast<size_t>(s)] + f;
        vb[static_cast<size_t>(s)] = base[static_cast<size_t>(s)] + b;
      }
      for (int64_t j = 0; j < mb; ++j) idx[static_cast<size_t>(j)] = perm[static_cast<size_t>(m * mb + j)];
      data.train->get(idx.data(), mb, host_x.data(), host_labels.data());
      const int64_t sample0 = done * B + m * mb;
      // forward through every stage
      for (int s = 0; s < K; ++s) {
        StageState& x = st[static_cast<size_t>(s)];
        if (s == 0) be->from_host(x.slot.input, host_x.data(), host_x.size());
        else be->copy(x.slot.input, st[static_cast<size_t>(s - 1)].stage->output(st[static_cast<size_t>(s - 1)].slot),
                      static_cast<size_t>(mb * x.stage->in_shape().numel()));
        if (s == K - 1) be->labels_from_host(x.labels, host_labels.data(), host_labels.size());
        const float* w = compute_params(*be, x, vf[static_cast<size_t>(s)], s, bf16);
        LayerCtx ctx{*be, seed, sample0, true, x.labels, 1.0f / static_cast<float>(B)};
        ctx.state = x.state.data();
        x.stage->forward(x.slot, w, ctx, mb, PollHook{});
      }
      StageState& last = st[static_cast<size_t>(K - 1)];
      loss_acc += be->sum(static_cast<size_t>(mb), last.stage->output(last.slot));
      // backward through every stage
      for (int s = K - 1; s >= 0; --s) {
        StageState& x = st[static_cast<size_t>(s)];
        const float* w = compute_params(*be, x, vb[static_cast<size_t>(s)], s, bf16);
        const float* dy = s == K - 1 ? nullptr : st[static_cast<size_t>(s + 1)].dx.data();
        LayerCtx ctx{*be, seed, sample0, true, x.labels, 1.0f / static_cast<float>(B)};
        ctx.state = x.state.data();
        x.stage->backward(x.slot, w, x.grads.data(), dy, s == 0 ? nullptr : x.dx.data(), ctx, mb, PollHook{});
      }
      // updates of the groups this unit completes
      for (int s = 0; s < K; ++s) {
        StageState& x = st[static_cast<size_t>(s)];
        const int r = L.replicas[static_cast<size_t>(s)];
        const bool group_done = setup.per_minibatch_units() ? (m + 1) % r == 0 : (m + 1) % M == 0;
        if (!group_done) continue;
        const int64_t stride = setup.per_minibatch_units() ? r : 1;
        std::vector<float> w = x.versions.at(x.latest);
        x.opt->step(w.data(), x.grads.data(), 1.0f / static_cast<float>(stride));
        be->fill(x.grads.data(), 0.0f, static_cast<size_t>(x.stage->num_params()));
        x.latest += stride;
        x.versions[x.latest] = std::move(w);
      }
      // drop versions no later unit reads (version ids read are nondecreasing in m)
      for (int s = 0; s < K; ++s) {
        StageState& x = st[static_cast<size_t>(s)];
        const int64_t keep = std::min(vf[static_cast<size_t>(s)], vb[static_cast<size_t>(s)]);
        for (auto it = x.versions.begin(); it != x.versions.end();)
          it = (it->first < keep && it->first != x.latest) ? x.versions.erase(it) : std::next(it);
      }
      if ((m + 1) % M == 0) {
        step_loss.push_back(loss_acc / static_cast<double>(B));
        loss_acc = 0;
      }
    }
    // the segment's IR drains: only the latest versions survive
    for (auto& x : st)
      for (auto it = x.versions.begin(); it != x.versions.end();)
        it = it->first != x.latest ? x.versions.erase(it) : std::next(it);
    done += steps;
  }

  const std::string dir = deck.run.output_dir + "/" + deck.run.name;
  make_dirs(dir);
  write_file_atomic(dir + "/deck.toml", deck.effective_toml());
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(model.size()));
  for (int s = 0; s < K; ++s) {
    const StageState& x = st[static_cast<size_t>(s)];
    const std::vector<float>& w = x.versions.at(x.latest);
    for (int l = L.first_layer(s); l < L.end_layer(s); ++l) {
      const int64_t off = x.stage->param_offset(l), n = model.layer(l).num_params();
      per_layer[static_cast<size_t>(l)].assign(w.begin() + off, w.begin() + off + n);
    }
  }
  write_weights_h5(dir + "/weights.h5", model, per_layer, deck, data.train->input_transform());
  nlohmann::json j = {{"emulated_schedule", setup.def->name}, {"layout", L.str()}, {"steps", total},
                      {"step_losses", step_loss}};
  write_file_atomic(dir + "/emulator.json", j.dump(1) + "\n");
  for (auto& x : st) be->release_int(x.labels);
  std::printf("emulated %s on %s for %lld steps; final step loss %.6f; wrote %s/{weights.h5, emulator.json}\n",
              setup.def->name.c_str(), L.str().c_str(), static_cast<long long>(total),
              step_loss.empty() ? 0.0 : step_loss.back(), dir.c_str());
  return 0;
}

}  // namespace pt
