// simulate --compare: read a measured run (summary.json with its layout and placement,
// trace.json) and set the simulator's prediction beside it, per stage.
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/sim.hpp"

namespace pt {
namespace {

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(Exit::bad_input, path + ": cannot open (is it a run directory written by pipetrain train?)", true);
  std::stringstream ss;
  ss << in.rdbuf();
  try {
    return nlohmann::json::parse(ss.str());
  } catch (const std::exception& e) {
    fail(Exit::bad_input, path + ": not valid JSON: " + e.what(), true);
  }
}

double pct(double pred, double meas) { return meas != 0 ? 100.0 * (pred - meas) / meas : NAN; }

// "12.3%", or "-" when there is nothing to compare with
std::string pcts(double pred, double meas) {
  const double v = pct(pred, meas);
  if (!std::isfinite(v)) return "-";
  char b[32];
  std::snprintf(b, sizeof b, "%.1f%%", v);
  return b;
}

// A compute slice of trace.json: "F3", "B3", "I3", "W3", or with the stage in front ("0F3")
// when a rank holds several stages. Its stage: the rank's one stage, else (looped, V) the
// event's args.stage, else the name's prefix.
bool compute_slice(const nlohmann::json& e, const Layout& layout, int* stage, char* op) {
  const std::string name = e.value("name", "");
  size_t k = 0;
  while (k < name.size() && std::isdigit(static_cast<unsigned char>(name[k]))) ++k;
  if (k + 1 >= name.size() || std::string("FBIW").find(name[k]) == std::string::npos ||
      !std::isdigit(static_cast<unsigned char>(name[k + 1])))
    return false;
  *op = name[k];
  const int rank = e.value("tid", -1);
  if (rank < 0 || rank >= layout.ranks()) return false;
  if (layout.stages_of_rank(rank).size() == 1) *stage = layout.stage_of(rank);
  else if (e.contains("args") && e["args"].contains("stage")) *stage = e["args"]["stage"].get<int>();
  else if (k > 0) *stage = std::stoi(name.substr(0, k));
  else return false;
  return *stage >= 0 && *stage < layout.stages();
}

}  // namespace

Layout MeasuredRun::layout(int layers) const {
  std::vector<int> first = {0};
  first.insert(first.end(), split.begin(), split.end());
  return Layout::make(first, layers, replicas, placement);
}

MeasuredRun MeasuredRun::load(const std::string& dir) {
  MeasuredRun m;
  const nlohmann::json s = read_json(dir + "/summary.json");
  try {
    m.schedule = s.at("schedule").get<std::string>();
    m.split = s.at("split").get<std::vector<int>>();
    m.replicas = s.at("replicas").get<std::vector<int>>();
    m.placement = recorded_placement(s.value("placement", std::string()), m.schedule, dir + "/summary.json");
    m.microbatches = s.value("microbatches", 1);
    m.ranks = s.value("ranks", 1);
    m.tensor = s.value("tensor_parallel", 1);
    m.batch_size = s.at("batch_size").get<int64_t>();
    m.steps = s.at("steps").get<int64_t>();
    m.train_wall_s = s.at("train_wall_s").get<double>();
    m.bubble = s.value("bubble_fraction", 0.0);
    m.bytes_p2p_per_sample = s.value("bytes_p2p_per_sample", 0.0);
    m.bytes_allreduce_per_sample = s.value("bytes_allreduce_per_sample", 0.0);
    for (const std::string& r : s.value("recompute", std::vector<std::string>{})) {  // absent before recomputation
      const std::optional<Recompute> e = enum_from_name<Recompute>(r);
      if (!e) fail(Exit::bad_input, dir + "/summary.json: recompute '" + r + "' is not none, selective or full", true);
      m.recompute.push_back(*e);
    }
  } catch (const nlohmann::json::exception& e) {
    fail(Exit::bad_input, dir + "/summary.json: missing field: " + e.what(), true);
  }
  std::vector<int> first = {0};
  first.insert(first.end(), m.split.begin(), m.split.end());
  if (const std::string why = Layout::problem(first, 1 << 30, m.replicas, m.placement); !why.empty())
    fail(Exit::bad_input, dir + "/summary.json: the run's layout (split, replicas, placement " + placement_name(m.placement) +
                              "): " + why, true);
  const Layout layout = m.layout(1 << 30);  // any layer count past the split
  const size_t K = static_cast<size_t>(layout.stages());
  std::vector<double> fsum(K, 0), bsum(K, 0);
  std::vector<int64_t> fn(K, 0), bn(K, 0);
  const nlohmann::json t = read_json(dir + "/trace.json");
  for (const auto& e : t.value("traceEvents", nlohmann::json::array())) {
    int stage = -1;
    char op = 0;
    if (e.value("ph", "") != "X" || !compute_slice(e, layout, &stage, &op)) continue;
    const size_t st = static_cast<size_t>(stage);
    const double dur = e.value("dur", 0.0) * 1e-6;
    if (op == 'F') fsum[st] += dur, ++fn[st];
    else bsum[st] += dur, bn[st] += op == 'W' ? 0 : 1;  // a unit's backward: B, or I + W
  }
  for (size_t st = 0; st < K; ++st) {
    m.forward_s.push_back(fn[st] ? fsum[st] / static_cast<double>(fn[st]) : NAN);
    m.backward_s.push_back(bn[st] ? bsum[st] / static_cast<double>(bn[st]) : NAN);
    m.units.push_back(fn[st]);
  }
  return m;
}

std::string compare_report(const SimResult& p, const MeasuredRun& m) {
  std::ostringstream o;
  char b[256];
  const double meas_mb = m.steps > 0 ? m.train_wall_s / static_cast<double>(m.steps) : NAN;
  o << "predicted vs measured (" << m.schedule << ", replicas " << p.layout.replication() << ", " << m.microbatches
    << " microbatches, batch " << m.batch_size << ", " << m.steps << " steps measured)\n";
  std::snprintf(b, sizeof b, "%-34s %14s %14s %9s\n", "", "predicted", "measured", "error");
  o << b;
  std::snprintf(b, sizeof b, "%-34s %14.4f %14.4f %9s\n", "time per minibatch (ms)", p.time_per_minibatch * 1e3,
                meas_mb * 1e3, pcts(p.time_per_minibatch, meas_mb).c_str());
  o << b;
  std::snprintf(b, sizeof b, "%-34s %14.1f %14.1f %9s\n", "samples/s", p.samples_per_s,
                meas_mb > 0 ? static_cast<double>(m.batch_size) / meas_mb : NAN,
                pcts(p.samples_per_s, static_cast<double>(m.batch_size) / meas_mb).c_str());
  o << b;
  std::snprintf(b, sizeof b, "%-34s %14.3f %14.3f\n", "bubble fraction", p.bubble, m.bubble);
  o << b;
  std::snprintf(b, sizeof b, "%-34s %14.0f %14.0f %9s\n", "p2p bytes per sample", p.bytes_p2p_per_sample,
                m.bytes_p2p_per_sample, pcts(p.bytes_p2p_per_sample, m.bytes_p2p_per_sample).c_str());
  o << b;
  std::snprintf(b, sizeof b, "%-34s %14.0f %14.0f %9s\n", "allreduce bytes per sample", p.bytes_allreduce_per_sample,
                m.bytes_allreduce_per_sample, pcts(p.bytes_allreduce_per_sample, m.bytes_allreduce_per_sample).c_str());
  o << b;
  o << "\nper stage (compute per unit of " << p.stages.front().samples_per_unit << " samples):\n";
  std::snprintf(b, sizeof b, "%-6s %-9s %12s %12s %8s %12s %12s %8s %12s\n", "stage", "layers", "fwd ms pred", "fwd ms meas",
                "error", "bwd ms pred", "bwd ms meas", "error", "F+B error");
  o << b;
  for (size_t s = 0; s < p.stages.size() && s < m.forward_s.size(); ++s) {
    const StagePrediction& sp = p.stages[s];
    const double fb_p = sp.forward_s + sp.backward_s, fb_m = m.forward_s[s] + m.backward_s[s];
    std::snprintf(b, sizeof b, "%-6zu %-9s %12.4f %12.4f %8s %12.4f %12.4f %8s %12s\n", s,
                  (std::to_string(sp.first) + "-" + std::to_string(sp.last)).c_str(), sp.forward_s * 1e3,
                  m.forward_s[s] * 1e3, pcts(sp.forward_s, m.forward_s[s]).c_str(), sp.backward_s * 1e3, m.backward_s[s] * 1e3,
                  pcts(sp.backward_s, m.backward_s[s]).c_str(), pcts(fb_p, fb_m).c_str());
    o << b;
  }
  return o.str();
}

}  // namespace pt
