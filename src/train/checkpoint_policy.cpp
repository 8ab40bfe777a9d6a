// The checkpoint policy (checkpoint_policy.hpp).
#include "checkpoint_policy.hpp"

#include <unistd.h>

#include <cmath>
#include <cstdio>

#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"

namespace pt {

CheckpointPolicy::CheckpointPolicy(const Deck& deck, const TrainArgs& args, const ParallelContext& ctx, int64_t stride, size_t lag,
                                   const volatile std::sig_atomic_t* signal)
    : deck_(deck), args_(args), ctx_(ctx), stride_(stride), lag_(lag), signal_(signal), last_time_(now_s()) {
  MPI_Comm_dup(ctx.job(), &control_);  // every tensor rank too: all agree on each cut
}

CheckpointPolicy::~CheckpointPolicy() {
  if (control_ != MPI_COMM_NULL) MPI_Comm_free(&control_);
}

void CheckpointPolicy::prepare(const std::string& dir) {
  writer_ = std::make_unique<CheckpointWriter>(ctx_, dir, static_cast<int>(deck_.checkpoint.keep));
  writer_->prepare();
  last_time_ = now_s();
}

int CheckpointPolicy::local_flags() {
  int f = *signal_ ? kFlagStop : 0;
  if (ctx_.rank() == 0 && deck_.checkpoint.every_seconds > 0 && !time_flag_outstanding_ &&
      now_s() - last_time_ >= deck_.checkpoint.every_seconds) {
    f |= kFlagCheckpoint;
    time_flag_outstanding_ = true;
  }
  return f;
}

CutAction CheckpointPolicy::at_boundary(int64_t v, int64_t segment_end) {
  if (v % stride_ != 0 || v >= segment_end) return CutAction::none;  // segment ends: after evaluation
  bool stop = args_.stop_at_step == v;
  bool ckpt = stop || (deck_.checkpoint.every_steps > 0 && v % deck_.checkpoint.every_steps == 0);
  // Signals and wall-clock triggers are local: agree on them with a nonblocking allreduce
  // started at each boundary and read `lag` boundaries later, when every rank has passed it.
  auto p = std::make_unique<Pending>();
  p->version = v;
  if (fault_matches("wait-signal", ctx_.rank(), -1, v))  // test-only: hold this boundary until a signal (120 s at most)
    for (int i = 0; i < 12000 && !*signal_; ++i) usleep(10000);
  p->local = local_flags();
  MPI_Iallreduce(&p->local, &p->result, 1, MPI_INT, MPI_BOR, control_, &p->req);
  pending_.push_back(std::move(p));
  if (pending_.size() > lag_) {
    Pending& q = *pending_.front();
    ctx_.wait(&q.req, [&] { return "agreement on checkpoint/stop flags of step " + std::to_string(q.version); });
    if (q.result & kFlagStop) stop = ckpt = true;
    if (q.result & kFlagCheckpoint) ckpt = true, time_flag_outstanding_ = false;
    pending_.pop_front();
  }
  return stop ? CutAction::checkpoint_and_stop : ckpt ? CutAction::checkpoint : CutAction::none;
}

CheckpointPolicy::Decision CheckpointPolicy::at_segment_end(int64_t step, bool last) {
  int local = local_flags(), any = 0;
  while (!pending_.empty()) {  // late flags from the segment's last boundaries count too
    Pending& q = *pending_.front();
    ctx_.wait(&q.req, [&] { return std::string("agreement on checkpoint/stop flags"); });
    local |= q.result;
    pending_.pop_front();
  }
  MPI_Request req;
  MPI_Iallreduce(&local, &any, 1, MPI_INT, MPI_BOR, control_, &req);
  ctx_.wait(&req, [] { return std::string("agreement on checkpoint/stop flags at the epoch end"); });
  Decision d;
  d.stop = (any & kFlagStop) || (args_.stop_at_step >= 0 && step >= args_.stop_at_step);
  d.checkpoint = d.stop || (any & kFlagCheckpoint) || (last && deck_.checkpoint.at_end) ||
                 (deck_.checkpoint.every_steps > 0 && step % deck_.checkpoint.every_steps == 0);
  if (any & kFlagCheckpoint) time_flag_outstanding_ = false;
  return d;
}

void CheckpointPolicy::commit(const std::vector<WorkerState>& st, const CheckpointMeta& meta, const std::vector<StageInfo>& info) {
  auto finite = [](const std::vector<float>& v) {
    for (float x : v)
      if (!std::isfinite(x)) return false;
    return true;
  };
  for (const WorkerState& s : st) {  // non-finite state is never committed
    const std::string where = "refusing to commit a checkpoint at step " + std::to_string(meta.step) + ": ";
    for (auto& [id, w] : s.versions)
      if (!finite(w)) fail(Exit::numerical, where + "weight version " + std::to_string(id) + " of stage " + std::to_string(s.stage) + " is not finite");
    for (auto& o : s.optimizer)
      if (!finite(o)) fail(Exit::numerical, where + "optimizer state of stage " + std::to_string(s.stage) + " is not finite");
  }
  const double t0 = now_s();
  last_ = writer_->commit(st, meta, info);
  last_time_ = now_s();
  if (ctx_.rank() == 0) {
    std::printf("checkpoint: step %lld committed to %s (%.2fs)\n", static_cast<long long>(meta.step), last_.c_str(), now_s() - t0);
    std::fflush(stdout);
  }
}

void CheckpointPolicy::drain() {
  while (!pending_.empty()) {
    ctx_.wait(&pending_.front()->req, [] { return std::string("agreement on checkpoint/stop flags"); });
    pending_.pop_front();
  }
}

}  // namespace pt
