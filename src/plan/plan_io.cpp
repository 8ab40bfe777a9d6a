// plan.json (write and read back), the comparison table, and the synthetic chain.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

// "15-1"; long layouts run-length encoded: "128(x8)-64"
std::string replication_str(const Layout& l) {
  if (l.stages() <= 16) return l.replication();
  std::string s;
  for (size_t i = 0; i < l.replicas.size();) {
    size_t j = i;
    while (j < l.replicas.size() && l.replicas[j] == l.replicas[i]) ++j;
    s += (s.empty() ? "" : "-") + std::to_string(l.replicas[i]) + (j - i > 1 ? "(x" + std::to_string(j - i) + ")" : "");
    i = j;
  }
  return s;
}

nlohmann::json num(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

nlohmann::json candidate_json(const PlanCandidate& c) {
  nlohmann::json j = {{"label", c.label}, {"schedule", c.schedule}, {"microbatches", c.microbatches},
                      {"batch_size", c.batch_size}, {"fits", c.fits}, {"recompute", enum_name(c.recompute)}, {"note", c.note}};
  if (!c.layout.replicas.empty()) {
    j["replication"] = replication_str(c.layout);
    j["stages"] = c.layout.stages();
    j["split"] = std::vector<int>(c.layout.first.begin() + 1, c.layout.first.end() - 1);
    j["replicas"] = c.layout.replicas;
    j["placement"] = placement_name(c.layout.placement);
  }
  j["dp_objective_s"] = num(c.dp_objective);
  if (c.sim.ok && c.sim.time_per_minibatch > 0) {
    j["time_per_minibatch_s"] = num(c.sim.time_per_minibatch);
    j["time_per_sample_s"] = num(c.sim.time_per_sample);
    j["bubble_fraction"] = num(c.sim.bubble);
    j["max_memory_bytes"] = num(c.sim.max_memory);
    j["network_bytes_per_sample"] = num(c.sim.network_bytes_per_sample);
  }
  return j;
}

std::string bytes_str(double b) {
  char s[32];
  if (!std::isfinite(b)) return "-";
  if (b >= 1e9) std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof s, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(s, sizeof s, "%.1f kB", b / 1e3);
  else std::snprintf(s, sizeof s, "%.0f B", b);
  return s;
}

uint64_t splitmix(uint64_t& x) {
  uint64_t z = (x += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}
double uniform(uint64_t& x) { return static_cast<double>(splitmix(x) >> 11) * 0x1.0p-53; }

}  // namespace

std::string Plan::to_json() const {
  nlohmann::json j = {{"format", "pipetrain-plan-1"}, {"ok", ok}, {"profile", profile_source}, {"cluster", cluster},
                      {"ranks", ranks}, {"layers", layers}, {"batch_size", batch_size}, {"memory_cap", memory_cap}};
  if (!ok) {
    j["error"] = error;
  } else {
    j["schedule"] = schedule;
    j["tensor"] = tensor;
    j["recompute"] = enum_name(recompute);
    j["microbatches"] = microbatches;
    j["microbatch_size"] = schedule_def(schedule).unit_size(batch_size, microbatches);
    j["split"] = split();
    j["replicas"] = layout.replicas;  // per rank group
    j["placement"] = placement_name(layout.placement);
    j["replication"] = replication_str(layout);
    nlohmann::json st = nlohmann::json::array();
    for (int s = 0; s < layout.stages(); ++s) {
      std::vector<int> rk;
      for (int r = 0; r < layout.replicas_of(s); ++r) rk.push_back(layout.rank_of(s, r));
      nlohmann::json e = {{"stage", s},
                          {"first_layer", layout.first_layer(s)},
                          {"last_layer", layout.end_layer(s) - 1},
                          {"replicas", layout.replicas_of(s)},
                          {"ranks", rk},
                          {"in_flight_depth", layout.in_flight_depth(s)}};
      if (static_cast<size_t>(s) < sim.stages.size()) {
        const StagePrediction& sp = sim.stages[static_cast<size_t>(s)];
        e["max_in_flight"] = sp.memory.in_flight;
        e["weight_versions"] = sp.memory.versions;
        e["memory_bytes"] = sp.memory.total();
        e["memory"] = memory_json(sp.memory)["categories"];  // the memory model's categories (memory_model.hpp)
        e["forward_s_per_unit"] = sp.forward_s;
        e["backward_s_per_unit"] = sp.backward_s;
        e["allreduce_s"] = sp.allreduce_s;
        e["busy_fraction"] = sp.busy_fraction;
      }
      st.push_back(e);
    }
    j["stages"] = st;
    j["predicted"] = {{"time_per_minibatch_s", num(sim.time_per_minibatch)},
                      {"time_per_sample_s", num(sim.time_per_sample)},
                      {"samples_per_s", num(sim.samples_per_s)},
                      {"bubble_fraction", num(sim.bubble)},
                      {"max_memory_bytes", num(sim.max_memory)},
                      {"bytes_p2p_per_sample", num(sim.bytes_p2p_per_sample)},
                      {"bytes_allreduce_per_sample", num(sim.bytes_allreduce_per_sample)},
                      {"network_bytes_per_sample", num(sim.network_bytes_per_sample)},
                      {"warmup_minibatches", sim.warmup},
                      {"window_minibatches", sim.window}};
    j["dp_objective_s"] = num(dp_objective);
    j["speedup_vs_bsp"] = num(speedup_vs_bsp());
    j["communication_reduction_vs_bsp"] = num(comm_reduction_vs_bsp());
  }
  nlohmann::json base = nlohmann::json::object();
  if (has_bsp) base["bsp"] = candidate_json(bsp);
  if (has_straight) base["straight"] = candidate_json(straight);
  j["baselines"] = base;
  nlohmann::json cands = nlohmann::json::array();
  for (const PlanCandidate& c : candidates) cands.push_back(candidate_json(c));
  j["candidates"] = cands;
  j["plan_seconds"] = plan_seconds;
  if (!choice_note.empty()) j["choice_note"] = choice_note;
  j["cost_model"] = cost_model;
  if (!cost_model_json.empty()) j[cost_model] = nlohmann::json::parse(cost_model_json);
  return j.dump(2) + "\n";
}

std::string Plan::table() const {
  std::ostringstream o;
  char b[512];
  o << "plan for " << ranks << " ranks, " << layers << " layers, minibatch " << batch_size << "; memory cap "
    << (memory_cap > 0 ? bytes_str(memory_cap) : std::string("none")) << "\n";
  o << "cluster: " << cluster << "\n";
  if (tensor > 1) o << "parallel.tensor = " << tensor << ": the layout's " << ranks / tensor << " ranks are groups of " << tensor << "\n";
  if (!ok) {
    o << "NO PLAN: " << error << "\n";
  }
  const double bsp_t = has_bsp ? bsp.sim.time_per_sample : NAN;
  const double bsp_n = has_bsp ? bsp.sim.network_bytes_per_sample : NAN;
  auto row = [&](const std::string& what, const PlanCandidate& c) {
    const bool sim_ok = c.sim.ok && c.sim.time_per_sample > 0;
    char sp[16] = "-", red[16] = "-", tps[24] = "-", bub[16] = "-";
    if (sim_ok) {
      std::snprintf(tps, sizeof tps, "%.4f", c.sim.time_per_sample * 1e3);
      std::snprintf(bub, sizeof bub, "%.3f", c.sim.bubble);
      if (std::isfinite(bsp_t)) std::snprintf(sp, sizeof sp, "%.2fx", bsp_t / c.sim.time_per_sample);
      if (std::isfinite(bsp_n) && bsp_n > 0)
        std::snprintf(red, sizeof red, "%.1f%%", 100.0 * (1.0 - c.sim.network_bytes_per_sample / bsp_n));
    }
    std::string rep = c.layout.replicas.empty() ? "-" : replication_str(c.layout);
    if (rep.size() > 24) rep = rep.substr(0, 21) + "...";
    // a recomputing candidate's schedule reads "1f1b+full"
    const std::string sched = c.schedule + (c.recompute == Recompute::none ? "" : std::string("+") + enum_name(c.recompute));
    std::snprintf(b, sizeof b, "%-16s %-10s %4d %-24s %12s %9s %7s %11s %13s %10s  %s\n", what.c_str(), sched.c_str(),
                  c.microbatches, rep.c_str(), tps, sp, bub, sim_ok ? bytes_str(c.sim.max_memory).c_str() : "-",
                  sim_ok ? bytes_str(c.sim.network_bytes_per_sample).c_str() : "-", red, c.note.c_str());
    o << b;
  };
  auto head = [&]() {
    std::snprintf(b, sizeof b, "%-16s %-10s %4s %-24s %12s %9s %7s %11s %13s %10s\n", "", "schedule", "M", "replication",
                  "ms/sample", "vs bsp", "bubble", "max memory", "net B/sample", "comm red.");
    o << b;
  };
  head();
  if (ok) {
    PlanCandidate chosen;
    chosen.schedule = schedule;
    chosen.microbatches = microbatches;
    chosen.layout = layout;
    chosen.sim = sim;
    chosen.batch_size = batch_size;
    row("chosen plan", chosen);
  }
  if (has_bsp) row("bsp" + std::string(bsp.batch_size != batch_size ? " (B=" + std::to_string(bsp.batch_size) + ")" : ""), bsp);
  if (has_straight) row("straight", straight);
  if (ok && std::isfinite(speedup_vs_bsp())) {
    const double red = comm_reduction_vs_bsp();
    char rs[32] = "- (bsp sends nothing)";
    if (std::isfinite(red)) std::snprintf(rs, sizeof rs, "%.1f%%", 100.0 * red);
    std::snprintf(b, sizeof b, "communication reduction vs bsp: %s; predicted speedup over bsp: %.2fx\n", rs, speedup_vs_bsp());
    o << b;
  }
  if (!choice_note.empty()) o << choice_note << "\n";
  o << "\ncandidates (DP split per schedule and microbatch count, replayed by the simulator):\n";
  head();
  for (const PlanCandidate& c : candidates) row(c.label, c);
  std::snprintf(b, sizeof b, "planned in %.3f s (%lld DP evaluations)\n", plan_seconds, static_cast<long long>(dp_evaluations));
  o << b;
  return o.str();
}

Layout PlanFile::layout() const {
  std::vector<int> first = {0};
  first.insert(first.end(), split.begin(), split.end());
  return Layout::make(first, layers, replicas, placement);
}

PlanFile PlanFile::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(Exit::bad_input, path + ": cannot open plan", true);
  std::stringstream ss;
  ss << in.rdbuf();
  PlanFile f;
  try {
    const nlohmann::json j = nlohmann::json::parse(ss.str());
    if (j.value("format", "") != "pipetrain-plan-1") fail(Exit::bad_input, path + ": not a pipetrain plan (format 'pipetrain-plan-1')", true);
    if (!j.value("ok", false)) fail(Exit::bad_input, path + ": the plan holds no choice: " + j.value("error", ""), true);
    f.schedule = j.at("schedule").get<std::string>();
    f.microbatches = j.at("microbatches").get<int>();
    f.batch_size = j.at("batch_size").get<int64_t>();
    f.layers = j.at("layers").get<int>();
    f.split = j.at("split").get<std::vector<int>>();
    f.replicas = j.at("replicas").get<std::vector<int>>();
    f.placement = recorded_placement(j.value("placement", std::string()), f.schedule, path);
  } catch (const nlohmann::json::exception& e) {
    fail(Exit::bad_input, path + ": malformed plan: " + e.what(), true);
  }
  std::vector<int> first = {0};
  first.insert(first.end(), f.split.begin(), f.split.end());
  if (const std::string why = Layout::problem(first, f.layers, f.replicas, f.placement); !why.empty())
    fail(Exit::bad_input, path + ": the plan's layout (split, replicas, placement " + placement_name(f.placement) + "): " + why, true);
  return f;
}

Profile synthetic_chain(int layers, uint64_t seed) {
  Profile p;
  p.source = "synthetic chain of " + std::to_string(layers) + " layers (seed " + std::to_string(seed) + ")";
  p.device = "synthetic";
  p.microbatch = 32;
  p.input_bytes = 32.0 * 3 * 224 * 224 * 4;
  p.optimizer_s_per_byte = 1e-11;
  uint64_t x = seed * 0x2545F4914F6CDD1DULL + 1;
  for (int i = 0; i < layers; ++i) {
    const double pos = layers > 1 ? static_cast<double>(i) / (layers - 1) : 0.0;
    LayerProfile l;
    l.index = i;
    l.name = "layer" + std::to_string(i);
    l.type = pos < 0.6 ? "conv" : "dense";
    l.forward_s = (0.2 + 1.8 * uniform(x)) * 1e-3;
    l.backward_s = 2.0 * l.forward_s;
    const double act_per_sample = 4e3 + 2e6 * std::pow(1.0 - pos, 3) * (0.5 + uniform(x));
    l.output_bytes = 32.0 * act_per_sample;
    l.stash_bytes = l.output_bytes;
    l.param_bytes = 4e4 + 8e6 * std::pow(pos, 3) * (0.5 + uniform(x));
    l.optimizer_bytes = l.param_bytes;  // momentum
    p.layers.push_back(l);
  }
  return p;
}

}  // namespace pt
