// The sequential emulator (emulator.hpp): one process runs every stage of the layout in
// turn, unit by unit, each reading the weight versions its schedule's registry entry gives
// as a formula (VersionRule::formula, written beside each entry in src/schedule/kinds/):
// for unit m counted from the start of its segment (an epoch, or up to the next evaluation
// with train.eval_every; the pipeline drains at segment ends), stage s with r_s replicas and
// 1F1B depth d_s = ceil(ranks in stages >= s / r_s). Flush schedules read floor(m / M).
// A stage's update applies the gradients of its group (version_stride minibatches of M
// units: r_s minibatches averaged for minibatch units, the M microbatches of a batch summed
// with loss scale 1/B otherwise). In bf16 (train.precision) forward and backward read the
// bf16 copy of the version (round_bf16 of every parameter), as the runtime's WeightStore
// does; the versions kept and updated are fp32. train.clip_grad_norm clips each update as
// the runtime does (clip.hpp). Tied layers are not summed here (tied models train under
// flush schedules, checked against one process instead).
#include "emulator.hpp"

#include "pipetrain/clip.hpp"
#include "pipetrain/error.hpp"

namespace pt {

struct SequentialEmulator::StageState {
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

namespace {

// The parameters compute reads of version id: its fp32 weights, or in bf16 their bf16 copy
// (a version's values never change once made, so the copy is kept while id is read again).
template <class State>
const float* compute_params(Backend& be, State& x, int64_t id, int stage, bool bf16) {
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

}  // namespace

SequentialEmulator::SequentialEmulator(const Deck& deck, const TrainSetup& setup)
    : deck_(deck),
      setup_(setup),
      L_(setup.layout),
      K_(setup.layout.stages()),
      M_(setup.microbatches),
      B_(deck.train.batch_size),
      mb_(setup.mb_size),
      bf16_(deck.train.precision == Precision::bf16),
      seed_(static_cast<uint64_t>(deck.run.seed)),
      data_(open_data(deck)) {
  N_ = data_.train->size();
  spe_ = setup.steps_per_epoch(deck, N_);
  total_ = setup.total_steps(deck, N_);
  be_ = make_host_backend();
  st_.resize(static_cast<size_t>(K_));
  for (int s = 0; s < K_; ++s) init_stage(s);
  const Model& model = *setup.model;
  host_x_.resize(static_cast<size_t>(mb_ * model.input_shape().numel()));
  host_labels_.resize(static_cast<size_t>(mb_ * data_.train->label_count()));
  idx_.resize(static_cast<size_t>(mb_));
}

SequentialEmulator::~SequentialEmulator() {
  for (auto& x : st_) be_->release_int(x.labels);
}

void SequentialEmulator::init_stage(int s) {
  StageState& x = st_[static_cast<size_t>(s)];
  Backend& be = *be_;
  x.stage = std::make_unique<Stage>(be, *setup_.model, L_.first_layer(s), L_.end_layer(s), mb_, 1, false,
                                    Recompute::none, deck_.train.precision);
  x.slot_mem = Buffer(be, static_cast<size_t>(x.stage->slot_floats()));
  x.labels = be.alloc_int(static_cast<size_t>(mb_ * data_.train->label_count()));
  x.slot = x.stage->carve(x.slot_mem.data(), x.labels);
  std::vector<float> init(static_cast<size_t>(x.stage->num_state()));
  x.stage->init_state(init.data());
  x.state = Buffer(be, init.size());
  if (!init.empty()) be.from_host(x.state.data(), init.data(), init.size());
  x.grads = Buffer(be, static_cast<size_t>(x.stage->num_params()));
  x.dx = Buffer(be, static_cast<size_t>(mb_ * x.stage->in_shape().numel()));
  std::vector<float> w(static_cast<size_t>(x.stage->num_params()));
  x.stage->init_params(w.data(), seed_);
  x.versions[0] = w;
  const int64_t stride = setup_.version_stride(s);
  x.opt = std::make_unique<Optimizer>(optim_config(deck_.train), be, w.size(), std::max<int64_t>(1, total_ / stride));
}

void SequentialEmulator::run() {
  // the same segments as a run: up to each epoch end or evaluation, where the pipeline drains
  for (int64_t done = 0; done < total_;) {
    const int64_t steps = TrainSetup::segment_steps(done, spe_, total_, deck_.train.eval_every);
    segment(done);
    done += steps;
  }
}

void SequentialEmulator::segment(int64_t done) {
  const int64_t epoch = done / spe_, in_epoch = done - epoch * spe_;
  const int64_t steps = TrainSetup::segment_steps(done, spe_, total_, deck_.train.eval_every);
  const int64_t U = steps * M_;
  data_.train->set_epoch(epoch);
  const std::vector<int64_t> full = epoch_permutation(N_, seed_, epoch);
  const std::vector<int64_t> perm(full.begin() + in_epoch * B_, full.end());
  std::vector<int64_t> base(static_cast<size_t>(K_));
  for (int s = 0; s < K_; ++s) base[static_cast<size_t>(s)] = st_[static_cast<size_t>(s)].latest;
  double loss_acc = 0;
  for (int64_t m = 0; m < U; ++m) unit(m, done * B_ + m * mb_, perm, base, loss_acc);
  // the segment's IR drains: only the latest versions survive
  for (auto& x : st_)
    for (auto it = x.versions.begin(); it != x.versions.end();)
      it = it->first != x.latest ? x.versions.erase(it) : std::next(it);
}

void SequentialEmulator::unit(int64_t m, int64_t sample0, const std::vector<int64_t>& perm, const std::vector<int64_t>& base,
                              double& loss_acc) {
  // versions read by forward and backward, from the entry's formula
  std::vector<int64_t> vf(static_cast<size_t>(K_)), vb(static_cast<size_t>(K_));
  for (int s = 0; s < K_; ++s) {
    const EmulatedUnit u{m, L_.replicas_of(s), L_.in_flight_depth(s), L_.replicas_of(0), L_.in_flight_depth(0), M_};
    const VersionPair v = setup_.def->versions.formula(u);
    vf[static_cast<size_t>(s)] = base[static_cast<size_t>(s)] + v.forward;
    vb[static_cast<size_t>(s)] = base[static_cast<size_t>(s)] + v.backward;
  }
  for (int64_t j = 0; j < mb_; ++j) idx_[static_cast<size_t>(j)] = perm[static_cast<size_t>(m * mb_ + j)];
  data_.train->get(idx_.data(), mb_, host_x_.data(), host_labels_.data());
  forward(sample0, vf);
  StageState& last = st_[static_cast<size_t>(K_ - 1)];
  loss_acc += be_->sum(static_cast<size_t>(mb_), last.stage->output(last.slot));
  backward(sample0, vb);
  update(m);
  drop_versions(vf, vb);
  if ((m + 1) % M_ == 0) {
    step_loss_.push_back(loss_acc / static_cast<double>(B_));
    loss_acc = 0;
  }
}

// Forward through every stage.
void SequentialEmulator::forward(int64_t sample0, const std::vector<int64_t>& vf) {
  Backend& be = *be_;
  for (int s = 0; s < K_; ++s) {
    StageState& x = st_[static_cast<size_t>(s)];
    if (s == 0) be.from_host(x.slot.input, host_x_.data(), host_x_.size());
    else be.copy(x.slot.input, st_[static_cast<size_t>(s - 1)].stage->output(st_[static_cast<size_t>(s - 1)].slot),
                 static_cast<size_t>(mb_ * x.stage->in_shape().numel()));
    if (s == K_ - 1) be.labels_from_host(x.labels, host_labels_.data(), host_labels_.size());
    const float* w = compute_params(be, x, vf[static_cast<size_t>(s)], s, bf16_);
    LayerCtx ctx{be, seed_, sample0, true, x.labels, 1.0f / static_cast<float>(B_)};
    ctx.state = x.state.data();
    x.stage->forward(x.slot, w, ctx, mb_, PollHook{});
  }
}

// Backward through every stage.
void SequentialEmulator::backward(int64_t sample0, const std::vector<int64_t>& vb) {
  Backend& be = *be_;
  for (int s = K_ - 1; s >= 0; --s) {
    StageState& x = st_[static_cast<size_t>(s)];
    const float* w = compute_params(be, x, vb[static_cast<size_t>(s)], s, bf16_);
    const float* dy = s == K_ - 1 ? nullptr : st_[static_cast<size_t>(s + 1)].dx.data();
    LayerCtx ctx{be, seed_, sample0, true, x.labels, 1.0f / static_cast<float>(B_)};
    ctx.state = x.state.data();
    x.stage->backward(x.slot, w, x.grads.data(), dy, s == 0 ? nullptr : x.dx.data(), ctx, mb_, PollHook{});
  }
}

// train.clip_grad_norm: the coefficient of stage s's update, as the runtime's
// (executor_clip.cpp): under a flush schedule the whole model's norm (every stage updates
// after the same unit; `flush_norm` computes it from every stage's gradient), under an
// asynchronous one the stage's own update against its share of the threshold.
float SequentialEmulator::clip_coefficient_of(int s, bool flush_norm) {
  const double max_norm = deck_.train.clip_grad_norm;
  if (max_norm <= 0) return 1.0f;
  const Model& model = *setup_.model;
  if (setup_.def->flush) {
    if (flush_norm) {
      std::vector<double> sums(static_cast<size_t>(norm_tensor_count(model)), 0.0);
      for (StageState& x : st_) sums_of_squares(*be_, x.grads.data(), norm_tensors(*x.stage), sums);
      norm_ = total_norm(sums);
    }
    return clip_coefficient(norm_, max_norm);
  }
  StageState& x = st_[static_cast<size_t>(s)];
  const std::vector<NormTensor> tensors = norm_tensors(*x.stage);
  const double norm = stage_norm(*be_, x.grads.data(), tensors) / static_cast<double>(setup_.version_stride(s));
  return clip_coefficient(norm, stage_clip_threshold(max_norm, norm_floats(tensors), model_norm_floats(model)));
}

// The updates of the groups unit m completes: a group is M units x the stage's stride.
void SequentialEmulator::update(int64_t m) {
  bool first = true;
  for (int s = 0; s < K_; ++s) {
    StageState& x = st_[static_cast<size_t>(s)];
    const int64_t stride = setup_.version_stride(s);
    if ((m + 1) % (M_ * stride) != 0) continue;
    std::vector<float> w = x.versions.at(x.latest);
    apply_clip(*be_, x.grads.data(), static_cast<size_t>(x.stage->num_params()), clip_coefficient_of(s, first));
    first = false;
    x.opt->step(w.data(), x.grads.data(), 1.0f / static_cast<float>(stride));
    be_->fill(x.grads.data(), 0.0f, static_cast<size_t>(x.stage->num_params()));
    x.latest += stride;
    x.versions[x.latest] = std::move(w);
  }
}

// Drop versions no later unit reads (version ids read are nondecreasing in m).
void SequentialEmulator::drop_versions(const std::vector<int64_t>& vf, const std::vector<int64_t>& vb) {
  for (int s = 0; s < K_; ++s) {
    StageState& x = st_[static_cast<size_t>(s)];
    const int64_t keep = std::min(vf[static_cast<size_t>(s)], vb[static_cast<size_t>(s)]);
    for (auto it = x.versions.begin(); it != x.versions.end();)
      it = (it->first < keep && it->first != x.latest) ? x.versions.erase(it) : std::next(it);
  }
}

std::vector<std::vector<float>> SequentialEmulator::layer_weights() const {
  const Model& model = *setup_.model;
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(model.size()));
  for (int s = 0; s < K_; ++s) {
    const StageState& x = st_[static_cast<size_t>(s)];
    const std::vector<float>& w = x.versions.at(x.latest);
    for (int l = L_.first_layer(s); l < L_.end_layer(s); ++l) {
      const int64_t off = x.stage->param_offset(l), n = model.layer(l).num_params();
      per_layer[static_cast<size_t>(l)].assign(w.begin() + off, w.begin() + off + n);
    }
  }
  return per_layer;
}

}  // namespace pt
