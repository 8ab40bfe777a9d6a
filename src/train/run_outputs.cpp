// The end of a run: gather every rank's statistics, timeline and final weights onto the
// reporter, and write summary.json, trace.json and weights.h5.
#include "run_outputs.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/memory_info.hpp"
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

namespace {

// Per rank, in this order: first stage, replica, compute s, wall s, p2p bytes, allreduce
// bytes, activation, buffer, weight and optimizer bytes, versions held, units in flight,
// skipped updates, slot bytes per sample, allreduce network bytes, peak resident bytes (the
// kernel's high-water mark, read after the end-of-run gathers), training forward seconds,
// evaluation compute seconds, the samples it evaluated on a first stage, and the bytes of full
// recomputation's buffers.
constexpr size_t kStats = 20;

std::vector<double> rank_stats(const RunOutputs& o) {
  const ExecutorStats& st = o.ex.stats();
  int versions = 1;
  int64_t slot_bytes = 0;
  for (const StageRuntime* r : o.stages) versions = std::max(versions, r->weights->max_held()), slot_bytes += r->stage->slot_bytes_per_sample();
  return {static_cast<double>(o.ctx.stages().front()), static_cast<double>(o.ctx.replica()), st.compute_s, st.wall_s,
          static_cast<double>(st.bytes_p2p), static_cast<double>(st.bytes_allreduce), static_cast<double>(st.activation_bytes),
          static_cast<double>(st.buffer_bytes), static_cast<double>(st.weight_bytes), static_cast<double>(st.optimizer_bytes),
          static_cast<double>(versions), static_cast<double>(st.max_in_flight), static_cast<double>(st.skipped_updates),
          static_cast<double>(slot_bytes), static_cast<double>(st.bytes_allreduce_network),
          static_cast<double>(peak_resident_bytes()), st.forward_s, st.eval_compute_s, static_cast<double>(st.eval_samples),
          static_cast<double>(st.recompute_bytes)};
}

// The summary's formula of a rank: the largest over its stages; null where only the
// schedule's replay knows (several stages per rank).
nlohmann::json rank_formula(const TrainSetup& setup, int rank, bool versions) {
  int best = 0;
  for (int s : setup.layout.stages_of_rank(rank)) {
    const int f = versions ? setup.versions_formula(s) : setup.in_flight_formula(s);
    if (f < 0) return nullptr;
    best = std::max(best, f);
  }
  return best;
}

// Final running state per layer: replica 0 of each stage sends it to the reporter (tag
// 78000 + stage); empty for layers without state.
std::vector<std::vector<float>> gather_state(const RunOutputs& o) {
  const ParallelContext& ctx = o.ctx;
  const Layout& layout = o.setup.layout;
  const Model& model = *o.setup.model;
  std::map<int, std::vector<float>> mine;
  for (const StageRuntime* r : o.stages) {
    std::vector<float>& host = mine[r->id];
    host.resize(r->state.size());
    if (!host.empty()) r->stage->backend().to_host(host.data(), r->state.data(), host.size());
    if (ctx.replica() == 0 && !ctx.is_reporter() && !host.empty()) {
      MPI_Request req;
      MPI_Isend(host.data(), static_cast<int>(host.size()), MPI_FLOAT, ctx.reporter(), 78000 + r->id, ctx.world(), &req);
      ctx.wait(&req, [&] { return std::string("sending running state to the reporter"); });
    }
  }
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(model.size()));
  if (!ctx.is_reporter()) return per_layer;
  for (int s = 0; s < layout.stages(); ++s) {
    int64_t n = 0;
    for (int l = layout.first_layer(s); l < layout.end_layer(s); ++l) n += model.layer(l).num_state();
    std::vector<float> buf = mine.count(s) ? mine[s] : std::vector<float>(static_cast<size_t>(n));
    if (!mine.count(s) && n > 0) {
      MPI_Request req;
      MPI_Irecv(buf.data(), static_cast<int>(n), MPI_FLOAT, layout.rank_of(s, 0), 78000 + s, ctx.world(), &req);
      ctx.wait(&req, [&] { return "running state of stage " + std::to_string(s); });
    }
    int64_t off = 0;
    for (int l = layout.first_layer(s); l < layout.end_layer(s); ++l) {
      const int64_t k = model.layer(l).num_state();
      per_layer[static_cast<size_t>(l)].assign(buf.begin() + off, buf.begin() + off + k);
      off += k;
    }
  }
  return per_layer;
}

// Final weights: replica 0 of each stage sends its parameters to the reporter (tag 77000 +
// stage), one stage at a time from one host copy; the reporter lays its own straight out of
// its weight stores and receives the others one stage at a time (the memory model's
// snapshots count these copies).
std::vector<std::vector<float>> gather_weights(const RunOutputs& o) {
  const ParallelContext& ctx = o.ctx;
  const Layout& layout = o.setup.layout;
  const Model& model = *o.setup.model;
  std::vector<std::vector<float>> per_layer(static_cast<size_t>(model.size()));
  for (const StageRuntime* r : o.stages) {
    if (ctx.is_reporter()) {
      for (int l = r->stage->first(); l < r->stage->last(); ++l) {
        std::vector<float>& v = per_layer[static_cast<size_t>(l)];
        v.resize(static_cast<size_t>(model.layer(l).num_params()));
        if (!v.empty()) r->stage->backend().to_host(v.data(), r->weights->latest() + r->stage->param_offset(l), v.size());
      }
    } else if (ctx.replica() == 0 && r->weights->size() > 0) {
      std::vector<float> host(r->weights->size());
      r->stage->backend().to_host(host.data(), r->weights->latest(), host.size());
      MPI_Request req;
      MPI_Isend(host.data(), static_cast<int>(host.size()), MPI_FLOAT, ctx.reporter(), 77000 + r->id, ctx.world(), &req);
      ctx.wait(&req, [&] { return std::string("sending final weights to the reporter"); });
    }
  }
  if (!ctx.is_reporter()) return per_layer;
  const std::vector<int> mine = layout.stages_of_rank(ctx.rank());
  for (int s = 0; s < layout.stages(); ++s) {
    const int f = layout.first_layer(s), l = layout.end_layer(s);
    if (std::find(mine.begin(), mine.end(), s) != mine.end() || model.num_params(f, l) == 0) continue;
    std::vector<float> buf(static_cast<size_t>(model.num_params(f, l)));
    MPI_Request req;
    MPI_Irecv(buf.data(), static_cast<int>(buf.size()), MPI_FLOAT, layout.rank_of(s, 0), 77000 + s, ctx.world(), &req);
    ctx.wait(&req, [&] { return "final weights of stage " + std::to_string(s); });
    int64_t off = 0;
    for (int li = f; li < l; ++li) {
      const int64_t k = model.layer(li).num_params();
      per_layer[static_cast<size_t>(li)].assign(buf.begin() + off, buf.begin() + off + k);
      off += k;
    }
  }
  return per_layer;
}

// parallel.tensor = t > 1: the reporters of the t pipeline worlds form one tensor group;
// tensor rank 0 gathers every rank's part of each split layer and lays its tensors out whole
// (place_shard) in the layout of `whole`, the model of one process; the others get nothing.
std::vector<std::vector<float>> whole_weights(const RunOutputs& o, std::vector<std::vector<float>> parts,
                                              const Model& whole) {
  const Model& model = *o.setup.model;
  const int t = o.grid.parts, me = o.grid.rank;
  std::vector<float> all;
  for (int l = 0; l < model.size(); ++l) {
    const Layer& mine = model.layer(l);
    std::vector<float>& v = parts[static_cast<size_t>(l)];
    if (mine.spec().tensor_parts == 1 || v.empty()) continue;
    if (me == 0) all.resize(v.size() * static_cast<size_t>(t));
    MPI_Request req;
    MPI_Igather(v.data(), static_cast<int>(v.size()), MPI_FLOAT, all.data(), static_cast<int>(v.size()), MPI_FLOAT, 0,
                o.grid.tensor, &req);
    o.ctx.wait(&req, [&] { return "the tensor group's parts of layer " + std::to_string(l) + " for weights.h5"; });
    if (me != 0) continue;
    std::vector<const float*> from;
    for (int k = 0; k < t; ++k) from.push_back(all.data() + static_cast<size_t>(k) * v.size());
    v.assign(static_cast<size_t>(whole.layer(l).num_params()), 0.0f);
    place_layer_parts(mine, whole.layer(l), from, v.data());
  }
  if (me != 0) parts.assign(parts.size(), {});
  return parts;
}

// weights.h5 (or weights_init.h5) at the reporter: under parallel.tensor the whole tensors,
// written by tensor rank 0 only.
void write_weights(const RunOutputs& o, const std::string& name) {
  std::vector<std::vector<float>> per_layer = gather_weights(o);
  const std::vector<std::vector<float>> per_layer_state = gather_state(o);
  if (!o.ctx.is_reporter()) return;
  if (o.grid.parts == 1)
    return write_weights_h5(o.run_dir + "/" + name, *o.setup.model, per_layer, o.deck, o.input, per_layer_state);
  const Model whole(o.deck, o.setup.model->input_shape(), o.setup.model->classes());
  const std::vector<std::vector<float>> w = whole_weights(o, std::move(per_layer), whole);
  if (o.grid.rank == 0) write_weights_h5(o.run_dir + "/" + name, whole, w, o.deck, o.input, per_layer_state);
}

struct Totals {
  double bubble = 0, p2p = 0, ar = 0, ar_net = 0, skipped = 0, samples = 0, bsp_net = 0;
  double forward_s = 0, eval_compute_s = 0, eval_samples = 0;  // summed over ranks
  double network() const { return (p2p + ar_net) / std::max(1.0, samples); }
  double reduction() const { return bsp_net > 0 ? 1.0 - network() / bsp_net : 0.0; }
};

// The estimate (memory_model.hpp) beside the measured peak: their ratio, and the ratio of what
// the model models, without the measured base on either side.
void rank_memory(const RunOutputs& o, int r, int64_t peak, nlohmann::json& j) {
  j["peak_rss_bytes"] = peak;
  if (static_cast<size_t>(r) >= o.estimate.size()) return;
  const RankMemory& m = o.estimate[static_cast<size_t>(r)];
  const int64_t base = m[MemCategory::runtime];
  j["estimated_bytes"] = m.total();
  j["memory"] = memory_json(m)["categories"];
  j["estimate_over_peak"] = peak > 0 ? static_cast<double>(m.total()) / static_cast<double>(peak) : 0.0;
  j["modelled_over_peak_less_base"] = peak > base ? static_cast<double>(m.modelled()) / static_cast<double>(peak - base) : 0.0;
}

nlohmann::json per_rank(const RunOutputs& o, const std::vector<double>& all, Totals& t) {
  nlohmann::json ranks = nlohmann::json::array();
  for (int r = 0; r < o.ctx.size(); ++r) {
    const double* v = &all[static_cast<size_t>(r) * kStats];
    const double bubble = v[3] > 0 ? std::max(0.0, 1.0 - v[2] / v[3]) : 0.0;
    t.skipped += v[12], t.ar_net += v[14], t.bubble += bubble, t.p2p += v[4], t.ar += v[5];
    ranks.push_back({{"rank", r}, {"stage", static_cast<int>(v[0])}, {"stages", o.setup.layout.stages_of_rank(r)},
                     {"replica", static_cast<int>(v[1])}, {"compute_s", v[2]}, {"wall_s", v[3]}, {"bubble_fraction", bubble},
                     {"activation_bytes", static_cast<int64_t>(v[6])}, {"buffer_bytes", static_cast<int64_t>(v[7])},
                     {"weight_bytes", static_cast<int64_t>(v[8])}, {"optimizer_bytes", static_cast<int64_t>(v[9])},
                     {"weight_versions", static_cast<int>(v[10])}, {"weight_versions_formula", rank_formula(o.setup, r, true)},
                     {"max_in_flight", static_cast<int>(v[11])}, {"in_flight_formula", rank_formula(o.setup, r, false)},
                     {"skipped_updates", static_cast<int64_t>(v[12])},
                     {"activation_bytes_per_microbatch", static_cast<int64_t>(v[13]) * o.setup.mb_size},
                     {"forward_compute_s", v[16]}, {"eval_compute_s", v[17]},
                     {"recompute_bytes", static_cast<int64_t>(v[19])}});
    t.forward_s += v[16], t.eval_compute_s += v[17], t.eval_samples += v[18];
    rank_memory(o, r, static_cast<int64_t>(v[15]), ranks.back());
  }
  return ranks;
}

// Tokens/s, model FLOP/s and, given cluster.peak_gflops, model FLOPs utilisation: achieved
// model FLOP/s over peak x ranks. Empty for models without tokens.
nlohmann::json token_rates(const RunOutputs& o, double samples_per_s) {
  if (o.token_unit.empty()) return nlohmann::json::object();
  const Model& model = *o.setup.model;
  const double tokens = static_cast<double>(model.layer(model.size() - 1).labels_per_sample());
  const double flops = model.model_flops_per_sample(), peak = o.deck.cluster.peak_gflops * 1e9 * o.ctx.size();
  return {{"tokens_per_s", samples_per_s * tokens},
          {"model_flops_per_token", flops / tokens},
          {"model_gflops_per_s", samples_per_s * flops / 1e9},
          {"peak_gflops_per_rank", peak > 0 ? nlohmann::json(o.deck.cluster.peak_gflops) : nlohmann::json()},
          {"mfu", peak > 0 ? nlohmann::json(samples_per_s * flops / peak) : nlohmann::json()}};
}

// parallel.recompute per stage
std::vector<std::string> recompute_names(const TrainSetup& setup) {
  std::vector<std::string> out;
  for (Recompute r : setup.recompute) out.emplace_back(enum_name(r));
  return out;
}

// rates: token_rates (empty for models without tokens)
nlohmann::json summary_json(const RunOutputs& o, const Totals& t, nlohmann::json ranks, const nlohmann::json& rates) {
  const Layout& layout = o.setup.layout;
  const int R = o.ctx.size();
  nlohmann::json s = {
      {"status", o.status}, {"deck", o.deck.path}, {"schedule", o.setup.def->name},
      {"valid_gradients", o.setup.def->valid_gradients}, {"precision", enum_name(o.deck.train.precision)},
      {"recompute", recompute_names(o.setup)}, {"ranks", R}, {"tensor_parallel", o.grid.parts}, {"stages", layout.stages()},
      {"placement", placement_name(layout.placement)},
      {"split", std::vector<int>(layout.first.begin() + 1, layout.first.end() - 1)}, {"replicas", layout.replicas},
      {"microbatches", o.setup.microbatches}, {"microbatch_size", o.setup.mb_size}, {"batch_size", o.deck.train.batch_size},
      {"epochs", o.epochs}, {"steps", o.last_step}, {"steps_this_run", o.steps_run},
      {"resumed_from_step", o.resumed_from >= 0 ? nlohmann::json(o.resumed_from) : nlohmann::json()},
      {"last_checkpoint", o.last_checkpoint.empty() ? nlohmann::json() : nlohmann::json(o.last_checkpoint)},
      {"final_train_loss", o.final_train_loss}, {"final_test_loss", o.final_test_loss},
      {"final_test_accuracy", o.final_accuracy},
      {"target_accuracy", o.deck.train.target_accuracy > 0 ? nlohmann::json(o.deck.train.target_accuracy) : nlohmann::json()},
      {"target_loss", o.deck.train.target_loss > 0 ? nlohmann::json(o.deck.train.target_loss) : nlohmann::json()},
      {"time_to_target_s", o.time_to_target >= 0 ? nlohmann::json(o.time_to_target) : nlohmann::json()},
      // the whole run's (a resumed run: every segment since step 0), and this process's part
      {"train_wall_s", o.train_time},
      {"samples_per_s", static_cast<double>(o.last_step * o.deck.train.batch_size) / std::max(1e-9, o.train_time)},
      {"samples_per_s_this_run", t.samples / std::max(1e-9, o.train_time_this_run)},
      {"bubble_fraction", t.bubble / R}, {"bytes_p2p_per_sample", t.p2p / std::max(1.0, t.samples)},
      {"bytes_allreduce_per_sample", t.ar / std::max(1.0, t.samples)},
      // the paper's accounting: bytes all ranks put on the network per sample (p2p messages,
      // ring-allreduce traffic 2(r-1)/r x payload per replica), against data parallelism (bsp)
      // on the same ranks: 2(N-1)/N x all parameters per rank per minibatch
      {"network_bytes_per_sample", t.network()}, {"bsp_network_bytes_per_sample", t.bsp_net},
      {"communication_reduction_vs_bsp", t.reduction()}, {"skipped_updates", static_cast<int64_t>(t.skipped)},
      {"device", o.stages.front()->stage->backend().describe()}, {"blas", blas_description()}, {"seed", o.deck.run.seed},
      {"model_hash", std::to_string(o.deck.model_hash())}, {"eval_batch_size", o.eval_mb}, {"eval_s", o.eval_time},
      {"eval_samples", static_cast<int64_t>(t.eval_samples)},
      {"eval_s_per_sample", t.eval_samples > 0 ? o.eval_time / t.eval_samples : 0.0},
      // compute seconds per sample summed over ranks: evaluation forwards against training FORWARDs
      {"eval_compute_s_per_sample", t.eval_samples > 0 ? t.eval_compute_s / t.eval_samples : 0.0},
      {"forward_compute_s_per_sample", t.samples > 0 ? t.forward_s / t.samples : 0.0},
      {"per_rank", std::move(ranks)}};
  for (auto& [k, v] : rates.items()) s[k] = v;
  for (auto& [k, v] : o.extra.items()) s[k] = v;
  return s;
}

std::vector<double> timeline_doubles(const RunOutputs& o) {
  std::vector<double> out;
  for (const TimelineEvent& e : o.ex.timeline())
    out.insert(out.end(), {e.start - o.t_origin, e.end - o.t_origin, static_cast<double>(e.op), static_cast<double>(e.mb),
                           static_cast<double>(e.bytes), static_cast<double>(e.stage)});
  return out;
}

void write_trace(const RunOutputs& o, const std::vector<std::vector<double>>& traces) {
  std::vector<TraceEvent> events;
  for (size_t r = 0; r < traces.size(); ++r)
    for (size_t i = 0; i + 5 < traces[r].size(); i += 6)
      events.push_back({static_cast<int>(r), traces[r][i], traces[r][i + 1], static_cast<Op>(static_cast<int>(traces[r][i + 2])),
                        static_cast<int32_t>(traces[r][i + 3]), static_cast<int64_t>(traces[r][i + 4]),
                        static_cast<int>(traces[r][i + 5])});
  write_file_atomic(o.run_dir + "/trace.json", chrome_trace_json(events, o.setup.layout, "pipetrain " + o.setup.def->name));
}

// Memory per rank at the end: estimate against the measured peak.
void print_memory(const RunOutputs& o, const std::vector<double>& all) {
  std::string s = "memory per rank (estimate / measured peak):";
  for (int r = 0; r < o.ctx.size() && static_cast<size_t>(r) < o.estimate.size(); ++r) {
    const double peak = all[static_cast<size_t>(r) * kStats + 15], est = static_cast<double>(o.estimate[static_cast<size_t>(r)].total());
    char b[128];
    std::snprintf(b, sizeof b, "%s rank %d %s / %s (%.3f)", r ? "," : "", r, bytes_text(est).c_str(), bytes_text(peak).c_str(),
                  peak > 0 ? est / peak : 0.0);
    s += b;
  }
  std::printf("%s\n", s.c_str());
}

}  // namespace

void write_initial_weights(const RunOutputs& o) { write_weights(o, "weights_init.h5"); }

// weights.h5 first, so that each rank's peak (in the statistics) includes the gathers.
void write_run_outputs(const RunOutputs& o) {
  const ParallelContext& ctx = o.ctx;
  const Model& model = *o.setup.model;
  write_weights(o, "weights.h5");
  const std::vector<double> all = gather_doubles(ctx, rank_stats(o), ctx.reporter(), "run statistics");
  const std::vector<std::vector<double>> traces = gatherv(ctx, timeline_doubles(o), ctx.reporter(), "timeline");
  if (!ctx.is_reporter()) return;
  Totals t;
  t.samples = static_cast<double>(o.steps_run * o.deck.train.batch_size);
  t.bsp_net = 2.0 * (ctx.size() - 1.0) * (static_cast<double>(model.num_params(0, model.size())) + 1.0) * 4.0 /
              static_cast<double>(o.deck.train.batch_size);
  nlohmann::json ranks = per_rank(o, all, t);
  const double sps = t.samples / std::max(1e-9, o.train_time_this_run);
  const nlohmann::json rates = token_rates(o, sps);
  write_file_atomic(o.run_dir + "/summary.json", summary_json(o, t, std::move(ranks), rates).dump(2) + "\n");
  write_trace(o, traces);
  std::printf("wrote %s/{summary.json, metrics.jsonl, trace.json, weights.h5, deck.toml}\n", o.run_dir.c_str());
  char token_fields[96] = "";
  if (!rates.empty()) {
    char mfu[32] = "na";
    if (!rates["mfu"].is_null()) std::snprintf(mfu, sizeof mfu, "%.4f", rates["mfu"].get<double>());
    std::snprintf(token_fields, sizeof token_fields, " tokens_per_s=%.1f mfu=%s", rates["tokens_per_s"].get<double>(), mfu);
  }
  std::printf("PERF schedule=%s precision=%s ranks=%d tensor=%d stages=%d replicas=%s microbatches=%d samples_per_s=%.1f "
              "bubble=%.3f test_accuracy=%.4f train_wall_s=%.2f network_bytes_per_sample=%.0f comm_reduction_vs_bsp=%.3f%s\n",
              o.setup.def->name.c_str(), enum_name(o.deck.train.precision), ctx.size(), o.grid.parts, o.setup.layout.stages(),
              o.setup.layout.replication().c_str(),
              o.setup.microbatches, sps, t.bubble / ctx.size(), o.final_accuracy,
              o.train_time, t.network(), t.reduction(), token_fields);
  print_memory(o, all);
  std::fflush(stdout);
  if (o.deck.run.plots) write_run_plots(o.run_dir);
}

}  // namespace pt
