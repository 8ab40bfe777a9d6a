// The simulator: build the schedule IR, replay it with the profile's costs, and read the
// steady state, bubble, memory and traffic off the replay.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/sim.hpp"

namespace pt {
namespace {

bool per_minibatch_units(ScheduleKind k) {
  return k == ScheduleKind::pipedream || k == ScheduleKind::pipedream_vsync || k == ScheduleKind::pipedream_nostash;
}

// Per-stage sums of the profile, at the profile's microbatch.
struct StageSums {
  double fwd = 0, bwd = 0, params = 0, opt_bytes = 0, stash = 0, in = 0, out = 0;
};

StageSums stage_sums(const Profile& p, const Layout& l, int s) {
  StageSums t;
  const int f = l.first_layer(s), e = l.end_layer(s);
  PT_CHECK(e <= static_cast<int>(p.layers.size()), "layout reaches layer " << e - 1 << " but the profile has "
                                                                             << p.layers.size() << " layers");
  for (int i = f; i < e; ++i) {
    const LayerProfile& lp = p.layers[static_cast<size_t>(i)];
    t.fwd += lp.forward_s;
    t.bwd += lp.backward_s;
    t.params += lp.param_bytes;
    t.opt_bytes += lp.optimizer_bytes;
    t.stash += lp.stash_bytes;
  }
  t.in = f == 0 ? p.input_bytes : p.layers[static_cast<size_t>(f - 1)].output_bytes;
  t.out = p.layers[static_cast<size_t>(e - 1)].output_bytes;
  return t;
}

double profile_mb(const Profile& p) { return p.microbatch > 0 ? static_cast<double>(p.microbatch) : 1.0; }

}  // namespace

double unit_samples(const SimConfig& cfg, const Profile& p) {
  const double B = cfg.batch_size > 0 ? static_cast<double>(cfg.batch_size) : profile_mb(p);
  return per_minibatch_units(cfg.kind) ? B : B / std::max(1, cfg.microbatches);
}

CostModel make_cost_model(const Profile& p, const ClusterModel& c, const SimConfig& cfg) {
  const Layout& L = cfg.layout;
  const double scale = unit_samples(cfg, p) / profile_mb(p);
  std::vector<StageSums> st;
  for (int s = 0; s < L.stages(); ++s) st.push_back(stage_sums(p, L, s));
  std::vector<int> stage_of(static_cast<size_t>(L.ranks()));
  for (int r = 0; r < L.ranks(); ++r) stage_of[static_cast<size_t>(r)] = L.stage_of(r);
  CostModel m;
  const double opt_per_byte = p.optimizer_s_per_byte;
  m.compute = [st, stage_of, scale, opt_per_byte](int rank, const Action& a) {
    const StageSums& t = st[static_cast<size_t>(stage_of[static_cast<size_t>(rank)])];
    switch (a.op) {
      case Op::forward: return t.fwd * scale;
      case Op::backward: return t.bwd * scale;
      case Op::optimizer_step: return opt_per_byte * t.params;
      default: return 0.0;
    }
  };
  m.transfer = [st, stage_of, scale, c](int src, int dst, const Action& a) {
    const StageSums& t = st[static_cast<size_t>(stage_of[static_cast<size_t>(src)])];
    const double bytes = (a.op == Op::send_act ? t.out : t.in) * scale;
    return c.p2p_seconds(c.level_of(src, dst), bytes);
  };
  std::vector<double> ar;
  for (int s = 0; s < L.stages(); ++s) {
    const int r = L.replicas[static_cast<size_t>(s)];
    const int first = L.rank_of(s, 0);
    ar.push_back(c.allreduce_seconds(c.level_of(first, first + r - 1), r, st[static_cast<size_t>(s)].params));
  }
  m.allreduce = [ar](int stage) { return ar[static_cast<size_t>(stage)]; };
  return m;
}

MemoryBreakdown worker_memory(const Profile& p, const Schedule& s, int rank, double samples_per_unit) {
  const Layout& L = s.layout;
  const int st = L.stage_of(rank);
  const StageSums t = stage_sums(p, L, st);
  const double scale = samples_per_unit / profile_mb(p);
  MemoryBreakdown m;
  m.in_flight = std::max(1, max_in_flight(s, rank));
  m.versions = max_versions_held(s, rank);
  const double n = m.in_flight;
  m.activations = n * (t.in + t.stash) * scale;
  m.buffers = n * ((st + 1 < L.stages() ? t.out : 0.0) + (st > 0 ? t.in : 0.0)) * scale;
  m.gradients = t.params;
  m.weights = m.versions * t.params;
  m.optimizer = t.opt_bytes;
  return m;
}

SimResult simulate(const Profile& p, const ClusterModel& c, const SimConfig& cfg_in) {
  SimConfig cfg = cfg_in;
  if (per_minibatch_units(cfg.kind)) cfg.microbatches = 1;
  if (cfg.batch_size <= 0) cfg.batch_size = static_cast<int64_t>(profile_mb(p));
  SimResult out;
  out.kind = cfg.kind;
  out.layout = cfg.layout;
  out.microbatches = cfg.microbatches;
  out.batch_size = cfg.batch_size;
  const Layout& L = cfg.layout;
  const int K = L.stages();
  const int M = cfg.microbatches;
  if (L.end_layer(K - 1) != static_cast<int>(p.layers.size())) {
    out.ok = false;
    out.error = "layout covers " + std::to_string(L.end_layer(K - 1)) + " layers but the profile has " +
                std::to_string(p.layers.size());
    return out;
  }
  if (cfg.kind == ScheduleKind::two_bw && M < K) {
    out.ok = false;
    out.error = "2bw needs at least one microbatch per stage (M >= K)";
    return out;
  }
  int64_t lcm = 1;
  for (int r : L.replicas) lcm = std::lcm(lcm, static_cast<int64_t>(r));

  // Warm-up W, window n, drain: flush schedules end every minibatch with a flush, so one
  // warm-up minibatch suffices; asynchronous ones fill the pipeline for D units first.
  // Flush schedules repeat exactly from the second minibatch on (the first may differ when
  // an allreduce of the previous step delays a stage), so the window is minibatch 1.
  // Asynchronous ones need D = the deepest in-flight depth in units to fill and to drain:
  // W = ceil(D / M) minibatches are left out at each end.
  int64_t W = 1, n = 1, S = 2;
  if (is_async(cfg.kind)) {
    int D = 1;
    for (int s = 0; s < K; ++s) D = std::max(D, L.in_flight_depth(s));
    W = std::max(1, (D + M - 1) / M);
    n = per_minibatch_units(cfg.kind) ? std::max<int64_t>(2, lcm) : 2;
    if (per_minibatch_units(cfg.kind)) n = (n + lcm - 1) / lcm * lcm;
    S = 2 * W + n;
    if (per_minibatch_units(cfg.kind)) S = (S + lcm - 1) / lcm * lcm;
  } else if (cfg.minibatches > 0) {
    S = std::max<int64_t>(2, cfg.minibatches);
    n = S - 1;
  }
  if (cfg.minibatches > 0 && is_async(cfg.kind)) {
    S = std::max<int64_t>(cfg.minibatches, 2 * W + 1);
    if (per_minibatch_units(cfg.kind)) S = (S + lcm - 1) / lcm * lcm;
    n = S - 2 * W;
  }
  if (cfg.max_actions > 0) {
    // every unit visits every stage: about 6 actions per unit and stage, plus updates
    auto actions = [&](int64_t steps) { return steps * M * K * 6 + steps * L.ranks() * 2; };
    if (actions(S) > cfg.max_actions) {  // shrink the window (and, async, the drain) first
      if (is_async(cfg.kind)) {
        n = per_minibatch_units(cfg.kind) ? lcm : 1;
        W = std::max<int64_t>(1, W);
        S = 2 * W + n;
        if (per_minibatch_units(cfg.kind)) S = (S + lcm - 1) / lcm * lcm;
      } else {
        n = 1;
        S = 2;
      }
    }
    if (actions(S) > cfg.max_actions) {
      out.ok = false;
      out.error = "too large to replay: about " + std::to_string(actions(S)) + " actions (limit " +
                  std::to_string(cfg.max_actions) + ")";
      return out;
    }
  }
  if (per_minibatch_units(cfg.kind) && lcm > 100000) {
    out.ok = false;
    out.error = "replica counts " + L.replication() + " need a multiple of " + std::to_string(lcm) + " minibatches";
    return out;
  }
  out.minibatches = S;
  out.warmup = W;
  out.window = n;

  Schedule sched = make_schedule(cfg.kind, L, S, M);
  const CostModel cost = make_cost_model(p, c, cfg);
  Replay rp = replay(sched, cost);
  if (!rp.ok) {
    out.ok = false;
    out.error = rp.error;
    return out;
  }
  out.makespan = rp.makespan;
  const double su = unit_samples(cfg, p);
  const int64_t units_per_mb = M;

  // completion of minibatch g: the end of its last BACKWARD on any worker
  std::vector<double> done(static_cast<size_t>(S), 0.0);
  const int R = L.ranks();
  for (int w = 0; w < R; ++w)
    for (const ReplayEvent& e : rp.events[static_cast<size_t>(w)]) {
      const Action& a = sched.workers[static_cast<size_t>(w)][static_cast<size_t>(e.index)];
      if (a.op != Op::backward) continue;
      const int64_t g = a.mb / units_per_mb;
      done[static_cast<size_t>(g)] = std::max(done[static_cast<size_t>(g)], e.end);
    }
  for (int64_t g = 1; g < S; ++g) done[static_cast<size_t>(g)] = std::max(done[static_cast<size_t>(g)], done[static_cast<size_t>(g - 1)]);
  out.window_start = done[static_cast<size_t>(W - 1)];
  out.window_end = done[static_cast<size_t>(W + n - 1)];
  const double len = out.window_end - out.window_start;
  out.time_per_minibatch = len / static_cast<double>(n);
  out.time_per_sample = out.time_per_minibatch / static_cast<double>(cfg.batch_size);
  out.samples_per_s = out.time_per_sample > 0 ? 1.0 / out.time_per_sample : 0.0;

  // bubble, traffic, memory
  double bubble_sum = 0, p2p = 0, ar_payload = 0, ar_wire = 0;
  std::vector<double> stage_params(static_cast<size_t>(K));
  std::vector<StageSums> sums;
  for (int s = 0; s < K; ++s) sums.push_back(stage_sums(p, L, s));
  out.stages.resize(static_cast<size_t>(K));
  const double scale = su / profile_mb(p);
  for (int s = 0; s < K; ++s) {
    const StageSums& t = sums[static_cast<size_t>(s)];
    StagePrediction& sp = out.stages[static_cast<size_t>(s)];
    sp.first = L.first_layer(s);
    sp.last = L.end_layer(s) - 1;
    sp.replicas = L.replicas[static_cast<size_t>(s)];
    sp.samples_per_unit = su;
    sp.forward_s = t.fwd * scale;
    sp.backward_s = t.bwd * scale;
    sp.optimizer_s = p.optimizer_s_per_byte * t.params;
    sp.allreduce_s = cost.allreduce(s);
    stage_params[static_cast<size_t>(s)] = t.params;
  }
  out.memory.resize(static_cast<size_t>(R));
  for (int w = 0; w < R; ++w) {
    const int s = L.stage_of(w);
    const int r = L.replicas[static_cast<size_t>(s)];
    double busy = 0;
    for (const ReplayEvent& e : rp.events[static_cast<size_t>(w)]) {
      const Action& a = sched.workers[static_cast<size_t>(w)][static_cast<size_t>(e.index)];
      if (a.op == Op::forward || a.op == Op::backward || a.op == Op::optimizer_step)
        busy += std::max(0.0, std::min(e.end, out.window_end) - std::max(e.start, out.window_start));
      if (a.op == Op::send_act || a.op == Op::send_grad)
        p2p += (a.op == Op::send_act ? sums[static_cast<size_t>(s)].out : sums[static_cast<size_t>(s)].in) * scale;
      if (a.op == Op::allreduce) {
        ar_payload += stage_params[static_cast<size_t>(s)];
        ar_wire += 2.0 * (r - 1) / r * stage_params[static_cast<size_t>(s)];
      }
    }
    const double frac = len > 0 ? busy / len : 1.0;
    bubble_sum += 1.0 - frac;
    out.stages[static_cast<size_t>(s)].busy_fraction += frac / r;
    MemoryBreakdown mem = worker_memory(p, sched, w, su);
    out.memory[static_cast<size_t>(w)] = mem;
    out.max_memory = std::max(out.max_memory, mem.total());
    if (mem.total() >= out.stages[static_cast<size_t>(s)].memory.total()) out.stages[static_cast<size_t>(s)].memory = mem;
  }
  out.bubble = std::max(0.0, bubble_sum / R);
  const double samples = static_cast<double>(S) * static_cast<double>(cfg.batch_size);
  out.bytes_p2p_per_sample = p2p / samples;
  out.bytes_allreduce_per_sample = ar_payload / samples;
  out.network_bytes_per_sample = (p2p + ar_wire) / samples;
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
      ev.push_back({static_cast<int>(w), e.start, e.end, a.op, a.mb, 0});
    }
  return chrome_trace_json(ev, r.layout, title);
}

namespace {

std::string bytes_str(double b) {
  char s[32];
  if (b >= 1e9) std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof s, "%.2f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(s, sizeof s, "%.1f kB", b / 1e3);
  else std::snprintf(s, sizeof s, "%.0f B", b);
  return s;
}

}  // namespace

std::string sim_report(const SimResult& r) {
  std::ostringstream o;
  char b[256];
  if (!r.ok) return "simulation failed: " + r.error + "\n";
  o << schedule_name(r.kind) << ", " << r.layout.str() << ", " << r.microbatches
    << (r.microbatches == 1 ? " microbatch" : " microbatches") << " per minibatch of " << r.batch_size << "\n";
  std::snprintf(b, sizeof b,
                "replayed %lld minibatches; steady-state window: minibatches %lld..%lld (%.6g s .. %.6g s)\n",
                static_cast<long long>(r.minibatches), static_cast<long long>(r.warmup),
                static_cast<long long>(r.warmup + r.window - 1), r.window_start, r.window_end);
  o << b;
  std::snprintf(b, sizeof b, "predicted time per minibatch %.6g ms, per sample %.6g ms (%.1f samples/s), bubble %.3f\n",
                r.time_per_minibatch * 1e3, r.time_per_sample * 1e3, r.samples_per_s, r.bubble);
  o << b;
  o << "bytes per sample: p2p " << bytes_str(r.bytes_p2p_per_sample) << ", allreduce payload "
    << bytes_str(r.bytes_allreduce_per_sample) << ", on the network (ring) " << bytes_str(r.network_bytes_per_sample)
    << "\n";
  std::snprintf(b, sizeof b, "%-6s %-9s %-4s %12s %12s %12s %7s %9s %9s %12s\n", "stage", "layers", "reps", "fwd ms/unit",
                "bwd ms/unit", "allreduce ms", "busy", "in-flight", "versions", "memory");
  o << b;
  for (size_t s = 0; s < r.stages.size(); ++s) {
    const StagePrediction& sp = r.stages[s];
    std::snprintf(b, sizeof b, "%-6zu %-9s %-4d %12.4f %12.4f %12.4f %7.3f %9d %9d %12s\n", s,
                  (std::to_string(sp.first) + "-" + std::to_string(sp.last)).c_str(), sp.replicas, sp.forward_s * 1e3,
                  sp.backward_s * 1e3, sp.allreduce_s * 1e3, sp.busy_fraction, sp.memory.in_flight, sp.memory.versions,
                  bytes_str(sp.memory.total()).c_str());
    o << b;
  }
  o << "peak memory per worker: " << bytes_str(r.max_memory) << "\n";
  return o.str();
}

}  // namespace pt
