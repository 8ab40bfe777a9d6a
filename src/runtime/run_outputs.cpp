// The end of a run: gather every rank's statistics, timeline and final weights onto the
// reporter, and write summary.json, trace.json and weights.h5.
#include "run_outputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

std::vector<double> gather_doubles(const ParallelContext& ctx, const std::vector<double>& mine, int root, const char* what) {
  std::vector<double> all(ctx.rank() == root ? mine.size() * static_cast<size_t>(ctx.size()) : 0);
  MPI_Request req;
  MPI_Igather(mine.data(), static_cast<int>(mine.size()), MPI_DOUBLE, all.data(), static_cast<int>(mine.size()),
              MPI_DOUBLE, root, ctx.world(), &req);
  ctx.wait(&req, [&] { return std::string("gather (") + what + ")"; });
  return all;
}

static std::vector<std::vector<double>> gatherv(const ParallelContext& ctx, const std::vector<double>& mine, int root,
                                                const char* what) {
  std::vector<double> n = gather_doubles(ctx, {static_cast<double>(mine.size())}, root, what);
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
  for (size_t r = 0; r < counts.size(); ++r) out.emplace_back(all.begin() + displs[r], all.begin() + displs[r] + counts[r]);
  return out;
}

void write_run_outputs(const RunOutputs& o) {
  const ParallelContext& ctx = o.ctx;
  const Layout& layout = o.setup.layout;
  const Model& model = *o.setup.model;
  const ExecutorStats& st = o.ex.stats();
  const int reporter = ctx.reporter();
  const size_t nparams = static_cast<size_t>(o.stage.num_params());

  std::vector<double> mine = {static_cast<double>(ctx.stage()), static_cast<double>(ctx.replica()), st.compute_s, st.wall_s,
                              static_cast<double>(st.bytes_p2p), static_cast<double>(st.bytes_allreduce),
                              static_cast<double>(st.activation_bytes), static_cast<double>(st.buffer_bytes),
                              static_cast<double>(st.weight_bytes), static_cast<double>(st.optimizer_bytes),
                              static_cast<double>(o.weights.max_held()), static_cast<double>(st.max_in_flight),
                              static_cast<double>(st.skipped_updates), static_cast<double>(o.stage.slot_bytes_per_sample()),
                              static_cast<double>(st.bytes_allreduce_network)};
  const size_t F = mine.size();
  std::vector<double> all = gather_doubles(ctx, mine, reporter, "run statistics");
  std::vector<double> trace_mine;
  for (const TimelineEvent& e : o.ex.timeline())
    trace_mine.insert(trace_mine.end(), {e.start - o.t_origin, e.end - o.t_origin, static_cast<double>(e.op),
                                         static_cast<double>(e.mb), static_cast<double>(e.bytes)});
  std::vector<std::vector<double>> traces = gatherv(ctx, trace_mine, reporter, "timeline");

  // final weights: replica 0 of each stage sends its parameters to the reporter
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(model.size()));
  std::vector<float> host(nparams);
  o.stage.backend().to_host(host.data(), o.weights.latest(), nparams);
  if (ctx.replica() == 0 && !ctx.is_reporter() && nparams > 0) {
    MPI_Request req;
    MPI_Isend(host.data(), static_cast<int>(nparams), MPI_FLOAT, reporter, 77, ctx.world(), &req);
    ctx.wait(&req, [&] { return std::string("sending final weights to the reporter"); });
  }
  if (!ctx.is_reporter()) return;
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

  nlohmann::json ranks = nlohmann::json::array();
  double bubble_sum = 0, p2p = 0, ar = 0, ar_net = 0, skipped = 0;
  for (int r = 0; r < ctx.size(); ++r) {
    const double* v = &all[static_cast<size_t>(r) * F];
    skipped += v[12];
    ar_net += v[14];
    const double bubble = v[3] > 0 ? std::max(0.0, 1.0 - v[2] / v[3]) : 0.0;
    bubble_sum += bubble;
    p2p += v[4];
    ar += v[5];
    const int stage = static_cast<int>(v[0]);
    ranks.push_back({{"rank", r}, {"stage", stage}, {"replica", static_cast<int>(v[1])},
                     {"compute_s", v[2]}, {"wall_s", v[3]}, {"bubble_fraction", bubble},
                     {"activation_bytes", static_cast<int64_t>(v[6])}, {"buffer_bytes", static_cast<int64_t>(v[7])},
                     {"weight_bytes", static_cast<int64_t>(v[8])}, {"optimizer_bytes", static_cast<int64_t>(v[9])},
                     {"weight_versions", static_cast<int>(v[10])},
                     {"weight_versions_formula", o.setup.versions_formula(stage)},
                     {"max_in_flight", static_cast<int>(v[11])},
                     {"in_flight_formula", o.setup.in_flight_formula(stage)},
                     {"skipped_updates", static_cast<int64_t>(v[12])},
                     {"activation_bytes_per_microbatch", static_cast<int64_t>(v[13]) * o.setup.mb_size}});
  }
  const double samples = static_cast<double>(o.steps_run * o.deck.train.batch_size);
  const double R = ctx.size();
  const double bsp_net = 2.0 * (R - 1.0) * (static_cast<double>(model.num_params(0, model.size())) + 1.0) * 4.0 /
                         static_cast<double>(o.deck.train.batch_size);
  std::vector<int> split(layout.first.begin() + 1, layout.first.end() - 1);
  nlohmann::json summary = {
      {"status", o.status},
      {"deck", o.deck.path},
      {"schedule", o.setup.def->name},
      {"valid_gradients", o.setup.def->valid_gradients},
      {"ranks", ctx.size()},
      {"stages", layout.stages()},
      {"split", split},
      {"replicas", layout.replicas},
      {"microbatches", o.setup.microbatches},
      {"microbatch_size", o.setup.mb_size},
      {"batch_size", o.deck.train.batch_size},
      {"epochs", o.epochs},
      {"steps", o.last_step},
      {"steps_this_run", o.steps_run},
      {"resumed_from_step", o.resumed_from >= 0 ? nlohmann::json(o.resumed_from) : nlohmann::json()},
      {"last_checkpoint", o.last_checkpoint.empty() ? nlohmann::json() : nlohmann::json(o.last_checkpoint)},
      {"final_train_loss", o.final_train_loss},
      {"final_test_loss", o.final_test_loss},
      {"final_test_accuracy", o.final_accuracy},
      {"target_accuracy", o.deck.train.target_accuracy > 0 ? nlohmann::json(o.deck.train.target_accuracy) : nlohmann::json()},
      {"time_to_target_s", o.time_to_target >= 0 ? nlohmann::json(o.time_to_target) : nlohmann::json()},
      {"train_wall_s", o.train_time},
      {"samples_per_s", samples / std::max(1e-9, o.train_time_this_run)},
      {"bubble_fraction", bubble_sum / ctx.size()},
      {"bytes_p2p_per_sample", p2p / std::max(1.0, samples)},
      {"bytes_allreduce_per_sample", ar / std::max(1.0, samples)},
      // the paper's accounting: bytes all ranks put on the network per sample (p2p messages,
      // ring-allreduce traffic 2(r-1)/r x payload per replica), against data parallelism (bsp)
      // on the same ranks: 2(N-1)/N x all parameters per rank per minibatch
      {"network_bytes_per_sample", (p2p + ar_net) / std::max(1.0, samples)},
      {"bsp_network_bytes_per_sample", bsp_net},
      {"communication_reduction_vs_bsp", bsp_net > 0 ? 1.0 - (p2p + ar_net) / std::max(1.0, samples) / bsp_net : 0.0},
      {"skipped_updates", static_cast<int64_t>(skipped)},
      {"device", o.stage.backend().describe()},
      {"blas", blas_description()},
      {"seed", o.deck.run.seed},
      {"model_hash", std::to_string(o.deck.model_hash())},
      {"per_rank", ranks},
  };
  for (auto& [k, v] : o.extra.items()) summary[k] = v;
  write_file_atomic(o.run_dir + "/summary.json", summary.dump(2) + "\n");

  std::vector<TraceEvent> events;
  for (size_t r = 0; r < traces.size(); ++r)
    for (size_t i = 0; i + 4 < traces[r].size(); i += 5)
      events.push_back({static_cast<int>(r), traces[r][i], traces[r][i + 1], static_cast<Op>(static_cast<int>(traces[r][i + 2])),
                        static_cast<int32_t>(traces[r][i + 3]), static_cast<int64_t>(traces[r][i + 4])});
  write_file_atomic(o.run_dir + "/trace.json", chrome_trace_json(events, layout, "pipetrain " + o.setup.def->name));
  write_weights_h5(o.run_dir + "/weights.h5", model, per_layer, o.deck, o.input);
  std::printf("wrote %s/{summary.json, metrics.jsonl, trace.json, weights.h5, deck.toml}\n", o.run_dir.c_str());
  std::printf("PERF schedule=%s ranks=%d stages=%d replicas=%s microbatches=%d samples_per_s=%.1f bubble=%.3f "
              "test_accuracy=%.4f train_wall_s=%.2f network_bytes_per_sample=%.0f comm_reduction_vs_bsp=%.3f\n",
              o.setup.def->name.c_str(), ctx.size(), layout.stages(), layout.replication().c_str(), o.setup.microbatches,
              samples / std::max(1e-9, o.train_time_this_run), bubble_sum / ctx.size(), o.final_accuracy, o.train_time,
              (p2p + ar_net) / std::max(1.0, samples), bsp_net > 0 ? 1.0 - (p2p + ar_net) / std::max(1.0, samples) / bsp_net : 0.0);
  std::fflush(stdout);
  if (o.deck.run.plots) write_run_plots(o.run_dir);
}

}  // namespace pt
