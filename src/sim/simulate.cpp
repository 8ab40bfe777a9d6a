// The simulator: build the schedule IR, replay it with the profile's costs, and read the
// steady state, bubble, memory and traffic off the replay.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <memory>
#include <set>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/sim.hpp"

namespace pt {
namespace {

// Per-stage sums of the profile's costs, at the profile's microbatch. bwd_w is the
// weight-gradient part of the backward (W; I = bwd - bwd_w); bwd_sel the backward under
// selective recomputation. (Memory: the memory model.)
struct StageSums {
  double fwd = 0, bwd = 0, bwd_w = 0, params = 0, in = 0, out = 0, bwd_sel = 0;
  // the backward (B; I: without W) with its recomputation: full reruns the stage's forward
  // (unless `reuse`: the unit's F computed in the buffer just before), selective measured its
  // layers' backward with their recomputation
  double backward(Recompute r, bool input_half, bool reuse = false) const {
    const double b = r == Recompute::selective ? bwd_sel : bwd + (r == Recompute::full && !reuse ? fwd : 0.0);
    return input_half ? b - bwd_w : b;
  }
};

// The W share of a layer's backward: measured, or half of it for a parametrised layer of a
// profile without the split (graph.txt).
double weight_backward_s(const LayerProfile& lp) {
  if (lp.backward_weight_s > 0 || lp.param_bytes <= 0) return lp.backward_weight_s;
  return 0.5 * lp.backward_s;
}

StageSums stage_sums(const Profile& p, const Layout& l, int s) {
  StageSums t;
  const int f = l.first_layer(s), e = l.end_layer(s);
  PT_CHECK(e <= static_cast<int>(p.layers.size()), "layout reaches layer " << e - 1 << " but the profile has "
                                                                             << p.layers.size() << " layers");
  for (int i = f; i < e; ++i) {
    const LayerProfile& lp = p.layers[static_cast<size_t>(i)];
    t.fwd += lp.forward_s;
    t.bwd += lp.backward_s;
    t.bwd_w += weight_backward_s(lp);
    t.params += lp.param_bytes;
    t.bwd_sel += lp.selective_backward();
  }
  t.in = f == 0 ? p.input_bytes : p.layers[static_cast<size_t>(f - 1)].output_bytes;
  t.out = p.layers[static_cast<size_t>(e - 1)].output_bytes;
  return t;
}

double profile_mb(const Profile& p) { return p.microbatch > 0 ? static_cast<double>(p.microbatch) : 1.0; }

std::vector<StageSums> all_sums(const Profile& p, const Layout& l) {
  std::vector<StageSums> st;
  for (int s = 0; s < l.stages(); ++s) st.push_back(stage_sums(p, l, s));
  return st;
}

}  // namespace

double unit_samples(const SimConfig& cfg, const Profile& p) {
  const double B = cfg.batch_size > 0 ? static_cast<double>(cfg.batch_size) : profile_mb(p);
  return B / cfg.def->units_per_minibatch(cfg.microbatches);
}

namespace {

// Per rank, the (stage, unit) of every B or I that finds its F's layout in its recompute
// buffer (backward_reuses_forward: the runtime's rule) and recomputes nothing.
using Reuses = std::vector<std::set<std::pair<int, int32_t>>>;
Reuses forward_reuses(const Schedule& ir) {
  Reuses out(ir.workers.size());
  for (size_t w = 0; w < ir.workers.size(); ++w) {
    const std::vector<bool> reuse = backward_reuses_forward(ir, static_cast<int>(w));
    for (size_t i = 0; i < reuse.size(); ++i)
      if (reuse[i]) out[w].insert({ir.workers[w][i].stage, ir.workers[w][i].mb});
  }
  return out;
}

// Per stage: the seconds of its split layers' tensor sums in one forward of a unit (as many
// in its backward): each an allreduce among cfg.tensor ranks at the innermost level of the
// bytes it sums (scaled from the profile's microbatch to the unit).
std::vector<double> tensor_sum_seconds(const Profile& p, const ClusterModel& c, const SimConfig& cfg, double scale) {
  std::vector<double> out(static_cast<size_t>(cfg.layout.stages()), 0.0);
  if (cfg.tensor <= 1) return out;
  for (int s = 0; s < cfg.layout.stages(); ++s)
    for (int i = cfg.layout.first_layer(s); i < cfg.layout.end_layer(s); ++i) {
      const LayerProfile& lp = p.layers[static_cast<size_t>(i)];
      if (lp.tensor_sums > 0)
        out[static_cast<size_t>(s)] += lp.tensor_sums * c.allreduce_seconds(0, cfg.tensor, lp.tensor_sum_bytes * scale / lp.tensor_sums);
    }
  return out;
}

}  // namespace

CostModel make_cost_model(const Profile& p, const ClusterModel& c, const SimConfig& cfg, const Schedule* ir) {
  const Layout& L = cfg.layout;
  const double scale = unit_samples(cfg, p) / profile_mb(p);
  const std::vector<StageSums> st = all_sums(p, L);
  CostModel m;
  const double opt_per_byte = p.optimizer_s_per_byte;
  std::vector<Recompute> rec;
  for (int s = 0; s < L.stages(); ++s) rec.push_back(cfg.recompute_of(s));
  const auto reuses = std::make_shared<const Reuses>(ir ? forward_reuses(*ir) : Reuses());
  const std::vector<double> ts = tensor_sum_seconds(p, c, cfg, scale);
  m.compute = [st, scale, opt_per_byte, rec, reuses, ts](int w, const Action& a) {
    const StageSums& t = st[static_cast<size_t>(a.stage)];
    const Recompute r = rec[static_cast<size_t>(a.stage)];
    const bool reuse = static_cast<size_t>(w) < reuses->size() && (*reuses)[static_cast<size_t>(w)].count({a.stage, a.mb});
    const double sums = ts[static_cast<size_t>(a.stage)], resums = r == Recompute::full && !reuse ? sums : 0.0;
    switch (a.op) {
      case Op::forward: return t.fwd * scale + sums;
      case Op::backward: return t.backward(r, false, reuse) * scale + sums + resums;
      case Op::backward_input: return t.backward(r, true, reuse) * scale + sums + resums;
      case Op::backward_weight: return t.bwd_w * scale;
      case Op::optimizer_step: return opt_per_byte * t.params;
      default: return 0.0;
    }
  };
  const int tp = cfg.tensor;
  m.transfer = [st, scale, c, tp](int src, int dst, const Action& a) {
    const StageSums& t = st[static_cast<size_t>(a.stage)];
    const double bytes = (a.op == Op::send_act ? t.out : t.in) * scale;
    // under parallel.tensor each tensor rank sends its 1/t part and the receivers all-gather
    // (half a ring allreduce's traffic)
    const double gather = tp > 1 ? 0.5 * c.allreduce_seconds(0, tp, bytes) : 0.0;
    return c.p2p_seconds(c.level_of(std::min(src, dst), std::max(src, dst)), bytes / tp) + gather;
  };
  std::vector<double> ar;
  for (int s = 0; s < L.stages(); ++s) {
    const int r = L.replicas_of(s), first = L.rank_of(s, 0);
    ar.push_back(c.allreduce_seconds(c.level_of(first, first + r - 1), r, st[static_cast<size_t>(s)].params));
  }
  m.allreduce = [ar](int stage) { return ar[static_cast<size_t>(stage)]; };
  return m;
}

namespace {

// Minibatches to replay: warm-up W, window n, total S (with the drain), whole multiples of
// the entry's boundary stride (every stage's update group complete). Flush schedules
// repeat exactly from the second minibatch on (the first may differ when an allreduce of
// the previous step delays a stage), so the window is minibatch 1. Asynchronous ones need
// D = the deepest in-flight depth in units to fill and to drain: W = ceil(D / M)
// minibatches are left out at each end. Returns "" or why the replay is impossible.
std::string replay_window(const SimConfig& cfg, int64_t* W, int64_t* n, int64_t* S) {
  const Layout& L = cfg.layout;
  const int M = cfg.microbatches, K = L.stages();
  const bool async = !cfg.def->flush;
  const int64_t lcm = cfg.def->boundary_stride(L);
  auto round_up = [&](int64_t x) { return (x + lcm - 1) / lcm * lcm; };
  *W = 1, *n = 1, *S = 2;
  if (async) {
    int D = 1;
    for (int s = 0; s < K; ++s) D = std::max(D, L.in_flight_depth(s));
    *W = std::max(1, (D + M - 1) / M);
    *n = round_up(std::max<int64_t>(2, lcm));
    *S = round_up(2 * *W + *n);
  } else if (cfg.minibatches > 0) {
    *S = std::max<int64_t>(2, cfg.minibatches);
    *n = *S - 1;
  }
  if (cfg.minibatches > 0 && async) {
    *S = round_up(std::max<int64_t>(cfg.minibatches, 2 * *W + 1));
    *n = *S - 2 * *W;
  }
  if (cfg.max_actions > 0) {
    // every unit visits every stage: about 6 actions per unit and stage, plus updates
    auto actions = [&](int64_t steps) { return steps * M * K * 6 + steps * L.ranks() * 2; };
    if (actions(*S) > cfg.max_actions) {  // shrink the window (and, async, the drain) first
      *n = async ? lcm : 1;
      *S = async ? round_up(2 * *W + *n) : 2;
    }
    if (actions(*S) > cfg.max_actions)
      return "too large to replay: about " + std::to_string(actions(*S)) + " actions (limit " + std::to_string(cfg.max_actions) + ")";
  }
  if (lcm > 100000) return "replica counts " + L.replication() + " need a multiple of " + std::to_string(lcm) + " minibatches";
  return "";
}

// The window: from the completion of minibatch W-1 to that of W+n-1 (a minibatch completes
// with its last B or W on any worker).
void measure_window(const Schedule& sched, const Replay& rp, SimResult& out) {
  std::vector<double> done(static_cast<size_t>(out.minibatches), 0.0);
  for (size_t w = 0; w < rp.events.size(); ++w)
    for (const ReplayEvent& e : rp.events[w]) {
      const Action& a = sched.workers[w][static_cast<size_t>(e.index)];
      if (a.op != Op::backward && a.op != Op::backward_weight) continue;
      const int64_t g = a.mb / sched.microbatches;
      done[static_cast<size_t>(g)] = std::max(done[static_cast<size_t>(g)], e.end);
    }
  for (size_t g = 1; g < done.size(); ++g) done[g] = std::max(done[g], done[g - 1]);
  out.window_start = done[static_cast<size_t>(out.warmup - 1)];
  out.window_end = done[static_cast<size_t>(out.warmup + out.window - 1)];
  out.time_per_minibatch = (out.window_end - out.window_start) / static_cast<double>(out.window);
  out.time_per_sample = out.time_per_minibatch / static_cast<double>(out.batch_size);
  out.samples_per_s = out.time_per_sample > 0 ? 1.0 / out.time_per_sample : 0.0;
}

void stage_predictions(const Profile& p, const SimConfig& cfg, const CostModel& cost, SimResult& out) {
  const Layout& L = cfg.layout;
  const double su = unit_samples(cfg, p), scale = su / profile_mb(p);
  out.stages.resize(static_cast<size_t>(L.stages()));
  for (int s = 0; s < L.stages(); ++s) {
    const StageSums t = stage_sums(p, L, s);
    StagePrediction& sp = out.stages[static_cast<size_t>(s)];
    sp.first = L.first_layer(s);
    sp.last = L.end_layer(s) - 1;
    sp.replicas = L.replicas_of(s);
    sp.samples_per_unit = su;
    sp.forward_s = t.fwd * scale;
    sp.backward_s = t.backward(cfg.recompute_of(s), false) * scale;
    sp.optimizer_s = p.optimizer_s_per_byte * t.params;
    sp.allreduce_s = cost.allreduce(s);
  }
}

// Bubble, traffic and memory per worker from the replay.
void worker_measures(const Profile& p, const SimConfig& cfg, const Schedule& sched, const Replay& rp, SimResult& out) {
  const Layout& L = cfg.layout;
  const double su = unit_samples(cfg, p), scale = su / profile_mb(p), len = out.window_end - out.window_start;
  const std::vector<StageSums> sums = all_sums(p, L);
  double bubble_sum = 0, p2p = 0, ar_payload = 0, ar_wire = 0;
  // the memory model (memory_model.hpp) with this replay's IR: units in flight and versions
  const MemoryModel mm(cfg.memory ? cfg.memory : profile_footprints(p), L, sched,
                       static_cast<int64_t>(std::llround(su)), cfg.memory_shared, cfg.recompute);
  out.memory.resize(static_cast<size_t>(L.ranks()));
  for (int w = 0; w < L.ranks(); ++w) {
    double busy = 0;
    for (const ReplayEvent& e : rp.events[static_cast<size_t>(w)]) {
      const Action& a = sched.workers[static_cast<size_t>(w)][static_cast<size_t>(e.index)];
      const StageSums& t = sums[static_cast<size_t>(a.stage)];
      const int r = L.replicas_of(a.stage);
      if (is_compute(a.op) || a.op == Op::optimizer_step)
        busy += std::max(0.0, std::min(e.end, out.window_end) - std::max(e.start, out.window_start));
      if ((a.op == Op::send_act || a.op == Op::send_grad) && a.peer != w) p2p += (a.op == Op::send_act ? t.out : t.in) * scale;
      if (a.op == Op::allreduce) ar_payload += t.params, ar_wire += 2.0 * (r - 1) / r * t.params;
    }
    const double frac = len > 0 ? busy / len : 1.0;
    bubble_sum += 1.0 - frac;
    const RankMemory mem = mm.rank(w);
    out.memory[static_cast<size_t>(w)] = mem;
    out.max_memory = std::max(out.max_memory, static_cast<double>(mem.total()));
    for (int s : L.stages_of_rank(w)) {
      StagePrediction& sp = out.stages[static_cast<size_t>(s)];
      sp.busy_fraction += frac / L.replicas_of(s);
      if (mem.total() >= sp.memory.total()) sp.memory = mem;
    }
  }
  out.bubble = std::max(0.0, bubble_sum / L.ranks());
  const double samples = static_cast<double>(out.minibatches) * static_cast<double>(cfg.batch_size);
  out.bytes_p2p_per_sample = p2p / samples;
  out.bytes_allreduce_per_sample = ar_payload / samples;
  out.network_bytes_per_sample = (p2p + ar_wire) / samples;
}

}  // namespace

SimResult simulate(const Profile& p, const ClusterModel& c, const SimConfig& cfg_in) {
  SimConfig cfg = cfg_in;
  cfg.microbatches = cfg.def->units_per_minibatch(cfg.microbatches);
  if (cfg.batch_size <= 0) cfg.batch_size = static_cast<int64_t>(profile_mb(p));
  SimResult out;
  out.def = cfg.def;
  out.layout = cfg.layout;
  out.microbatches = cfg.microbatches;
  out.batch_size = cfg.batch_size;
  const Layout& L = cfg.layout;
  auto fail_with = [&](const std::string& e) { out.ok = false, out.error = e; return out; };
  if (L.end_layer(L.stages() - 1) != static_cast<int>(p.layers.size()))
    return fail_with("layout covers " + std::to_string(L.end_layer(L.stages() - 1)) + " layers but the profile has " +
                     std::to_string(p.layers.size()));
  if (std::string why = cfg.def->problem(L, cfg.microbatches); !why.empty()) return fail_with(why);
  int64_t W, n, S;
  if (std::string why = replay_window(cfg, &W, &n, &S); !why.empty()) return fail_with(why);
  out.minibatches = S;
  out.warmup = W;
  out.window = n;
  Schedule sched = make_schedule(*cfg.def, L, S, cfg.microbatches);
  const CostModel cost = make_cost_model(p, c, cfg, &sched);
  Replay rp = replay(sched, cost);
  if (!rp.ok) return fail_with(rp.error);
  out.makespan = rp.makespan;
  measure_window(sched, rp, out);
  stage_predictions(p, cfg, cost, out);
  worker_measures(p, cfg, sched, rp, out);
  if (cfg.keep_schedule) {
    out.schedule = std::move(sched);
    out.replay = std::move(rp);
  }
  return out;
}

std::string sim_trace_json(const SimResult& r, const std::string& title) {
  std::vector<TraceEvent> ev;
  for (size_t w = 0; w < r.replay.events.size(); ++w)
    for (const ReplayEvent& e : r.replay.events[w]) {
      const Action& a = r.schedule.workers[w][static_cast<size_t>(e.index)];
      ev.push_back({static_cast<int>(w), e.start, e.end, a.op, a.mb, 0, a.stage});
    }
  return chrome_trace_json(ev, r.layout, title);
}

std::string sim_report(const SimResult& r) {
  std::ostringstream o;
  char b[256];
  if (!r.ok) return "simulation failed: " + r.error + "\n";
  o << r.def->name << ", " << r.layout.str() << ", " << r.microbatches
    << (r.microbatches == 1 ? " microbatch" : " microbatches") << " per minibatch of " << r.batch_size << "\n";
  std::snprintf(b, sizeof b,
                "replayed %lld minibatches; steady-state window: minibatches %lld..%lld (%.6g s .. %.6g s)\n",
                static_cast<long long>(r.minibatches), static_cast<long long>(r.warmup),
                static_cast<long long>(r.warmup + r.window - 1), r.window_start, r.window_end);
  o << b;
  std::snprintf(b, sizeof b, "predicted time per minibatch %.6g ms, per sample %.6g ms (%.1f samples/s), bubble %.3f\n",
                r.time_per_minibatch * 1e3, r.time_per_sample * 1e3, r.samples_per_s, r.bubble);
  o << b;
  o << "bytes per sample: p2p " << bytes_text(r.bytes_p2p_per_sample) << ", allreduce payload "
    << bytes_text(r.bytes_allreduce_per_sample) << ", on the network (ring) " << bytes_text(r.network_bytes_per_sample)
    << "\n";
  std::snprintf(b, sizeof b, "%-6s %-9s %-4s %12s %12s %12s %7s %9s %9s %12s\n", "stage", "layers", "reps", "fwd ms/unit",
                "bwd ms/unit", "allreduce ms", "busy", "in-flight", "versions", "memory");
  o << b;
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const StagePrediction& sp = r.stages[s];
    std::snprintf(b, sizeof b, "%-6zu %-9s %-4d %12.4f %12.4f %12.4f %7.3f %9d %9d %12s\n", s,
                  (std::to_string(sp.first) + "-" + std::to_string(sp.last)).c_str(), sp.replicas, sp.forward_s * 1e3,
                  sp.backward_s * 1e3, sp.allreduce_s * 1e3, sp.busy_fraction, sp.memory.in_flight, sp.memory.versions,
                  bytes_text(sp.memory.total()).c_str());
    o << b;
  }
  o << "peak memory per worker (memory model): " << bytes_text(r.max_memory) << "\n";
  return o.str();
}

}  // namespace pt
