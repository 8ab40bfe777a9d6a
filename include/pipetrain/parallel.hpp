// ParallelContext: this rank's place in the layout (its rank group, the stages it holds,
// its replica), the communicators built from it with MPI_Comm_split (one per stage among
// that stage's replicas), and deadline-bounded waits on MPI requests so that a silent peer
// becomes a located error instead of a hang. A test can build one rank's context without
// MPI (no communicators) to run an Executor over its own Transport.
#pragma once
#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "pipetrain/layers.hpp"
#include "pipetrain/schedule_ir.hpp"

namespace pt {

class ParallelContext {
 public:
  ParallelContext(MPI_Comm world, const Layout& layout, double timeout_s);
  // Rank `rank` of `layout` without MPI (tests): every communicator is MPI_COMM_NULL and the
  // collectives below must not be called; the executor then talks only through the
  // Transport it is given.
  ParallelContext(const Layout& layout, int rank, double timeout_s);
  ~ParallelContext();
  ParallelContext(const ParallelContext&) = delete;
  ParallelContext& operator=(const ParallelContext&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int group() const { return group_; }
  int replica() const { return replica_; }
  const std::vector<int>& stages() const { return stages_; }  // held by this rank, ascending
  // The one stage of a contiguous layout's rank (an internal error when it holds several).
  int stage() const;
  const Layout& layout() const { return layout_; }
  bool holds(int stage) const;
  bool holds_first_stage() const { return holds(0); }
  bool holds_last_stage() const { return holds(layout_.stages() - 1); }
  int replicas() const { return layout_.replicas[static_cast<size_t>(group_)]; }  // of this rank's group
  MPI_Comm world() const { return world_; }  // collectives across all ranks (of this pipeline world)
  // Every rank of the job: the pipeline world, or under parallel.tensor all t of them
  // (set_job); agreements that every tensor rank must share (the checkpoint to resume from).
  MPI_Comm job() const { return job_ != MPI_COMM_NULL ? job_ : world_; }
  void set_job(MPI_Comm job) { job_ = job; }
  MPI_Comm p2p() const { return p2p_; }      // pipeline messages
  MPI_Comm stage_comm(int stage) const;      // the replicas of a stage this rank holds
  // The rank that logs progress and writes metrics: replica 0 of the last stage.
  int reporter() const { return layout_.rank_of(layout_.stages() - 1, 0); }
  bool is_reporter() const { return rank_ == reporter(); }
  double timeout() const { return timeout_; }
  int tag_modulus() const { return tag_mod_; }

  // Wait for a request until run.comm_timeout_s; on expiry throw Exit::timeout with
  // `what()` (the action, microbatch and peer being waited for).
  void wait(MPI_Request* req, const std::function<std::string()>& what) const;
  // Collectives that cannot hang: nonblocking start + deadline wait.
  void allreduce_sum(double* data, int count, MPI_Comm comm, const char* what) const;
  void allreduce_max(double* data, int count, MPI_Comm comm, const char* what) const;
  void barrier(const char* what) const;
  void broadcast(void* data, int bytes, int root, const char* what) const;

  std::string describe() const;

 private:
  void place(int rank);  // group, replica and stages of `rank`
  void require_comms(const char* what) const;
  Layout layout_;
  MPI_Comm world_ = MPI_COMM_NULL, p2p_ = MPI_COMM_NULL, job_ = MPI_COMM_NULL;
  std::vector<MPI_Comm> stage_comms_;  // by stage; MPI_COMM_NULL for stages held elsewhere
  std::vector<int> stages_;
  int rank_ = 0, size_ = 1, group_ = 0, replica_ = 0, tag_mod_ = 8192;
  double timeout_;
};

// The (replica, stage group, tensor) grid of parallel.tensor = t: world rank w is tensor rank
// w % t of tensor group w / t (tensor ranks adjacent, so a block placement puts a group on
// one node). The ranks of one tensor rank form a pipeline world of size / t ranks, on which
// the layout, the schedule and every other communicator are built as with t = 1: each runs
// the same units in the same order on its part of the split layers' weights. tensor: the
// group's communicator (MPI_COMM_NULL when t = 1). The caller frees both.
struct TensorGrid {
  int parts = 1, rank = 0, group = 0;
  MPI_Comm pipeline = MPI_COMM_NULL, tensor = MPI_COMM_NULL;
};
TensorGrid split_tensor_grid(MPI_Comm world, int t);
void free_tensor_grid(TensorGrid& g);

// Plain values over `comm`, for decisions every rank must take alike (collective): agreed,
// one value every rank agrees on (op: MPI_MIN or MPI_MAX); broadcast_string, rank root's
// string on every rank.
int64_t agreed(int64_t v, MPI_Op op, MPI_Comm comm = MPI_COMM_WORLD);
std::string broadcast_string(std::string s, int root, MPI_Comm comm);

class Transport;  // transport.hpp

// The TensorGroup of a rank on its grid's tensor communicator. sum() on the host stages x
// through host memory, all-gathers every rank's x (nonblocking, under the context's deadline)
// and adds them in tensor-rank order on every rank, so all hold the same bits. Given a
// transport (use_transport: the CUDA backend's), it sums the device buffer in place through
// the transport's allreduce instead: NCCL under parallel.allreduce = "nccl", else MPI
// (CUDA-aware or staged); at t = 2 both ranks add the same two values, so they agree bitwise.
// max() stages through host memory on every backend (MPI_MAX: order-free; a few floats per
// token). bytes(): what it sent.
class MpiTensorGroup final : public TensorGroup {
 public:
  MpiTensorGroup(const TensorGrid& grid, const ParallelContext& ctx) : grid_(grid), ctx_(ctx) {}
  void use_transport(Transport* tr) { tr_ = tr; }
  int size() const override { return grid_.parts; }
  int rank() const override { return grid_.rank; }
  void sum(Backend& be, float* x, int64_t count) const override;
  void max(Backend& be, float* x, int64_t count) const override;
  // host buffers: one alltoall of the parts, added in tensor-rank order; device buffers
  // (the transport): the whole sum()
  void sum_part(Backend& be, float* x, int64_t count, int64_t part) const override;
  void gather(const double* mine, double* all, int64_t count) const override;
  void allgather(Backend& be, float* x, int64_t count, int64_t part) const override;
  int64_t bytes() const { return bytes_; }

 private:
  TensorGrid grid_;
  const ParallelContext& ctx_;
  Transport* tr_ = nullptr;
  mutable std::vector<float> all_, out_;
  mutable int64_t bytes_ = 0;
};

// Seconds on a monotonic clock.
double now_s();

// Spin until done() returns true (yielding the core after 64 tries); past timeout_s seconds
// without, throw Exit::timeout naming what(). Every deadline wait (ParallelContext::wait,
// Transport::wait) is this loop, so all give the same deadline and message.
void wait_until(const std::function<bool()>& done, double timeout_s, const std::function<std::string()>& what);

}  // namespace pt
