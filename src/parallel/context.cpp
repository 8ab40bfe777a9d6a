// ParallelContext: communicators by MPI_Comm_split and deadline-bounded waits.
#include "pipetrain/parallel.hpp"

#include <sched.h>

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
  stage_ = layout.stage_of(rank_);
  replica_ = layout.replica_of(rank_);
  MPI_Comm_dup(world, &world_);
  MPI_Comm_dup(world, &p2p_);
  MPI_Comm_split(world, stage_, replica_, &stage_comm_);
  void* ub = nullptr;
  int flag = 0;
  MPI_Comm_get_attr(p2p_, MPI_TAG_UB, &ub, &flag);
  if (flag && ub) tag_mod_ = std::max(1024, *static_cast<int*>(ub) / 4);
}

ParallelContext::~ParallelContext() {
  if (stage_comm_ != MPI_COMM_NULL) MPI_Comm_free(&stage_comm_);
  if (p2p_ != MPI_COMM_NULL) MPI_Comm_free(&p2p_);
  if (world_ != MPI_COMM_NULL) MPI_Comm_free(&world_);
}

void ParallelContext::wait(MPI_Request* req, const std::function<std::string()>& what) const {
  if (*req == MPI_REQUEST_NULL) return;
  int done = 0;
  MPI_Test(req, &done, MPI_STATUS_IGNORE);
  if (done) return;
  const double deadline = now_s() + timeout_;
  for (long spins = 0;; ++spins) {
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (spins > 64) sched_yield();  // let an oversubscribed peer on this core run
    if ((spins & 255) == 0 && now_s() > deadline) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", timeout_);
      fail(Exit::timeout, "no progress for " + std::string(buf) + " s (run.comm_timeout_s) waiting for " + what() +
                              "; the peer is hung, dead or took another path");
    }
  }
}

void ParallelContext::allreduce_sum(double* data, int count, MPI_Comm comm, const char* what) const {
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_DOUBLE, MPI_SUM, comm, &req);
  wait(&req, [&] { return std::string("allreduce (") + what + ")"; });
}

void ParallelContext::allreduce_max(double* data, int count, MPI_Comm comm, const char* what) const {
  MPI_Request req;
  MPI_Iallreduce(MPI_IN_PLACE, data, count, MPI_DOUBLE, MPI_MAX, comm, &req);
  wait(&req, [&] { return std::string("allreduce (") + what + ")"; });
}

void ParallelContext::barrier(const char* what) const {
  MPI_Request req;
  MPI_Ibarrier(world_, &req);
  wait(&req, [&] { return std::string("barrier (") + what + ")"; });
}

void ParallelContext::broadcast(void* data, int bytes, int root, const char* what) const {
  MPI_Request req;
  MPI_Ibcast(data, bytes, MPI_BYTE, root, world_, &req);
  wait(&req, [&] { return std::string("broadcast (") + what + ")"; });
}

std::string ParallelContext::describe() const {
  return "rank " + std::to_string(rank_) + " = stage " + std::to_string(stage_) + " replica " + std::to_string(replica_);
}

}  // namespace pt
