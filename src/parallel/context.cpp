// ParallelContext: communicators by MPI_Comm_split (or none, for a test's rank) and
// deadline-bounded waits.
#include "pipetrain/parallel.hpp"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "pipetrain/error.hpp"

namespace pt {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

ParallelContext::ParallelContext(MPI_Comm world, const Layout& layout, double timeout_s)
    : layout_(layout), timeout_(timeout_s) {
  MPI_Comm_rank(world, &rank_);
  MPI_Comm_size(world, &size_);
  PT_CHECK(size_ == layout.ranks(), "layout places " << layout.ranks() << " ranks, world has " << size_);
  place(rank_);
  MPI_Comm_dup(world, &world_);
  MPI_Comm_dup(world, &p2p_);
  // one communicator per stage among its replicas (every rank takes part in every split)
  stage_comms_.assign(static_cast<size_t>(layout.stages()), MPI_COMM_NULL);
  for (int s = 0; s < layout.stages(); ++s)
    MPI_Comm_split(world, holds(s) ? s : MPI_UNDEFINED, replica_, &stage_comms_[static_cast<size_t>(s)]);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(p2p_, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) tag_mod_ = std::max(1024, *static_cast<int*>(ub) / 4);
}

ParallelContext::ParallelContext(const Layout& layout, int rank, double timeout_s) : layout_(layout), timeout_(timeout_s) {
  size_ = layout.ranks();
  PT_CHECK(0 <= rank && rank < size_, "rank " << rank << " outside the layout's " << size_ << " ranks");
  place(rank);
  stage_comms_.assign(static_cast<size_t>(layout.stages()), MPI_COMM_NULL);
}

void ParallelContext::place(int rank) {
  rank_ = rank;
  group_ = layout_.group_of_rank(rank);
  replica_ = layout_.replica_of(rank);
  stages_ = layout_.stages_of_rank(rank);
}

void ParallelContext::require_comms(const char* what) const {
  PT_CHECK(world_ != MPI_COMM_NULL, what << " on a context without communicators (rank " << rank_ << ")");
}

ParallelContext::~ParallelContext() {
  for (MPI_Comm& c : stage_comms_)
    if (c != MPI_COMM_NULL) MPI_Comm_free(&c);
  if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
  if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
}

int ParallelContext::stage() const {
  PT_CHECK(stages_.size() == 1, "rank " << rank_ << " holds " << stages_.size() << " stages");
  return stages_[0];
}

bool ParallelContext::holds(int stage) const {
  return std::find(stages_.begin(), stages_.end(), stage) != stages_.end();
}

MPI_Comm ParallelContext::stage_comm(int stage) const {
  PT_CHECK(holds(stage), "rank " << rank_ << " does not hold stage " << stage);
  return stage_comms_[static_cast<size_t>(stage)];
}

void wait_until(const std::function<bool()>& done, double timeout_s, const std::function<std::string()>& what) {
  if (done()) return;
  const double deadline = now_s() + timeout_s;
  for (long spins = 0;; ++spins) {
    if (done()) return;
    if (spins > 64) sched_yield();  // let an oversubscribed peer on this core run
    if ((spins & 255) == 0 && now_s() > deadline) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", timeout_s);
      fail(Exit::timeout, "no progress for " + std::string(buf) + " s (run.comm_timeout_s) waiting for " + what() +
                              "; the peer is hung, dead or took another path");
    }
  }
}

void ParallelContext::wait(MPI_Request* req, const std::function<std::string()>& what) const {
  if (*req == MPI_REQUEST_NULL) return;
  wait_until(
      [req] {
        int done = 0;
        MPI_Test(req, &done, MPI_STATUS_IGNORE);
        return done != 0;
      },
      timeout_, what);
}

void ParallelContext::allreduce_sum(double* data, int count, MPI_Comm comm, const char* what) const {
  require_comms(what);
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_DOUBLE, MPI_SUM, comm, &req);
  wait(&req, [&] { return std::string("allreduce (") + what + ")"; });
}

void ParallelContext::allreduce_max(double* data, int count, MPI_Comm comm, const char* what) const {
  require_comms(what);
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_DOUBLE, MPI_MAX, comm, &req);
  wait(&req, [&] { return std::string("allreduce (") + what + ")"; });
}

void ParallelContext::barrier(const char* what) const {
  require_comms(what);
  MPI_Request req;
  MPI_Ibarrier(world_, &req);
  wait(&req, [&] { return std::string("barrier (") + what + ")"; });
}

void ParallelContext::broadcast(void* data, int bytes, int root, const char* what) const {
  require_comms(what);
  MPI_Request req;
  MPI_Ibcast(data, bytes, MPI_BYTE, root, world_, &req);
  wait(&req, [&] { return std::string("broadcast (") + what + ")"; });
}

std::string ParallelContext::describe() const {
  std::string st;
  for (int s : stages_) st += (st.empty() ? "" : ",") + std::to_string(s);
  return "rank " + std::to_string(rank_) + " = stage " + st + " replica " + std::to_string(replica_);
}

int64_t agreed(int64_t v, MPI_Op op, MPI_Comm comm) {
  long long x = v, y = 0;
  MPI_Allreduce(&x, &y, 1, MPI_LONG_LONG, op, comm);
  return static_cast<int64_t>(y);
}

std::string broadcast_string(std::string s, int root, MPI_Comm comm) {
  long long n = static_cast<long long>(s.size());
  MPI_Bcast(&n, 1, MPI_LONG_LONG, root, comm);
  s.resize(static_cast<size_t>(n));
  MPI_Bcast(s.data(), static_cast<int>(n), MPI_CHAR, root, comm);
  return s;
}

}  // namespace pt
