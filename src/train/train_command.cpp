// `pipetrain train`: deck -> model -> layout -> schedule -> executor, segment by segment
// (an epoch, or the steps up to the next evaluation, after which the pipeline drains). The
// trainer holds the loop and builds the stage runtimes this rank holds; the reporter
// (reporter.cpp) prints and records progress, the checkpoint policy (checkpoint_policy.cpp)
// decides and commits checkpoints, resume.cpp picks the state to resume from, and
// run_outputs.cpp writes the run's files.
#include <mpi.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "checkpoint_policy.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/memory_info.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/parallel.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "pipetrain/train.hpp"
#include "reporter.hpp"
#include "resume.hpp"
#include "run_outputs.hpp"

namespace pt {
namespace {

volatile std::sig_atomic_t g_signal = 0;
extern "C" void on_stop_signal(int sig) { g_signal = sig; }

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
    ok = 0, why = e.what(), code = e.code();
  }
  int all = 0, any = 0;
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&ok, &any, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (!all) fail(code, why, true);                                                 // every rank failed: say it once
  if (!ok) fail(code, "data on this rank (" + std::to_string(rank) + "): " + why);  // rank-local
  if (!any) fail(Exit::io, "another rank could not open the data", false);
  return d;
}

// parallel.tensor: it must divide the ranks.
int tensor_parts(const Deck& deck, int world_size) {
  const int t = static_cast<int>(deck.parallel.tensor);
  auto refuse = [&](const std::string& key, const std::string& why) {
    fail(Exit::bad_input, deck.where(key) + ": key '" + key + "': " + why, true);
  };
  if (world_size % t != 0)
    refuse("parallel.tensor", std::to_string(t) + " ranks per tensor group do not divide the job's " +
                                  std::to_string(world_size) + " ranks");
  return t;
}

}  // namespace

class Trainer final : public TrainControl {
 public:
  explicit Trainer(const TrainArgs& args) : args_(args) {}
  ~Trainer() override { free_tensor_grid(grid_); }
  int run();

  void on_update(const UpdateReport& r) override { reporter_->on_update(r, clock_); }
  CutAction at_boundary(int64_t v) override { return policy_->at_boundary(v, clock_.epoch_start + epoch_steps_); }
  void save(std::vector<WorkerState>& states) override { commit(states, false); }

 private:
  void setup();
  void tensor_rank_files();
  void fit_memory();
  void build_stages();
  void resume_and_open();
  bool nothing_left() const;  // resumed at or past the run's last step
  void banner() const;
  std::string memory_banner() const;
  bool run_segment(std::vector<int64_t>& perm, int64_t& perm_epoch);
  bool end_segment(bool epoch_end, double t_seg);
  void finish(bool stopped);
  void commit(std::vector<WorkerState>& states, bool epoch_complete);
  std::vector<WorkerState> drained_states() const;
  CheckpointMeta meta(int64_t step, bool epoch_complete) const;
  std::vector<StageInfo> stage_infos() const;
  std::vector<const StageRuntime*> held() const;

  const TrainArgs& args_;
  Deck deck_;
  TrainSetup setup_;
  DataSplit data_;
  TensorGrid grid_;
  std::unique_ptr<ParallelContext> ctx_;
  std::unique_ptr<MpiTensorGroup> tensor_;  // parallel.tensor > 1
  std::unique_ptr<Backend> be_;
  std::vector<std::unique_ptr<StageRuntime>> stages_;
  std::unique_ptr<Executor> ex_;
  std::unique_ptr<Reporter> reporter_;
  std::unique_ptr<CheckpointPolicy> policy_;
  std::unique_ptr<MetricsLog> versions_;
  std::unique_ptr<Schedule> eval_ir_;
  ResumePoint resume_;
  const std::vector<WorkerState>* resume_state_ = nullptr;
  std::string run_dir_, ckpt_dir_, plan_json_;
  int64_t eval_mb_ = 1;                   // the evaluation microbatch (train.eval_batch_size, or sized to fit)
  std::vector<RankMemory> estimate_;      // every rank's memory estimate (each rank's own computation of it)
  std::vector<MemoryBudget> budgets_;     // every rank's budget
  TrainClock clock_;
  int64_t total_steps_ = 0, spe_ = 0, epoch_steps_ = 0, steps_done_ = 0, first_step_ = 0;
  double epoch_time_ = 0, time_this_run_ = 0, last_segment_end_ = 0, t_origin_ = 0, eval_time_ = 0;
};

// Deck, plan, layout, data, communicators and the backend.
void Trainer::setup() {
  int world_size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  deck_ = load_deck(args_.deck, args_.sets);
  deck_ = resolve_auto_split(deck_, world_size, &plan_json_, args_.resume);  // parallel.split = "auto" (and tensor = 0)
  const int t = tensor_parts(deck_, world_size);
  grid_ = split_tensor_grid(MPI_COMM_WORLD, t);
  setup_ = TrainSetup::from_deck(deck_, world_size / t, TensorShard{t, grid_.rank});
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  data_ = open_data_everywhere(deck_, rank);
  memory_trace("data open");
  const int64_t N = data_.train->size();
  spe_ = setup_.steps_per_epoch(deck_, N);
  total_steps_ = setup_.total_steps(deck_, N);
  ctx_ = std::make_unique<ParallelContext>(grid_.pipeline, setup_.layout, deck_.run.comm_timeout_s);
  if (t > 1) tensor_ = std::make_unique<MpiTensorGroup>(grid_, *ctx_), ctx_->set_job(MPI_COMM_WORLD);
  run_dir_ = deck_.run.output_dir + "/" + deck_.run.name;
  ckpt_dir_ = deck_.checkpoint.dir.empty() ? run_dir_ + "/checkpoints" : deck_.checkpoint.dir;
  if (grid_.rank > 0) tensor_rank_files();
  be_ = deck_.run.device == Device::cuda ? make_cuda_backend(0) : make_host_backend();
  fit_memory();
  build_stages();
  memory_trace("stages built");
  const size_t lag = static_cast<size_t>(setup_.layout.stages()) + 1;
  policy_ = std::make_unique<CheckpointPolicy>(deck_, args_, *ctx_, setup_.boundary_stride(), lag, &g_signal);
  reporter_ = std::make_unique<Reporter>(deck_, ctx_->is_reporter(), total_steps_, setup_.layout.stages() - 1,
                                         data_.train->token_unit(), data_.train->label_count());
}

// Tensor rank k > 0 of a group holds its own part of the split weights: its run files go to
// <run dir>/tensor<k>, with its console output in console.txt there (tensor rank 0 prints
// and writes the run's), and its checkpoints to <checkpoint folder>/tensor<k>/step_N beside
// part 0's step_N (tensor_part_dir, which --resume reads).
void Trainer::tensor_rank_files() {
  const std::string sub = "/tensor" + std::to_string(grid_.rank);
  ckpt_dir_ += sub;
  run_dir_ += sub;
  make_dirs(run_dir_);
  std::fflush(stdout);
  if (!std::freopen((run_dir_ + "/console.txt").c_str(), "a", stdout))
    fail(Exit::io, run_dir_ + "/console.txt: cannot open for tensor rank " + std::to_string(grid_.rank) + "'s output");
}

namespace {

// The least positive budget over `comm` (0: none known). Collective.
int64_t least_over(int64_t least, MPI_Comm comm) {
  const int64_t all = agreed(least > 0 ? least : INT64_MAX, MPI_MIN, comm);
  return all == INT64_MAX ? 0 : all;
}

// The problem the lowest rank of `comm` that found one found, on every rank ("" when none
// did). The estimates hold measured heap (OneDnn::conv_pass_bytes' held), which can differ by
// a grain between processes, so the ranks decide together. Collective.
std::string first_problem(std::string problem, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const int finds = problem.empty() ? size : rank;
  int first = 0;
  MPI_Allreduce(&finds, &first, 1, MPI_INT, MPI_MIN, comm);
  return first == size ? "" : broadcast_string(problem, first, comm);
}

}  // namespace

// Before anything is allocated: every rank's estimate (memory_model.hpp) against every rank's
// budget, computed on every rank from every rank's measured base and budget, with the least
// budget agreed over the job, so that the evaluation microbatch (train.eval_batch_size = 0:
// sized to fit) is the same everywhere, and the decision taken by the whole job (the
// estimates may differ by a grain: first_problem); a rank over its budget stops the job
// (exit 2, one message).
void Trainer::fit_memory() {
  RunMemoryInputs in;
  in.train_samples = data_.train->size(), in.test_samples = data_.test->size();
  in.data_bytes = data_.train->held_bytes() + data_.test->held_bytes();
  in.label_count = data_.train->label_count();
  in.resuming = !args_.resume.empty();
  const MemoryBudget mine = memory_budget(deck_, ranks_on_node(MPI_COMM_WORLD));
  const double v[5] = {static_cast<double>(startup_resident_bytes()), static_cast<double>(mine.bytes),
                       static_cast<double>(mine.available), static_cast<double>(mine.resident), static_cast<double>(mine.ranks_on_node)};
  std::vector<double> all(5 * static_cast<size_t>(ctx_->size()));
  MPI_Allgather(v, 5, MPI_DOUBLE, all.data(), 5, MPI_DOUBLE, ctx_->world());
  int64_t least = 0;
  for (size_t r = 0; r < static_cast<size_t>(ctx_->size()); ++r) {
    const double* x = &all[5 * r];
    in.base.push_back(static_cast<int64_t>(x[0]));
    MemoryBudget b = mine;
    b.bytes = static_cast<int64_t>(x[1]), b.available = static_cast<int64_t>(x[2]), b.resident = static_cast<int64_t>(x[3]);
    b.ranks_on_node = static_cast<int>(x[4]);
    budgets_.push_back(b);
    if (b.bytes > 0) least = least > 0 ? std::min(least, b.bytes) : b.bytes;
  }
  least = least_over(least, ctx_->job());  // every tensor part evaluates the same microbatches
  eval_mb_ = resolve_eval_batch(deck_, *setup_.model, in.test_samples, in.label_count, least);
  estimate_ = run_memory(deck_, setup_, in, eval_mb_);
  if (deck_.run.device != Device::cpu) return;  // the buffers live on the GPU: the host budget does not bound them
  const std::string problem = first_problem(fit_problem(deck_, setup_, estimate_, budgets_, eval_mb_), ctx_->job());
  if (!problem.empty()) fail(Exit::bad_input, problem, true);
}

// One runtime per stage this rank holds, its parameters initialised from (seed, layer).
void Trainer::build_stages() {
  const int64_t eval_mb = eval_mb_;
  for (int s : ctx_->stages()) {
    auto r = std::make_unique<StageRuntime>(*be_, *setup_.model, setup_.layout, s, setup_.mb_size, eval_mb,
                                            setup_.def->split_backward, deck_.train,
                                            total_steps_ / setup_.version_stride(s), setup_.recompute_of(s));
    r->labels_per_sample = data_.train->label_count();
    std::vector<float> host(static_cast<size_t>(r->stage->num_params()));
    r->stage->init_params(host.data(), static_cast<uint64_t>(deck_.run.seed));
    be_->from_host(r->weights->latest(), host.data(), host.size());
    std::vector<float> state(static_cast<size_t>(r->stage->num_state()));
    r->stage->init_state(state.data());
    if (!state.empty()) be_->from_host(r->state.data(), state.data(), state.size());
    stages_.push_back(std::move(r));
  }
  ExecutorConfig cfg;
  cfg.seed = static_cast<uint64_t>(deck_.run.seed);
  cfg.batch_size = deck_.train.batch_size;
  cfg.eval_mb = eval_mb;
  cfg.debug_versions = deck_.run.debug_versions;
  cfg.skip_nonfinite = deck_.train.nonfinite == Nonfinite::skip;
  cfg.nccl_allreduce = deck_.parallel.allreduce == Allreduce::nccl;
  cfg.clip_grad_norm = deck_.train.clip_grad_norm;
  cfg.trace_limit = 200000;
  cfg.tensor = tensor_.get();
  std::vector<StageRuntime*> rts;
  for (auto& r : stages_) rts.push_back(r.get());
  ex_ = std::make_unique<Executor>(*ctx_, rts, *be_, *data_.train, *data_.test, cfg);
  if (tensor_ && deck_.run.device == Device::cuda) tensor_->use_transport(&ex_->transport());
  eval_ir_ = std::make_unique<Schedule>(make_eval_schedule(setup_.layout, (data_.test->size() + eval_mb - 1) / eval_mb));
  if (std::string err = validate(*eval_ir_); !err.empty()) fail(Exit::internal, "evaluation schedule invalid: " + err);
}

std::vector<const StageRuntime*> Trainer::held() const {
  std::vector<const StageRuntime*> out;
  for (auto& r : stages_) out.push_back(r.get());
  return out;
}

// The newest checkpoint every rank can verify (with --resume), then the run's files. A
// checkpoint at or past the run's last step leaves nothing to do: the run's files stay as
// they are (nothing_left).
void Trainer::resume_and_open() {
  if (!args_.resume.empty()) resume_ = choose_resume(args_.resume, deck_, setup_, *ctx_, held(), total_steps_);
  if (nothing_left()) return;
  policy_->prepare(ckpt_dir_);  // before step 1: the directory exists and every rank can write it
  if (ctx_->is_reporter()) {
    make_dirs(run_dir_);
    write_file_atomic(run_dir_ + "/deck.toml", deck_.effective_toml());
  }
  reporter_->open(run_dir_, resume_.valid);
  if (deck_.run.debug_versions) {
    if (ctx_->is_reporter()) make_dirs(run_dir_ + "/versions");
    ctx_->barrier("version log directory");
    versions_ = std::make_unique<MetricsLog>(run_dir_ + "/versions/rank" + std::to_string(ctx_->rank()) + ".jsonl", resume_.valid);
  }
  if (!resume_.valid) return;
  const WorkerState& st = resume_.states.front();
  steps_done_ = resume_.meta.epoch_complete ? resume_.meta.step : st.epoch_start;
  clock_.train_time = st.elapsed_train_s;
  epoch_time_ = st.reporting.epoch_time;
  resume_state_ = &resume_.states;
  reporter_->restore(st.reporting, resume_.meta.step);
  const int64_t segment_end = st.epoch_start + st.epoch_steps;  // shortened when drained (resume.cpp)
  if (!resume_.meta.epoch_complete && segment_end > total_steps_)
    fail(Exit::bad_input, resume_.step_dir + ": the checkpoint is inside a pipeline segment that runs to step " +
                              std::to_string(segment_end) + " (it drains only there), past this run's last step " +
                              std::to_string(total_steps_) + " (train.max_steps / train.epochs); resume with at least " +
                              std::to_string(segment_end) + " steps", true);
}

void Trainer::banner() const {
  if (ctx_->rank() != 0) return;
  const Model& model = *setup_.model;
  std::printf("pipetrain: %s on %d rank%s, device %s, BLAS %s\n", deck_.path.c_str(), ctx_->size(), ctx_->size() == 1 ? "" : "s",
              be_->describe().c_str(), blas_description().c_str());
  std::printf("data: %s; test %s\n", data_.train->describe().c_str(), data_.test->describe().c_str());
  std::printf("model: %d layers, %lld parameters\n", model.size(), static_cast<long long>(model.num_params(0, model.size())));
  std::printf("layout: %s\n", setup_.layout.str().c_str());
  if (grid_.parts > 1)
    std::printf("tensor: %d ranks per group (world rank = %d x group + tensor rank), each runs the layout above on its "
                "part of the attention and transformer_block weights; %d groups\n",
                grid_.parts, grid_.parts, ctx_->size());
  std::printf("schedule: %s, %d microbatch%s of %lld per minibatch of %lld; %lld steps (%lld per epoch)%s\n",
              setup_.def->name.c_str(), setup_.microbatches, setup_.microbatches == 1 ? "" : "es",
              static_cast<long long>(setup_.mb_size), static_cast<long long>(deck_.train.batch_size),
              static_cast<long long>(total_steps_), static_cast<long long>(spe_),
              !setup_.def->valid_gradients ? "  ** ablation baseline: backward uses the latest weights, gradients are INVALID **" : "");
  std::printf("%s", memory_banner().c_str());
  std::printf("run directory: %s; checkpoints: %s\n", run_dir_.c_str(), ckpt_dir_.c_str());
  std::printf("%s", warmup_warning(deck_, total_steps_).c_str());
  if (resume_.valid)
    std::printf("resuming from %s (step %lld, epoch %lld%s)\n", resume_.step_dir.c_str(), static_cast<long long>(resume_.meta.step),
                static_cast<long long>(resume_.meta.epoch + 1),
                resume_.resharded ? (", resharded from parallel.tensor = " + std::to_string(resume_.meta.tensor_parts)).c_str()
                : resume_.resliced ? ", re-sliced for this layout" : "");
  std::fflush(stdout);
}

bool Trainer::nothing_left() const { return resume_.valid && resume_.meta.step >= total_steps_; }

// The estimate per rank (the first 8 and the largest) and the budget, before training.
std::string Trainer::memory_banner() const {
  std::string s = "memory (estimate per rank): ";
  size_t big = 0;
  for (size_t r = 0; r < estimate_.size(); ++r) {
    if (estimate_[r].total() > estimate_[big].total()) big = r;
    if (r < 8) s += (r ? ", " : "") + std::string("rank ") + std::to_string(r) + " " + bytes_text(static_cast<double>(estimate_[r].total()));
  }
  if (estimate_.size() > 8) s += ", ... the most: rank " + std::to_string(big) + " " + bytes_text(static_cast<double>(estimate_[big].total()));
  const MemoryBudget& b = budgets_[big];
  s += "; budget " + (b.bytes > 0 ? bytes_text(static_cast<double>(b.bytes)) : std::string("unknown")) + "; evaluation microbatch " +
       std::to_string(eval_mb_) + (deck_.train.eval_batch_size == 0 ? " (sized to fit)" : "") + "\n";
  return s;
}

int Trainer::run() {
  setup();
  resume_and_open();
  if (nothing_left()) {
    if (ctx_->rank() == 0)
      std::printf("resume: nothing left to do: %s is at step %lld and this run ends at step %lld (train.max_steps / "
                  "train.epochs); nothing is written: %s stays as it was\n", resume_.step_dir.c_str(),
                  static_cast<long long>(resume_.meta.step), static_cast<long long>(total_steps_), run_dir_.c_str());
    std::fflush(stdout);
    return 0;
  }
  std::signal(SIGUSR1, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
  banner();
  if (deck_.run.initial_weights && !resume_.valid) {
    RunOutputs init{*ctx_, setup_, deck_, held(), *ex_};
    init.run_dir = run_dir_;
    init.grid = grid_;
    init.input = data_.train->input_transform();
    write_initial_weights(init);
  }
  // The first segment's activation pools and weight versions are allocated (their pages
  // touched: HostBackend::alloc zeroes) with the stage's other buffers, before the clock: a
  // run that cannot hold them fails before its first step, and train_wall_s times steps, not
  // the first touch of gpt2_small's pools (about 1 s of its first step on one core before).
  if (!resume_state_ && steps_done_ < total_steps_)
    ex_->reserve(setup_.schedule(TrainSetup::segment_steps(steps_done_, spe_, total_steps_, deck_.train.eval_every)));
  ctx_->barrier("start of training");
  t_origin_ = now_s();
  policy_->start_clock();
  first_step_ = resume_.valid ? resume_.meta.step : steps_done_;
  std::vector<int64_t> perm;
  int64_t perm_epoch = -1;
  bool stopped = false;
  while (steps_done_ < total_steps_ && !stopped) stopped = run_segment(perm, perm_epoch);
  finish(stopped);
  return 0;
}

// One segment: the schedule runs up to the next epoch end or evaluation, then drains and
// evaluates. Returns true when the run stops (a checkpoint_and_stop cut or decision).
bool Trainer::run_segment(std::vector<int64_t>& perm, int64_t& perm_epoch) {
  const int64_t B = deck_.train.batch_size;
  clock_.epoch = steps_done_ / spe_;
  const int64_t in_epoch = steps_done_ - clock_.epoch * spe_;
  const bool mid_cut = resume_state_ && resume_state_->front().position > 0;
  clock_.epoch_start = steps_done_;
  epoch_steps_ = mid_cut ? resume_state_->front().epoch_steps : TrainSetup::segment_steps(steps_done_, spe_, total_steps_, deck_.train.eval_every);
  if (in_epoch == 0 && !mid_cut) reporter_->start_epoch(), epoch_time_ = 0;
  const Schedule ir = setup_.schedule(epoch_steps_);
  if (std::string err = validate(ir); !err.empty()) fail(Exit::internal, "schedule invalid: " + err);
  if (perm_epoch != clock_.epoch) {
    perm = epoch_permutation(data_.train->size(), static_cast<uint64_t>(deck_.run.seed), clock_.epoch), perm_epoch = clock_.epoch;
    data_.train->set_epoch(clock_.epoch);
  }
  const std::vector<int64_t> segment(perm.begin() + in_epoch * B, perm.end());
  clock_.t_epoch0 = now_s();
  reporter_->start_segment(clock_.t_epoch0, last_segment_end_);
  const bool finished = ex_->train(ir, segment, steps_done_ * B, *this, resume_state_);
  if (resume_state_) resume_.states = std::vector<WorkerState>();  // restored: its host copies go (the memory model's snapshots)
  resume_state_ = nullptr;
  last_segment_end_ = now_s();
  const double t_seg = last_segment_end_ - clock_.t_epoch0;
  clock_.train_time += t_seg, time_this_run_ += t_seg, epoch_time_ += t_seg;
  if (versions_) {
    for (auto& v : ex_->version_log())
      versions_->append(nlohmann::json({{"stage", v.stage}, {"replica", ctx_->replica()}, {"epoch", clock_.epoch},
                                        {"segment_start", clock_.epoch_start}, {"mb", v.epoch_unit}, {"fwd", v.fwd}, {"bwd", v.bwd}})
                            .dump());
    ex_->clear_version_log();
  }
  if (!finished) {  // stopped at a checkpoint cut inside the segment
    steps_done_ = stages_.front()->weights->latest_id();
    return true;
  }
  steps_done_ = clock_.epoch_start + epoch_steps_;
  return end_segment(steps_done_ % spe_ == 0 || steps_done_ >= total_steps_, t_seg);
}

// The drained end of a segment: evaluate, log, and checkpoint or stop as agreed.
bool Trainer::end_segment(bool epoch_end, double t_seg) {
  memory_trace("segment trained");
  const double t0 = now_s();
  const Executor::EvalResult res = ex_->evaluate(*eval_ir_);
  const double eval_s = now_s() - t0;
  eval_time_ += eval_s;
  memory_trace("evaluated");
  const int64_t steps = epoch_end ? steps_done_ - clock_.epoch * spe_ : epoch_steps_;
  reporter_->log_eval(steps_done_, epoch_end, epoch_end ? epoch_time_ : t_seg, steps, res, clock_,
                      stages_.front()->opt->current_lr(), eval_s);
  const bool last = steps_done_ >= total_steps_;
  const CheckpointPolicy::Decision d = policy_->at_segment_end(steps_done_, last);
  if (d.checkpoint) {
    std::vector<WorkerState> st = drained_states();
    commit(st, true);
    memory_trace("checkpoint");
  }
  return d.stop && !last;
}

// Every held stage's latest weights and optimizer state (nothing is in flight); replica 0
// only, the one that writes them (rank_file.cpp): a replica > 0 copies its running state.
std::vector<WorkerState> Trainer::drained_states() const {
  std::vector<WorkerState> out;
  for (auto& r : stages_) {
    WorkerState st;
    st.stage = r->id;
    st.latest = r->weights->latest_id();
    if (ctx_->replica() == 0) {
      std::vector<float> w(r->weights->size());
      be_->to_host(w.data(), r->weights->latest(), w.size());
      st.versions.emplace_back(st.latest, std::move(w));
      for (Buffer* b : r->opt->state()) {
        std::vector<float> v(b->size());
        be_->to_host(v.data(), b->data(), v.size());
        st.optimizer.push_back(std::move(v));
      }
    }
    st.optimizer_updates = r->opt->updates();
    st.state.resize(r->state.size());
    if (!st.state.empty()) be_->to_host(st.state.data(), r->state.data(), st.state.size());
    out.push_back(std::move(st));
  }
  return out;
}

void Trainer::commit(std::vector<WorkerState>& states, bool epoch_complete) {
  const int64_t step = states.front().latest;
  const double in_segment = epoch_complete ? 0.0 : now_s() - clock_.t_epoch0;
  for (WorkerState& st : states) {
    st.epoch = clock_.epoch, st.epoch_steps = epoch_steps_, st.epoch_start = clock_.epoch_start;
    st.elapsed_train_s = clock_.train_time + in_segment;
    st.reporting = reporter_->totals(epoch_time_ + in_segment);
  }
  policy_->commit(states, meta(step, epoch_complete), stage_infos());
}

CheckpointMeta Trainer::meta(int64_t step, bool epoch_complete) const {
  CheckpointMeta m;
  m.step = step;
  m.epoch = clock_.epoch, m.epoch_steps = epoch_steps_, m.epoch_start = clock_.epoch_start;
  m.epoch_complete = epoch_complete;
  m.schedule = setup_.def->name;
  m.placement = placement_name(setup_.layout.placement);
  m.split.assign(setup_.layout.first.begin() + 1, setup_.layout.first.end() - 1);
  m.replicas = setup_.layout.replicas;
  m.microbatches = setup_.microbatches;
  m.batch_size = deck_.train.batch_size;
  m.seed = deck_.run.seed;
  m.optimizer = deck_.train.optimizer->name;
  m.model_hash = std::to_string(deck_.model_hash());
  m.model_text = deck_.model_text();
  m.ranks = ctx_->size();
  m.tensor_parts = grid_.parts, m.tensor_rank = grid_.rank;
  return m;
}

std::vector<StageInfo> Trainer::stage_infos() const {
  std::vector<StageInfo> out;
  for (auto& r : stages_) {
    StageInfo i;
    i.stage = r->id;
    i.replica = ctx_->replica();
    i.first_layer = r->stage->first();
    i.end_layer = r->stage->last();
    for (int l = r->stage->first(); l < r->stage->last(); ++l) {
      i.layer_offsets.push_back(r->stage->param_offset(l));
      i.layer_counts.push_back(setup_.model->layer(l).num_params());
      i.state_offsets.push_back(r->stage->state_offset(l));
      i.state_counts.push_back(setup_.model->layer(l).num_state());
    }
    i.optimizer_names = r->opt->state_names();
    out.push_back(std::move(i));
  }
  return out;
}

void Trainer::finish(bool stopped) {
  clock_.epoch = (steps_done_ + spe_ - 1) / spe_;
  policy_->drain();
  if (stopped && ctx_->rank() == 0) {
    std::printf("stopped at step %lld after a checkpoint (%s); resume with --resume %s\n", static_cast<long long>(steps_done_),
                g_signal ? (g_signal == SIGTERM ? "SIGTERM" : "SIGUSR1") : "--stop-at-step", run_dir_.c_str());
    std::fflush(stdout);
  }
  RunOutputs out{*ctx_, setup_, deck_, held(), *ex_};
  out.run_dir = run_dir_;
  out.grid = grid_;
  out.status = stopped ? "stopped" : "completed";
  out.t_origin = t_origin_;
  out.epochs = clock_.epoch;
  out.last_step = steps_done_;
  out.steps_run = steps_done_ - first_step_;
  out.resumed_from = resume_.valid ? resume_.meta.step : -1;
  out.train_time = clock_.train_time;
  out.train_time_this_run = time_this_run_;
  out.time_to_target = reporter_->time_to_target();
  out.final_train_loss = reporter_->last_train_loss();
  out.final_test_loss = reporter_->final_test_loss();
  out.final_accuracy = reporter_->final_accuracy();
  out.last_checkpoint = policy_->last_checkpoint();
  out.input = data_.train->input_transform();
  out.token_unit = data_.train->token_unit();
  out.estimate = estimate_;
  out.eval_mb = eval_mb_;
  out.eval_time = eval_time_;
  if (!plan_json_.empty()) {  // the plan of parallel.split = "auto", and its prediction beside the measurement
    const nlohmann::json plan = nlohmann::json::parse(plan_json_);
    out.extra["plan"] = plan;
    const double measured = out.train_time_this_run / std::max<double>(1.0, static_cast<double>(out.steps_run * deck_.train.batch_size));
    const double predicted = plan.contains("predicted") ? plan["predicted"].value("time_per_sample_s", 0.0) : 0.0;
    out.extra["predicted_time_per_sample_s"] = predicted;
    out.extra["measured_time_per_sample_s"] = measured;
    out.extra["prediction_error"] = predicted > 0 ? (measured - predicted) / predicted : 0.0;
  }
  memory_trace("before outputs");
  write_run_outputs(out);
  memory_trace("outputs");
  ctx_->barrier("end of training");
}

int cmd_train(const TrainArgs& args) {
  Trainer t(args);
  return t.run();
}

}  // namespace pt
