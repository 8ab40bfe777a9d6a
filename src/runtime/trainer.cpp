// `pipetrain train`: deck -> model -> layout -> schedule -> executor, epoch by epoch, with
// progress and metrics on the reporter rank, checkpoints at agreed update boundaries
// (steps, seconds, SIGUSR1/SIGTERM, --stop-at-step, the end), resume, and the run outputs.
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <deque>
#include <memory>
#include <nlohmann/json.hpp>

#include "pipetrain/checkpoint.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/runtime.hpp"
#include "pipetrain/train.hpp"
#include "resume.hpp"
#include "run_outputs.hpp"

namespace pt {
namespace {

volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }

std::string human_rate(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string human_time(double s) {
  char b[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(std::fmod(s, 3600) / 60));
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(std::fmod(s, 60)));
  else std::snprintf(b, sizeof b, "%.1fs", s);
  return b;
}

// Open the data on every rank. The same failure everywhere (a wrong path) is one collective
// message; a failure on some ranks only is reported by those ranks and aborts the job.
DataSplit open_data_everywhere(const Deck& deck, int rank) {
  DataSplit d;
  int ok = 1;
  std::string why;
  Exit code = Exit::ok;
  try {
    d = open_data(deck);
  } catch (const Error& e) {
    ok = 0;
    why = e.what();
    code = e.code();
  }
  int all = 0, any = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&ok, &any, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) fail(code, why, true);                                  // every rank failed: say it once
  if (!ok) fail(code, "data on this rank (" + std::to_string(rank) + "): " + why);  // rank-local
  if (!any) fail(Exit::io, "another rank could not open the data", false);
  return d;
}

}  // namespace

class Trainer final : public TrainControl {
 public:
  explicit Trainer(const TrainArgs& args) : args_(args) {}
  int run();

  void on_update(const UpdateReport& r) override;
  CutAction at_boundary(int64_t version) override;
  void save(WorkerState& st) override;

 private:
  void commit(WorkerState& st, bool epoch_complete);
  void log_eval(int64_t step, bool epoch_end, double seconds, int64_t steps, const Executor::EvalResult& res);
  bool checkpoint_at_epoch_end(int64_t step, bool last);
  CheckpointMeta meta(int64_t step, bool epoch_complete) const;
  StageInfo stage_info() const;
  int local_flags();

  const TrainArgs& args_;
  Deck deck_;
  TrainSetup setup_;
  DataSplit data_;
  std::unique_ptr<ParallelContext> ctx_;
  std::unique_ptr<Backend> be_;
  std::unique_ptr<Stage> stage_;
  std::unique_ptr<WeightStore> weights_;
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<Executor> ex_;
  std::unique_ptr<CheckpointWriter> writer_;
  std::unique_ptr<MetricsLog> metrics_, versions_;
  MPI_Comm control_ = MPI_COMM_NULL;  // stop/checkpoint flag agreement
  std::string run_dir_, last_checkpoint_, plan_json_;
  int64_t total_steps_ = 0, spe_ = 0, epoch_ = 0, epoch_steps_ = 0, epoch_start_ = 0, next_log_ = 0;
  double train_time_ = 0, t_epoch0_ = 0, interval_start_ = 0, interval_samples_ = 0, interval_loss_ = 0;
  double epoch_loss_ = 0, epoch_samples_ = 0, last_train_loss_ = NAN, time_to_target_ = -1;
  double final_acc_ = NAN, final_test_loss_ = NAN, last_ckpt_time_ = 0, epoch_time_ = 0, last_segment_end_ = 0;
  bool time_flag_outstanding_ = false;
  struct Pending {
    int64_t version;
    MPI_Request req;
    int local, result;
  };
  std::deque<std::unique_ptr<Pending>> pending_;
  static constexpr int kFlagCheckpoint = 1, kFlagStop = 2;
};

int Trainer::local_flags() {
  int f = g_signal ? kFlagStop : 0;
  if (ctx_->rank() == 0 && deck_.checkpoint.every_seconds > 0 && !time_flag_outstanding_ &&
      now_s() - last_ckpt_time_ >= deck_.checkpoint.every_seconds) {
    f |= kFlagCheckpoint;
    time_flag_outstanding_ = true;
  }
  return f;
}

void Trainer::on_update(const UpdateReport& r) {
  if (!ctx_->is_reporter()) return;
  interval_loss_ += r.loss_sum;
  interval_samples_ += static_cast<double>(r.samples);
  epoch_loss_ += r.loss_sum;
  epoch_samples_ += static_cast<double>(r.samples);
  const int64_t step = r.minibatches;
  if (step < next_log_ && step != total_steps_) return;
  const double now = now_s();
  const double elapsed = train_time_ + (now - t_epoch0_);
  const double sps = interval_samples_ / std::max(1e-9, now - interval_start_);
  const double loss = interval_loss_ / std::max(1.0, interval_samples_);
  const int64_t done_here = std::max<int64_t>(1, step - epoch_start_);
  const double eta = static_cast<double>(total_steps_ - step) * (now - t_epoch0_) / static_cast<double>(done_here);
  std::printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %s samples/s  elapsed %s  ETA %s%s\n",
              static_cast<long long>(step), static_cast<long long>(total_steps_), static_cast<long long>(epoch_ + 1), loss,
              r.lr, human_rate(sps).c_str(), human_time(elapsed).c_str(), human_time(eta).c_str(),
              r.skipped ? "  (non-finite gradient: update skipped)" : "");
  std::fflush(stdout);
  metrics_->append(nlohmann::json({{"type", "step"}, {"step", step}, {"epoch", epoch_}, {"loss", loss}, {"lr", r.lr},
                                   {"samples_per_s", sps}, {"elapsed_s", elapsed}})
                       .dump());
  last_train_loss_ = loss;
  interval_start_ = now;
  interval_samples_ = interval_loss_ = 0;
  while (next_log_ <= step) next_log_ += deck_.train.log_every;
}

CutAction Trainer::at_boundary(int64_t v) {
  const int64_t L = setup_.boundary_stride();
  if (v % L != 0 || v >= epoch_start_ + epoch_steps_) return CutAction::none;  // epoch ends: after evaluation
  bool stop = args_.stop_at_step == v;
  bool ckpt = stop || (deck_.checkpoint.every_steps > 0 && v % deck_.checkpoint.every_steps == 0);
  // Signals and wall-clock triggers are local: agree on them with a nonblocking allreduce
  // started at each boundary and read `lag` boundaries later, when every rank has passed it.
  auto p = std::make_unique<Pending>();
  p->version = v;
  if (fault_matches("wait-signal", ctx_->rank(), -1, v))  // test-only: hold this boundary until a signal (120 s at most)
    for (int i = 0; i < 12000 && !g_signal; ++i) usleep(10000);
  p->local = local_flags();
  MPI_Iallreduce(&p->local, &p->result, 1, MPI_INT, MPI_BOR, control_, &p->req);
  pending_.push_back(std::move(p));
  const size_t lag = static_cast<size_t>(setup_.layout.stages()) + 1;
  if (pending_.size() > lag) {
    Pending& q = *pending_.front();
    ctx_->wait(&q.req, [&] { return "agreement on checkpoint/stop flags of step " + std::to_string(q.version); });
    if (q.result & kFlagStop) stop = ckpt = true;
    if (q.result & kFlagCheckpoint) ckpt = true, time_flag_outstanding_ = false;
    pending_.pop_front();
  }
  return stop ? CutAction::checkpoint_and_stop : ckpt ? CutAction::checkpoint : CutAction::none;
}

CheckpointMeta Trainer::meta(int64_t step, bool epoch_complete) const {
  CheckpointMeta m;
  m.step = step;
  m.epoch = epoch_;
  m.epoch_steps = epoch_steps_;
  m.epoch_start = epoch_start_;
  m.epoch_complete = epoch_complete;
  m.schedule = setup_.def->name;
  m.split.assign(setup_.layout.first.begin() + 1, setup_.layout.first.end() - 1);
  m.replicas = setup_.layout.replicas;
  m.microbatches = setup_.microbatches;
  m.batch_size = deck_.train.batch_size;
  m.seed = deck_.run.seed;
  m.optimizer = deck_.train.optimizer;
  m.model_hash = std::to_string(deck_.model_hash());
  m.model_text = deck_.model_text();
  m.ranks = ctx_->size();
  return m;
}

StageInfo Trainer::stage_info() const {
  StageInfo i;
  i.stage = ctx_->stage();
  i.replica = ctx_->replica();
  i.first_layer = stage_->first();
  i.end_layer = stage_->last();
  for (int l = stage_->first(); l < stage_->last(); ++l) {
    i.layer_offsets.push_back(stage_->param_offset(l));
    i.layer_counts.push_back(setup_.model->layer(l).num_params());
  }
  i.optimizer_names = opt_->state_names();
  return i;
}

void Trainer::save(WorkerState& st) { commit(st, false); }

void Trainer::commit(WorkerState& st, bool epoch_complete) {
  const int64_t step = st.latest;
  st.epoch = epoch_;
  st.epoch_steps = epoch_steps_;
  st.epoch_start = epoch_start_;
  const double in_segment = epoch_complete ? 0.0 : now_s() - t_epoch0_;
  st.elapsed_train_s = train_time_ + in_segment;
  st.reporting = {epoch_loss_, epoch_samples_, interval_loss_, interval_samples_, epoch_time_ + in_segment, time_to_target_};
  // non-finite state is never committed
  auto finite = [](const std::vector<float>& v) {
    for (float x : v)
      if (!std::isfinite(x)) return false;
    return true;
  };
  for (auto& [id, w] : st.versions)
    if (!finite(w)) fail(Exit::numerical, "refusing to commit a checkpoint at step " + std::to_string(step) +
                                             ": weight version " + std::to_string(id) + " of stage " +
                                             std::to_string(ctx_->stage()) + " is not finite");
  for (auto& o : st.optimizer)
    if (!finite(o)) fail(Exit::numerical, "refusing to commit a checkpoint at step " + std::to_string(step) +
                                             ": optimizer state of stage " + std::to_string(ctx_->stage()) + " is not finite");
  const double t0 = now_s();
  last_checkpoint_ = writer_->commit(st, meta(step, epoch_complete), stage_info());
  last_ckpt_time_ = now_s();
  if (ctx_->rank() == 0) {
    std::printf("checkpoint: step %lld committed to %s (%.2fs)\n", static_cast<long long>(step), last_checkpoint_.c_str(),
                now_s() - t0);
    std::fflush(stdout);
  }
}

bool Trainer::checkpoint_at_epoch_end(int64_t step, bool last) {
  // every rank is drained here: agree on the local flags synchronously
  int local = local_flags(), any = 0;
  while (!pending_.empty()) {  // late flags from the epoch's last boundaries count too
    Pending& q = *pending_.front();
    ctx_->wait(&q.req, [&] { return std::string("agreement on checkpoint/stop flags"); });
    local |= q.result;
    pending_.pop_front();
  }
  MPI_Request req;
  MPI_Iallreduce(&local, &any, 1, MPI_INT, MPI_BOR, control_, &req);
  ctx_->wait(&req, [] { return std::string("agreement on checkpoint/stop flags at the epoch end"); });
  const bool stop = (any & kFlagStop) || (args_.stop_at_step >= 0 && step >= args_.stop_at_step);
  const bool ckpt = stop || (any & kFlagCheckpoint) || (last && deck_.checkpoint.at_end) ||
                    (deck_.checkpoint.every_steps > 0 && step % deck_.checkpoint.every_steps == 0);
  if (any & kFlagCheckpoint) time_flag_outstanding_ = false;
  if (ckpt) {
    WorkerState st;
    st.latest = weights_->latest_id();
    const size_t n = static_cast<size_t>(stage_->num_params());
    std::vector<float> w(n);
    be_->to_host(w.data(), weights_->latest(), n);
    st.versions.emplace_back(st.latest, std::move(w));
    for (Buffer* b : opt_->state()) {
      std::vector<float> v(b->size());
      be_->to_host(v.data(), b->data(), v.size());
      st.optimizer.push_back(std::move(v));
    }
    st.optimizer_updates = opt_->updates();
    commit(st, true);
  }
  return stop && !last;
}

void Trainer::log_eval(int64_t step, bool epoch_end, double seconds, int64_t steps, const Executor::EvalResult& res) {
  if (!ctx_->is_reporter()) return;
  final_acc_ = static_cast<double>(res.correct) / static_cast<double>(std::max<int64_t>(1, res.samples));
  final_test_loss_ = res.loss_sum / static_cast<double>(std::max<int64_t>(1, res.samples));
  const double train_loss = epoch_loss_ / std::max(1.0, epoch_samples_);
  bool reached = false;
  if (deck_.train.target_accuracy > 0 && time_to_target_ < 0 && final_acc_ >= deck_.train.target_accuracy)
    time_to_target_ = train_time_, reached = true;
  const double sps = static_cast<double>(steps * deck_.train.batch_size) / std::max(1e-9, seconds);
  if (epoch_end) {
    last_train_loss_ = train_loss;
    std::printf("epoch %lld: train loss %.4f  test loss %.4f  test accuracy %.4f  (%s samples/s, epoch %s)%s\n",
                static_cast<long long>(epoch_ + 1), train_loss, final_test_loss_, final_acc_, human_rate(sps).c_str(),
                human_time(seconds).c_str(), reached ? "  target reached" : "");
  } else {
    std::printf("step %lld: test loss %.4f  test accuracy %.4f%s\n", static_cast<long long>(step), final_test_loss_,
                final_acc_, reached ? "  target reached" : "");
  }
  std::fflush(stdout);
  nlohmann::json j = {{"type", epoch_end ? "epoch" : "eval"}, {"epoch", epoch_}, {"step", step},
                      {"test_loss", final_test_loss_}, {"test_accuracy", final_acc_}, {"elapsed_s", train_time_},
                      {"lr", opt_->current_lr()}};
  if (epoch_end) {
    j["loss"] = train_loss;
    j["train_loss"] = train_loss;
    j["samples_per_s"] = sps;
  }
  metrics_->append(j.dump());
}

int Trainer::run() {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  deck_ = load_deck(args_.deck, args_.sets);
  deck_ = resolve_auto_split(deck_, world_size, &plan_json_);  // parallel.split = "auto"
  setup_ = TrainSetup::from_deck(deck_, world_size);
  const Model& model = *setup_.model;
  const Layout& layout = setup_.layout;
  const int64_t B = deck_.train.batch_size;
  data_ = open_data_everywhere(deck_, world_rank);
  const int64_t N = data_.train->size();
  spe_ = setup_.steps_per_epoch(deck_, N);
  total_steps_ = setup_.total_steps(deck_, N);

  ctx_ = std::make_unique<ParallelContext>(MPI_COMM_WORLD, layout, deck_.run.comm_timeout_s);
  MPI_Comm_dup(MPI_COMM_WORLD, &control_);
  run_dir_ = deck_.run.output_dir + "/" + deck_.run.name;
  const std::string ckpt_dir = deck_.checkpoint.dir.empty() ? run_dir_ + "/checkpoints" : deck_.checkpoint.dir;

  be_ = deck_.run.device == "cuda" ? make_cuda_backend(0) : make_host_backend();
  const int s = ctx_->stage();
  stage_ = std::make_unique<Stage>(*be_, model, layout.first_layer(s), layout.end_layer(s), setup_.mb_size,
                                   std::min<int64_t>(deck_.train.eval_batch_size, data_.test->size()));
  const size_t nparams = static_cast<size_t>(stage_->num_params());
  weights_ = std::make_unique<WeightStore>(*be_, nparams);
  {
    std::vector<float> host(nparams);
    stage_->init_params(host.data(), static_cast<uint64_t>(deck_.run.seed));
    be_->from_host(weights_->latest(), host.data(), nparams);
  }
  opt_ = std::make_unique<Optimizer>(deck_.train, *be_, nparams, std::max<int64_t>(1, total_steps_ / setup_.version_stride(s)));
  ExecutorConfig cfg;
  cfg.seed = static_cast<uint64_t>(deck_.run.seed);
  cfg.batch_size = B;
  cfg.eval_mb = stage_->eval_mb();
  cfg.debug_versions = deck_.run.debug_versions;
  cfg.skip_nonfinite = deck_.train.nonfinite == "skip";
  cfg.nccl_allreduce = deck_.parallel.allreduce == "nccl";
  cfg.trace_limit = 200000;
  ex_ = std::make_unique<Executor>(*ctx_, *stage_, *weights_, *opt_, *data_.train, *data_.test, cfg);

  // resume: the newest checkpoint every rank can verify
  ResumePoint resume;
  if (!args_.resume.empty()) resume = choose_resume(args_.resume, deck_, setup_, *ctx_, *stage_, opt_->state().size(), total_steps_);
  writer_ = std::make_unique<CheckpointWriter>(*ctx_, ckpt_dir, static_cast<int>(deck_.checkpoint.keep));
  writer_->prepare();  // before step 1: the directory exists and every rank can write it
  if (ctx_->is_reporter()) {
    make_dirs(run_dir_);
    write_file_atomic(run_dir_ + "/deck.toml", deck_.effective_toml());
    metrics_ = std::make_unique<MetricsLog>(run_dir_ + "/metrics.jsonl", resume.valid);
  }
  if (deck_.run.debug_versions) {
    if (ctx_->is_reporter()) make_dirs(run_dir_ + "/versions");
    ctx_->barrier("version log directory");
    versions_ = std::make_unique<MetricsLog>(run_dir_ + "/versions/rank" + std::to_string(world_rank) + ".jsonl", resume.valid);
  }
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);

  if (world_rank == 0) {
    std::printf("pipetrain: %s on %d rank%s, device %s, BLAS %s\n", deck_.path.c_str(), world_size,
                world_size == 1 ? "" : "s", be_->describe().c_str(), blas_description().c_str());
    std::printf("data: %s; test %s\n", data_.train->describe().c_str(), data_.test->describe().c_str());
    std::printf("model: %d layers, %lld parameters\n", model.size(), static_cast<long long>(model.num_params(0, model.size())));
    std::printf("layout: %s\n", layout.str().c_str());
    std::printf("schedule: %s, %d microbatch%s of %lld per minibatch of %lld; %lld steps (%lld per epoch)%s\n",
                setup_.def->name.c_str(), setup_.microbatches, setup_.microbatches == 1 ? "" : "es",
                static_cast<long long>(setup_.mb_size), static_cast<long long>(B), static_cast<long long>(total_steps_),
                static_cast<long long>(spe_),
                !setup_.def->valid_gradients
                    ? "  ** ablation baseline: backward uses the latest weights, gradients are INVALID **" : "");
    std::printf("run directory: %s; checkpoints: %s\n", run_dir_.c_str(), ckpt_dir.c_str());
    if (resume.valid)
      std::printf("resuming from %s (step %lld, epoch %lld%s)\n", resume.step_dir.c_str(), static_cast<long long>(resume.meta.step),
                  static_cast<long long>(resume.meta.epoch + 1), resume.resliced ? ", re-sliced for this layout" : "");
    std::fflush(stdout);
  }

  const int64_t eval_units = (data_.test->size() + stage_->eval_mb() - 1) / stage_->eval_mb();
  Schedule eval_ir = make_eval_schedule(layout, eval_units);
  if (std::string err = validate(eval_ir); !err.empty()) fail(Exit::internal, "evaluation schedule invalid: " + err);

  int64_t steps_done = 0;
  const WorkerState* resume_state = nullptr;
  if (resume.valid) {
    steps_done = resume.meta.epoch_complete ? resume.meta.step : resume.state.epoch_start;
    train_time_ = resume.state.elapsed_train_s;
    resume_state = &resume.state;
    const WorkerState::Reporting& rep = resume.state.reporting;  // the reporter's running totals
    epoch_loss_ = rep.epoch_loss;
    epoch_samples_ = rep.epoch_samples;
    interval_loss_ = rep.interval_loss;
    interval_samples_ = rep.interval_samples;
    epoch_time_ = rep.epoch_time;
    time_to_target_ = rep.time_to_target;
    const int64_t segment_end = resume.state.epoch_start + resume.state.epoch_steps;  // shortened when drained (resume.cpp)
    if (!resume.meta.epoch_complete && segment_end > total_steps_)
      fail(Exit::bad_input,
           resume.step_dir + ": the checkpoint is inside a pipeline segment that runs to step " + std::to_string(segment_end) +
               " (it drains only there), past this run's last step " + std::to_string(total_steps_) +
               " (train.max_steps / train.epochs); resume with at least " + std::to_string(segment_end) + " steps",
           true);
  }
  const int64_t resume_step = resume.valid ? resume.meta.step : steps_done;
  next_log_ = (resume_step / deck_.train.log_every + 1) * deck_.train.log_every;
  ctx_->barrier("start of training");
  const double t_origin = now_s();
  last_ckpt_time_ = t_origin;
  const int64_t first_step = resume.valid ? resume.meta.step : steps_done;
  double time_this_run = 0;
  bool stopped = false;
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;
  // Segments: the schedule runs up to the next epoch end or evaluation, then drains.
  while (steps_done < total_steps_ && !stopped) {
    epoch_ = steps_done / spe_;
    const int64_t in_epoch = steps_done - epoch_ * spe_;
    epoch_start_ = steps_done;
    epoch_steps_ = TrainSetup::segment_steps(steps_done, spe_, total_steps_, deck_.train.eval_every);
    if (resume_state && resume_state->position > 0) epoch_steps_ = resume_state->epoch_steps;
    if (in_epoch == 0 && !(resume_state && resume_state->position > 0)) epoch_loss_ = epoch_samples_ = epoch_time_ = 0;
    Schedule ir = make_schedule(*setup_.def, layout, epoch_steps_, setup_.microbatches);
    if (std::string err = validate(ir); !err.empty()) fail(Exit::internal, "schedule invalid: " + err);
    if (perm_epoch != epoch_) perm = epoch_permutation(N, static_cast<uint64_t>(deck_.run.seed), epoch_), perm_epoch = epoch_;
    const std::vector<int64_t> segment(perm.begin() + in_epoch * B, perm.end());
    t_epoch0_ = now_s();
    if (last_segment_end_ > 0) interval_start_ += t_epoch0_ - last_segment_end_;  // evaluation is not training time
    else interval_start_ = t_epoch0_;
    const bool finished = ex_->train(ir, segment, steps_done * B, *this, resume_state);
    resume_state = nullptr;
    last_segment_end_ = now_s();
    const double t_seg = last_segment_end_ - t_epoch0_;
    train_time_ += t_seg;
    time_this_run += t_seg;
    epoch_time_ += t_seg;
    if (versions_) {
      for (auto& v : ex_->version_log())
        versions_->append(nlohmann::json({{"stage", ctx_->stage()}, {"replica", ctx_->replica()}, {"epoch", epoch_},
                                          {"segment_start", epoch_start_}, {"mb", v.epoch_unit}, {"fwd", v.fwd},
                                          {"bwd", v.bwd}})
                              .dump());
      ex_->clear_version_log();
    }
    if (!finished) {  // stopped at a checkpoint cut inside the segment
      stopped = true;
      steps_done = weights_->latest_id();
      break;
    }
    steps_done = epoch_start_ + epoch_steps_;
    const bool epoch_end = steps_done % spe_ == 0 || steps_done >= total_steps_;
    const Executor::EvalResult res = ex_->evaluate(eval_ir);
    log_eval(steps_done, epoch_end, epoch_end ? epoch_time_ : t_seg, epoch_end ? (steps_done - epoch_ * spe_) : epoch_steps_, res);
    const bool last = steps_done >= total_steps_;
    stopped = checkpoint_at_epoch_end(steps_done, last);
  }
  epoch_ = (steps_done + spe_ - 1) / spe_;
  while (!pending_.empty()) {
    ctx_->wait(&pending_.front()->req, [] { return std::string("agreement on checkpoint/stop flags"); });
    pending_.pop_front();
  }
  if (stopped && world_rank == 0) {
    std::printf("stopped at step %lld after a checkpoint (%s); resume with --resume %s\n", static_cast<long long>(steps_done),
                g_signal ? (g_signal == SIGTERM ? "SIGTERM" : "SIGUSR1") : "--stop-at-step", run_dir_.c_str());
    std::fflush(stdout);
  }

  RunOutputs out{*ctx_, setup_, deck_, *stage_, *weights_, *ex_};
  out.run_dir = run_dir_;
  out.status = stopped ? "stopped" : "completed";
  out.t_origin = t_origin;
  out.epochs = epoch_;
  out.last_step = steps_done;
  out.steps_run = steps_done - first_step;
  out.resumed_from = resume.valid ? resume.meta.step : -1;
  out.train_time = train_time_;
  out.train_time_this_run = time_this_run;
  out.time_to_target = time_to_target_;
  out.final_train_loss = last_train_loss_;
  out.final_test_loss = final_test_loss_;
  out.final_accuracy = final_acc_;
  out.last_checkpoint = last_checkpoint_;
  out.input = data_.train->input_transform();
  if (!plan_json_.empty()) {
    // the plan of parallel.split = "auto", and its prediction beside the measurement
    const nlohmann::json plan = nlohmann::json::parse(plan_json_);
    out.extra["plan"] = plan;
    const double measured = out.train_time_this_run / std::max<double>(1.0, static_cast<double>(out.steps_run * B));
    const double predicted = plan.contains("predicted") ? plan["predicted"].value("time_per_sample_s", 0.0) : 0.0;
    out.extra["predicted_time_per_sample_s"] = predicted;
    out.extra["measured_time_per_sample_s"] = measured;
    out.extra["prediction_error"] = predicted > 0 ? (measured - predicted) / predicted : 0.0;
  }
  write_run_outputs(out);
  ctx_->barrier("end of training");
  MPI_Comm_free(&control_);
  return 0;
}

int cmd_train(const TrainArgs& args) {
  Trainer t(args);
  return t.run();
}

}  // namespace pt
