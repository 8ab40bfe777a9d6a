// `pipetrain train`: deck -> model -> layout -> schedule -> executor, epoch by epoch, with
// progress and metrics on the reporter rank and the run directory's outputs at the end.
#include <mpi.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <numeric>

#include "pipetrain/commands.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/runtime.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

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

// Gather a fixed number of doubles from every rank onto `root`.
std::vector<double> gather(const ParallelContext& ctx, const std::vector<double>& mine, int root, const char* what) {
  std::vector<double> all(ctx.rank() == root ? mine.size() * static_cast<size_t>(ctx.size()) : 0);
  MPI_Request req;
  MPI_Igather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
              MPI_DOUBLE, root, ctx.world(), &req);
  ctx.wait(&req, [&] { return std::string("gather (") + what + ")"; });
  return all;
}

// Gather a variable number of doubles from every rank onto `root`.
std::vector<std::vector<double>> gatherv(const ParallelContext& ctx, const std::vector<double>& mine, int root,
                                         const char* what) {
  std::vector<double> n = gather(ctx, {static_cast<double>(mine.size())}, root, what);
  std::vector<int> counts, displs;
  std::vector<double> all;
  if (ctx.rank() == root) {
    int off = 0;
    for (double c : n) {
      counts.push_back(static_cast<int>(c));
      displs.push_back(off);
      off += static_cast<int>(c);
    }
    all.resize(static_cast<size_t>(off));
  }
  MPI_Request req;
  MPI_Igatherv(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), counts.data(), displs.data(),
               MPI_DOUBLE, root, ctx.world(), &req);
  ctx.wait(&req, [&] { return std::string("gather (") + what + ")"; });
  std::vector<std::vector<double>> out;
  for (size_t r = 0; r < counts.size(); ++r)
    out.emplace_back(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  return out;
}

// The formulas summary.json sets beside the measured values: weight versions a stage holds
// (pipedream, vsync: its in-flight depth, K - s on a straight pipeline; 2bw: 2; otherwise 1)
// and microbatches in flight (gpipe: M; model-parallel: 1; otherwise the 1F1B depth,
// bounded by the units of one update group for flush schedules).
int versions_formula(const TrainSetup& t, int stage) {
  switch (t.kind) {
    case ScheduleKind::pipedream:
    case ScheduleKind::pipedream_vsync: return t.layout.in_flight_depth(stage);
    case ScheduleKind::two_bw: return 2;
    default: return 1;
  }
}

int in_flight_formula(const TrainSetup& t, int stage) {
  const int r = t.layout.replicas[static_cast<size_t>(stage)];
  const int per_replica = (t.microbatches + r - 1) / r;
  switch (t.kind) {
    case ScheduleKind::gpipe: return per_replica;
    case ScheduleKind::model_parallel: return 1;
    case ScheduleKind::one_f_one_b:
    case ScheduleKind::bsp: return std::min(per_replica, t.layout.in_flight_depth(stage));
    default: return t.layout.in_flight_depth(stage);
  }
}

}  // namespace

TrainSetup TrainSetup::from_deck(const Deck& deck, int world_size) {
  TrainSetup t;
  DataInfo info = data_info(deck);
  t.model = std::make_unique<Model>(deck, info.shape, info.classes);
  t.layout = Layout::from_deck(deck, t.model->size(), world_size);
  t.kind = schedule_kind(deck.parallel.schedule);
  t.microbatches = t.per_minibatch_units() ? 1 : static_cast<int>(deck.parallel.microbatches);
  if (t.kind == ScheduleKind::two_bw && t.microbatches < t.layout.stages())
    fail(Exit::bad_input,
         deck.where("parallel.microbatches") + ": key 'parallel.microbatches': 2bw needs at least one microbatch per stage (M >= K), got M = " +
             std::to_string(t.microbatches) + " for " + std::to_string(t.layout.stages()) + " stages",
         true);
  t.mb_size = deck.train.batch_size / t.microbatches;
  return t;
}

int64_t TrainSetup::steps_per_epoch(const Deck& deck, int64_t N) const {
  const int64_t B = deck.train.batch_size;
  int64_t spe = N / B;
  int64_t lcm = 1;
  if (per_minibatch_units())
    for (int r : layout.replicas) lcm = std::lcm(lcm, static_cast<int64_t>(r));
  spe -= spe % lcm;
  if (spe <= 0)
    fail(Exit::bad_input, deck.where("train.batch_size") + ": key 'train.batch_size': " + std::to_string(B) +
                              " leaves no full minibatch" + (lcm > 1 ? " group (replicas " + layout.replication() + ")" : std::string()) +
                              " in the " + std::to_string(N) + " training samples", true);
  return spe;
}

int64_t TrainSetup::total_steps(const Deck& deck, int64_t N) const {
  int64_t t = deck.train.epochs * steps_per_epoch(deck, N);
  return deck.train.max_steps > 0 ? std::min(t, deck.train.max_steps) : t;
}

int cmd_train(const TrainArgs& args) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  const Deck deck = load_deck(args.deck, args.sets);
  TrainSetup setup = TrainSetup::from_deck(deck, world_size);
  const Model& model = *setup.model;
  const Layout& layout = setup.layout;
  const int64_t B = deck.train.batch_size;

  // Data: every rank opens it; stage 0 reads inputs, the last stage labels.
  DataSplit data;
  try {
    data = open_data(deck);
  } catch (const Error& e) {  // rank-local: abort the job naming this rank
    fail(e.code(), "rank " + std::to_string(world_rank) + ": " + e.what());
  }
  const int64_t N = data.train->size();
  const int64_t spe = setup.steps_per_epoch(deck, N);
  const int64_t total_steps = setup.total_steps(deck, N);

  ParallelContext ctx(MPI_COMM_WORLD, layout, deck.run.comm_timeout_s);
  const std::string run_dir = deck.run.output_dir + "/" + deck.run.name;
  if (ctx.is_reporter()) {
    make_dirs(run_dir);
    write_file_atomic(run_dir + "/deck.toml", deck.effective_toml());
  }

  std::unique_ptr<Backend> be = deck.run.device == "cuda" ? make_cuda_backend(0) : make_host_backend();
  const int s = ctx.stage();
  Stage stage(*be, model, layout.first_layer(s), layout.end_layer(s), setup.mb_size,
              std::min<int64_t>(deck.train.eval_batch_size, data.test->size()));
  const size_t nparams = static_cast<size_t>(stage.num_params());
  WeightStore weights(*be, nparams);
  {
    std::vector<float> host(nparams);
    stage.init_params(host.data(), static_cast<uint64_t>(deck.run.seed));
    be->from_host(weights.latest(), host.data(), nparams);
  }
  // stride: minibatches applied per update of this stage (replicas of a pipedream stage)
  const int64_t stride = setup.per_minibatch_units() ? layout.replicas[static_cast<size_t>(s)] : 1;
  Optimizer opt(deck.train, *be, nparams, std::max<int64_t>(1, total_steps / stride));
  ExecutorConfig cfg;
  cfg.seed = static_cast<uint64_t>(deck.run.seed);
  cfg.batch_size = B;
  cfg.eval_mb = stage.eval_mb();
  cfg.debug_versions = deck.run.debug_versions;
  cfg.skip_nonfinite = deck.train.nonfinite == "skip";
  cfg.trace_limit = 200000;
  Executor ex(ctx, stage, weights, opt, *data.train, *data.test, cfg);

  if (world_rank == 0) {
    std::printf("pipetrain: %s on %d rank%s, device %s, BLAS %s\n", deck.path.c_str(), world_size,
                world_size == 1 ? "" : "s", be->describe().c_str(), blas_description().c_str());
    std::printf("data: %s; test %s\n", data.train->describe().c_str(), data.test->describe().c_str());
    std::printf("model: %d layers, %lld parameters\n", model.size(), static_cast<long long>(model.num_params(0, model.size())));
    std::printf("layout: %s\n", layout.str().c_str());
    std::printf("schedule: %s, %d microbatch%s of %lld per minibatch of %lld; %lld steps (%lld per epoch)%s\n",
                schedule_name(setup.kind), setup.microbatches, setup.microbatches == 1 ? "" : "es",
                static_cast<long long>(setup.mb_size), static_cast<long long>(B), static_cast<long long>(total_steps),
                static_cast<long long>(spe),
                setup.kind == ScheduleKind::pipedream_nostash ? "  ** ablation baseline: backward uses the latest weights, gradients are INVALID **" : "");
    std::printf("run directory: %s\n", run_dir.c_str());
    std::fflush(stdout);
  }

  // Reporter state
  std::unique_ptr<MetricsLog> metrics;
  if (ctx.is_reporter()) metrics = std::make_unique<MetricsLog>(run_dir + "/metrics.jsonl");
  std::unique_ptr<MetricsLog> versions;
  if (deck.run.debug_versions) {
    if (ctx.is_reporter()) make_dirs(run_dir + "/versions");
    ctx.barrier("version log directory");
    versions = std::make_unique<MetricsLog>(run_dir + "/versions/rank" + std::to_string(world_rank) + ".jsonl");
  }
  double train_time = 0, interval_start = 0, interval_samples = 0, interval_loss = 0;
  double epoch_loss = 0, epoch_samples = 0, last_train_loss = NAN;
  int64_t next_log = deck.train.log_every, epoch = 0, steps_done = 0;
  double t_epoch0 = 0;
  double time_to_target = -1;
  double final_acc = NAN, final_test_loss = NAN;

  auto on_update = [&](const UpdateReport& r) {
    if (!ctx.is_reporter()) return;
    interval_loss += r.loss_sum;
    interval_samples += static_cast<double>(r.samples);
    epoch_loss += r.loss_sum;
    epoch_samples += static_cast<double>(r.samples);
    const int64_t step = r.minibatches;
    if (step >= next_log || step == total_steps) {
      const double now = now_s();
      const double elapsed = train_time + (now - t_epoch0);
      const double sps = interval_samples / std::max(1e-9, now - interval_start);
      const double loss = interval_loss / std::max(1.0, interval_samples);
      const double eta = (static_cast<double>(total_steps - step)) * elapsed / std::max<double>(1, static_cast<double>(step));
      std::printf("step %lld/%lld  epoch %lld  loss %.4f  lr %.4g  %s samples/s  elapsed %s  ETA %s\n",
                  static_cast<long long>(step), static_cast<long long>(total_steps), static_cast<long long>(epoch + 1), loss,
                  r.lr, human_rate(sps).c_str(), human_time(elapsed).c_str(), human_time(eta).c_str());
      std::fflush(stdout);
      nlohmann::json j = {{"type", "step"}, {"step", step}, {"epoch", epoch}, {"loss", loss}, {"lr", r.lr},
                          {"samples_per_s", sps}, {"elapsed_s", elapsed}};
      metrics->append(j.dump());
      last_train_loss = loss;
      interval_start = now;
      interval_samples = interval_loss = 0;
      while (next_log <= step) next_log += deck.train.log_every;
    }
  };

  const int64_t eval_units = (data.test->size() + stage.eval_mb() - 1) / stage.eval_mb();
  Schedule eval_ir = make_eval_schedule(layout, eval_units);
  if (std::string err = validate(eval_ir); !err.empty()) fail(Exit::internal, "evaluation schedule invalid: " + err);

  ctx.barrier("start of training");
  const double t_origin = now_s();
  for (epoch = 0; steps_done < total_steps; ++epoch) {
    const int64_t steps = std::min(spe, total_steps - steps_done);
    Schedule ir = make_schedule(setup.kind, layout, steps, setup.microbatches);
    if (std::string err = validate(ir); !err.empty()) fail(Exit::internal, "schedule invalid: " + err);
    const std::vector<int64_t> perm = epoch_permutation(N, static_cast<uint64_t>(deck.run.seed), epoch);
    t_epoch0 = interval_start = now_s();
    epoch_loss = epoch_samples = 0;
    ex.train(ir, perm, epoch * spe * B, on_update);
    const double t_epoch = now_s() - t_epoch0;
    train_time += t_epoch;
    steps_done += steps;
    if (versions) {
      for (auto& v : ex.version_log())
        versions->append(nlohmann::json({{"stage", ctx.stage()}, {"replica", ctx.replica()}, {"epoch", epoch},
                                         {"mb", v.epoch_unit}, {"fwd", v.fwd}, {"bwd", v.bwd}}).dump());
      ex.clear_version_log();
    }
    Executor::EvalResult res = ex.evaluate(eval_ir);
    if (ctx.is_reporter()) {
      final_acc = static_cast<double>(res.correct) / static_cast<double>(std::max<int64_t>(1, res.samples));
      final_test_loss = res.loss_sum / static_cast<double>(std::max<int64_t>(1, res.samples));
      const double train_loss = epoch_loss / std::max(1.0, epoch_samples);
      last_train_loss = train_loss;
      if (deck.train.target_accuracy > 0 && time_to_target < 0 && final_acc >= deck.train.target_accuracy)
        time_to_target = train_time;
      std::printf("epoch %lld: train loss %.4f  test loss %.4f  test accuracy %.4f  (%s samples/s, epoch %s)%s\n",
                  static_cast<long long>(epoch + 1), train_loss, final_test_loss, final_acc,
                  human_rate(static_cast<double>(steps * B) / t_epoch).c_str(), human_time(t_epoch).c_str(),
                  time_to_target >= 0 && time_to_target == train_time ? "  target reached" : "");
      std::fflush(stdout);
      nlohmann::json j = {{"type", "epoch"}, {"epoch", epoch}, {"step", steps_done}, {"loss", train_loss},
                          {"train_loss", train_loss}, {"test_loss", final_test_loss}, {"test_accuracy", final_acc},
                          {"samples_per_s", static_cast<double>(steps * B) / t_epoch}, {"elapsed_s", train_time},
                          {"lr", opt.current_lr()}};
      metrics->append(j.dump());
    }
  }

  // ---- outputs ----------------------------------------------------------------------
  const ExecutorStats& st = ex.stats();
  const int reporter = ctx.reporter();
  std::vector<double> mine = {static_cast<double>(ctx.stage()), static_cast<double>(ctx.replica()), st.compute_s, st.wall_s,
                              static_cast<double>(st.bytes_p2p), static_cast<double>(st.bytes_allreduce),
                              static_cast<double>(st.activation_bytes), static_cast<double>(st.buffer_bytes),
                              static_cast<double>(st.weight_bytes), static_cast<double>(st.optimizer_bytes),
                              static_cast<double>(weights.max_held()), static_cast<double>(st.max_in_flight),
                              static_cast<double>(st.skipped_updates), static_cast<double>(stage.slot_bytes_per_sample())};
  const size_t F = mine.size();
  std::vector<double> all = gather(ctx, mine, reporter, "run statistics");
  std::vector<double> trace_mine;
  for (const TimelineEvent& e : ex.timeline())
    trace_mine.insert(trace_mine.end(), {e.start - t_origin, e.end - t_origin, static_cast<double>(e.op),
                                          static_cast<double>(e.mb), static_cast<double>(e.bytes)});
  std::vector<std::vector<double>> traces = gatherv(ctx, trace_mine, reporter, "timeline");

  // weights: replica 0 of each stage sends its parameters to the reporter
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(model.size()));
  {
    std::vector<float> host(nparams);
    be->to_host(host.data(), weights.latest(), nparams);
    if (ctx.replica() == 0 && !ctx.is_reporter() && nparams > 0) {
      MPI_Request req;
      MPI_Isend(host.data(), static_cast<int>(nparams), MPI_FLOAT, reporter, 77, ctx.world(), &req);
      ctx.wait(&req, [&] { return std::string("sending final weights to the reporter"); });
    }
    if (ctx.is_reporter()) {
      for (int ss = 0; ss < layout.stages(); ++ss) {
        const int f = layout.first_layer(ss), l = layout.end_layer(ss);
        const int64_t n = model.num_params(f, l);
        std::vector<float> buf;
        if (ss == ctx.stage()) {
          buf = host;
        } else if (n > 0) {
          buf.resize(static_cast<size_t>(n));
          MPI_Request req;
          MPI_Irecv(buf.data(), static_cast<int>(n), MPI_FLOAT, layout.rank_of(ss, 0), 77, ctx.world(), &req);
          ctx.wait(&req, [&] { return "final weights of stage " + std::to_string(ss); });
        }
        int64_t off = 0;
        for (int li = f; li < l; ++li) {
          const int64_t k = model.layer(li).num_params();
          per_layer[static_cast<size_t>(li)].assign(buf.begin() + off, buf.begin() + off + k);
          off += k;
        }
      }
    }
  }

  if (ctx.is_reporter()) {
    nlohmann::json ranks = nlohmann::json::array();
    double bubble_sum = 0, p2p = 0, ar = 0;
    for (int r = 0; r < ctx.size(); ++r) {
      const double* v = &all[static_cast<size_t>(r) * F];
      const double bubble = v[3] > 0 ? std::max(0.0, 1.0 - v[2] / v[3]) : 0.0;
      bubble_sum += bubble;
      p2p += v[4];
      ar += v[5];
      ranks.push_back({{"rank", r}, {"stage", static_cast<int>(v[0])}, {"replica", static_cast<int>(v[1])},
                       {"compute_s", v[2]}, {"wall_s", v[3]}, {"bubble_fraction", bubble},
                       {"activation_bytes", static_cast<int64_t>(v[6])}, {"buffer_bytes", static_cast<int64_t>(v[7])},
                       {"weight_bytes", static_cast<int64_t>(v[8])}, {"optimizer_bytes", static_cast<int64_t>(v[9])},
                       {"weight_versions", static_cast<int>(v[10])}, {"max_in_flight", static_cast<int>(v[11])},
                       {"weight_versions_formula", versions_formula(setup, static_cast<int>(v[0]))},
                       {"in_flight_formula", in_flight_formula(setup, static_cast<int>(v[0]))},
                       {"skipped_updates", static_cast<int64_t>(v[12])},
                       {"activation_bytes_per_microbatch", static_cast<int64_t>(v[13]) * setup.mb_size}});
    }
    const double samples = static_cast<double>(total_steps * B);
    std::vector<int> split(layout.first.begin() + 1, layout.first.end() - 1);
    nlohmann::json summary = {
        {"status", "completed"},
        {"deck", deck.path},
        {"schedule", schedule_name(setup.kind)},
        {"valid_gradients", setup.kind != ScheduleKind::pipedream_nostash},
        {"ranks", ctx.size()},
        {"stages", layout.stages()},
        {"split", split},
        {"replicas", layout.replicas},
        {"microbatches", setup.microbatches},
        {"microbatch_size", setup.mb_size},
        {"batch_size", B},
        {"epochs", epoch},
        {"steps", total_steps},
        {"final_train_loss", last_train_loss},
        {"final_test_loss", final_test_loss},
        {"final_test_accuracy", final_acc},
        {"target_accuracy", deck.train.target_accuracy > 0 ? nlohmann::json(deck.train.target_accuracy) : nlohmann::json()},
        {"time_to_target_s", time_to_target >= 0 ? nlohmann::json(time_to_target) : nlohmann::json()},
        {"train_wall_s", train_time},
        {"samples_per_s", samples / std::max(1e-9, train_time)},
        {"bubble_fraction", bubble_sum / ctx.size()},
        {"bytes_p2p_per_sample", p2p / std::max(1.0, samples)},
        {"bytes_allreduce_per_sample", ar / std::max(1.0, samples)},
        {"device", be->describe()},
        {"blas", blas_description()},
        {"seed", deck.run.seed},
        {"model_hash", std::to_string(deck.model_hash())},
        {"per_rank", ranks},
    };
    write_file_atomic(run_dir + "/summary.json", summary.dump(2) + "\n");

    std::vector<TraceEvent> events;
    for (size_t r = 0; r < traces.size(); ++r)
      for (size_t i = 0; i + 4 < traces[r].size(); i += 5)
        events.push_back({static_cast<int>(r), traces[r][i], traces[r][i + 1], static_cast<Op>(static_cast<int>(traces[r][i + 2])),
                          static_cast<int32_t>(traces[r][i + 3]), static_cast<int64_t>(traces[r][i + 4])});
    write_file_atomic(run_dir + "/trace.json", chrome_trace_json(events, layout, std::string("pipetrain ") + schedule_name(setup.kind)));
    write_weights_h5(run_dir + "/weights.h5", model, per_layer);
    std::printf("wrote %s/{summary.json, metrics.jsonl, trace.json, weights.h5, deck.toml}\n", run_dir.c_str());
    std::printf("PERF schedule=%s ranks=%d stages=%d replicas=%s microbatches=%d samples_per_s=%.1f bubble=%.3f "
                "test_accuracy=%.4f train_wall_s=%.2f\n",
                schedule_name(setup.kind), ctx.size(), layout.stages(), layout.replication().c_str(), setup.microbatches,
                samples / std::max(1e-9, train_time), bubble_sum / ctx.size(), final_acc, train_time);
    std::fflush(stdout);
  }
  ctx.barrier("end of training");
  return 0;
}

}  // namespace pt
