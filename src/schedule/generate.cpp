// Schedule generators. One rule builds every kind: a worker forwards its next unit while
// fewer than `depth` are in flight (and, for flush kinds, only within the current update
// group), otherwise backwards its oldest; after the last backward of an update group it
// reduces gradients among its replicas and steps the optimizer. The kinds differ only in
// depth, the flush barrier, and which weight version each compute action reads.
#include <algorithm>
#include <climits>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule.hpp"

namespace pt {

const char* op_name(Op op) {
  switch (op) {
    case Op::forward: return "FORWARD";
    case Op::backward: return "BACKWARD";
    case Op::send_act: return "SEND_ACT";
    case Op::recv_act: return "RECV_ACT";
    case Op::send_grad: return "SEND_GRAD";
    case Op::recv_grad: return "RECV_GRAD";
    case Op::allreduce: return "ALLREDUCE";
    case Op::optimizer_step: return "OPTIMIZER_STEP";
  }
  return "?";
}

bool is_compute(Op op) { return op == Op::forward || op == Op::backward; }

ScheduleKind schedule_kind(const std::string& n) {
  if (n == "gpipe") return ScheduleKind::gpipe;
  if (n == "1f1b") return ScheduleKind::one_f_one_b;
  if (n == "model-parallel") return ScheduleKind::model_parallel;
  if (n == "bsp") return ScheduleKind::bsp;
  if (n == "pipedream") return ScheduleKind::pipedream;
  if (n == "pipedream-vsync") return ScheduleKind::pipedream_vsync;
  if (n == "pipedream-nostash") return ScheduleKind::pipedream_nostash;
  if (n == "2bw") return ScheduleKind::two_bw;
  fail(Exit::bad_input, "unknown schedule '" + n + "'; known: gpipe, 1f1b, model-parallel, bsp, pipedream, pipedream-vsync, pipedream-nostash, 2bw");
}

const char* schedule_name(ScheduleKind k) {
  switch (k) {
    case ScheduleKind::gpipe: return "gpipe";
    case ScheduleKind::one_f_one_b: return "1f1b";
    case ScheduleKind::model_parallel: return "model-parallel";
    case ScheduleKind::bsp: return "bsp";
    case ScheduleKind::pipedream: return "pipedream";
    case ScheduleKind::pipedream_vsync: return "pipedream-vsync";
    case ScheduleKind::pipedream_nostash: return "pipedream-nostash";
    case ScheduleKind::two_bw: return "2bw";
    case ScheduleKind::eval: return "eval";
  }
  return "?";
}

bool is_flush(ScheduleKind k) {
  return k == ScheduleKind::gpipe || k == ScheduleKind::one_f_one_b || k == ScheduleKind::model_parallel ||
         k == ScheduleKind::bsp;
}
bool is_async(ScheduleKind k) { return !is_flush(k) && k != ScheduleKind::eval; }

static bool per_minibatch_units(ScheduleKind k) {
  return k == ScheduleKind::pipedream || k == ScheduleKind::pipedream_vsync || k == ScheduleKind::pipedream_nostash;
}

int64_t Schedule::group_of(int stage, int64_t mb) const {
  if (per_minibatch_units(kind)) return mb / layout.replicas[static_cast<size_t>(stage)];
  return mb / microbatches;
}

int64_t Schedule::groups(int stage) const {
  if (kind == ScheduleKind::eval) return 0;
  if (per_minibatch_units(kind)) return units() / layout.replicas[static_cast<size_t>(stage)];
  return steps;
}

int64_t Schedule::version_stride(int stage) const {
  return per_minibatch_units(kind) ? layout.replicas[static_cast<size_t>(stage)] : 1;
}

Schedule make_schedule(ScheduleKind kind, const Layout& layout, int64_t steps, int microbatches) {
  PT_CHECK(kind != ScheduleKind::eval, "use make_eval_schedule");
  Schedule S;
  S.kind = kind;
  S.layout = layout;
  S.steps = steps;
  S.microbatches = per_minibatch_units(kind) ? 1 : microbatches;
  const int K = layout.stages();
  const int64_t U = S.units();
  PT_CHECK(U < INT32_MAX, "schedule too long: " << U << " units");
  for (int s = 0; s < K; ++s)
    PT_CHECK(!per_minibatch_units(kind) || U % layout.replicas[static_cast<size_t>(s)] == 0,
             "the pipedream schedules need the minibatch count (" << U << ") to be a multiple of every replica count");
  S.workers.resize(static_cast<size_t>(layout.ranks()));
  std::vector<int32_t> v0(static_cast<size_t>(U), -1);  // version stage 0 read for each unit (vsync)

  for (int s = 0; s < K; ++s) {
    const int reps = layout.replicas[static_cast<size_t>(s)];
    const int64_t stride = S.version_stride(s);
    int depth = layout.in_flight_depth(s);
    if (kind == ScheduleKind::gpipe) depth = INT_MAX;
    if (kind == ScheduleKind::model_parallel) depth = 1;
    const bool barrier = is_flush(kind);
    for (int r = 0; r < reps; ++r) {
      auto& acts = S.workers[static_cast<size_t>(layout.rank_of(s, r))];
      std::vector<int64_t> L;
      for (int64_t m = r; m < U; m += reps) L.push_back(m);
      const int64_t G = S.groups(s);
      std::vector<int64_t> left(static_cast<size_t>(G), 0);
      for (int64_t m : L) ++left[static_cast<size_t>(S.group_of(s, m))];
      std::vector<char> reduced(static_cast<size_t>(G), 0);
      std::vector<int32_t> fwd_version(static_cast<size_t>(U), -1);
      int64_t updates = 0, version = 0;
      size_t nf = 0, nb = 0;
      int inflight = 0;
      auto peer = [&](int stage, int64_t m) { return layout.rank_of(stage, layout.replica_for(stage, m)); };
      auto emit_updates = [&]() {
        while (updates < G && left[static_cast<size_t>(updates)] == 0) {
          if (reps > 1 && !reduced[static_cast<size_t>(updates)])
            acts.push_back({Op::allreduce, static_cast<int32_t>(updates), -1, -1});
          version += stride;
          acts.push_back({Op::optimizer_step, static_cast<int32_t>(updates), static_cast<int32_t>(version), -1});
          ++updates;
        }
      };
      auto read_version = [&](int64_t m, bool is_backward) -> int32_t {
        switch (kind) {
          case ScheduleKind::pipedream_nostash: return static_cast<int32_t>(version);
          case ScheduleKind::pipedream:
            return is_backward ? fwd_version[static_cast<size_t>(m)] : static_cast<int32_t>(version);
          case ScheduleKind::pipedream_vsync:
            if (is_backward) return fwd_version[static_cast<size_t>(m)];
            if (s == 0) return static_cast<int32_t>(version);
            return static_cast<int32_t>(stride * (v0[static_cast<size_t>(m)] / stride));
          case ScheduleKind::two_bw: return static_cast<int32_t>(std::max<int64_t>(0, S.group_of(s, m) - 1));
          default: return static_cast<int32_t>(version);  // flush: the one version of this step
        }
      };
      emit_updates();
      while (nb < L.size()) {
        // a forward also waits until the weight version it reads exists (2bw, vsync)
        const bool can_forward = nf < L.size() && inflight < depth &&
                                 (!barrier || S.group_of(s, L[nf]) == updates) &&
                                 read_version(L[nf], false) <= version;
        if (can_forward) {
          const int64_t m = L[nf++];
          const int32_t v = read_version(m, false);
          fwd_version[static_cast<size_t>(m)] = v;
          if (s == 0) v0[static_cast<size_t>(m)] = v;
          if (s > 0) acts.push_back({Op::recv_act, static_cast<int32_t>(m), -1, peer(s - 1, m)});
          acts.push_back({Op::forward, static_cast<int32_t>(m), v, -1});
          if (s < K - 1) acts.push_back({Op::send_act, static_cast<int32_t>(m), -1, peer(s + 1, m)});
          ++inflight;
        } else {
          PT_CHECK(inflight > 0, "generator stalled on stage " << s << " replica " << r);
          const int64_t m = L[nb++];
          if (s < K - 1) acts.push_back({Op::recv_grad, static_cast<int32_t>(m), -1, peer(s + 1, m)});
          acts.push_back({Op::backward, static_cast<int32_t>(m), read_version(m, true), -1});
          --inflight;
          const int64_t g = S.group_of(s, m);
          if (--left[static_cast<size_t>(g)] == 0 && reps > 1) {
            acts.push_back({Op::allreduce, static_cast<int32_t>(g), -1, -1});
            reduced[static_cast<size_t>(g)] = 1;
          }
          if (s > 0) acts.push_back({Op::send_grad, static_cast<int32_t>(m), -1, peer(s - 1, m)});
          emit_updates();
        }
      }
      PT_CHECK(updates == G, "stage " << s << " replica " << r << " made " << updates << " of " << G << " updates");
    }
  }
  return S;
}

Schedule make_eval_schedule(const Layout& layout, int64_t units) {
  Schedule S;
  S.kind = ScheduleKind::eval;
  S.layout = layout;
  S.steps = units;
  S.microbatches = 1;
  const int K = layout.stages();
  S.workers.resize(static_cast<size_t>(layout.ranks()));
  for (int s = 0; s < K; ++s) {
    const int reps = layout.replicas[static_cast<size_t>(s)];
    for (int r = 0; r < reps; ++r) {
      auto& acts = S.workers[static_cast<size_t>(layout.rank_of(s, r))];
      for (int64_t m = r; m < units; m += reps) {
        if (s > 0) acts.push_back({Op::recv_act, static_cast<int32_t>(m), -1, layout.rank_of(s - 1, layout.replica_for(s - 1, m))});
        acts.push_back({Op::forward, static_cast<int32_t>(m), 0, -1});
        if (s < K - 1) acts.push_back({Op::send_act, static_cast<int32_t>(m), -1, layout.rank_of(s + 1, layout.replica_for(s + 1, m))});
      }
    }
  }
  return S;
}

}  // namespace pt
