// The checkpoint policy (internal to runtime): when to cut a checkpoint and when to stop —
// every N steps, every N seconds, on SIGUSR1/SIGTERM, at --stop-at-step, at the end — with
// local triggers (signals, the clock) agreed among all ranks by nonblocking allreduces read
// `lag` boundaries later, and the collective commit of the states a rank holds.
#pragma once
#include <mpi.h>

#include <csignal>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "pipetrain/checkpoint.hpp"
#include "pipetrain/commands.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

class CheckpointPolicy {
 public:
  // `signal` is the stop signal the handler recorded (0: none); boundaries are multiples of
  // `stride` (the replicas' common update stride).
  CheckpointPolicy(const Deck& deck, const TrainArgs& args, const ParallelContext& ctx, int64_t stride, size_t lag,
                   const volatile std::sig_atomic_t* signal);
  ~CheckpointPolicy();
  void prepare(const std::string& dir);  // collective: the directory exists and every rank can write it
  // At update boundary v of a segment that ends at segment_end (whose end is handled by
  // at_segment_end, after its evaluation).
  CutAction at_boundary(int64_t v, int64_t segment_end);
  // The segment is drained at `step` (after its evaluation): agree synchronously.
  struct Decision {
    bool checkpoint = false, stop = false;
  };
  Decision at_segment_end(int64_t step, bool last);
  // Collective: write and commit every held stage's state (non-finite state is refused).
  void commit(const std::vector<WorkerState>& st, const CheckpointMeta& meta, const std::vector<StageInfo>& info);
  void drain();  // wait for the agreements still outstanding
  void start_clock() { last_time_ = now_s(); }  // checkpoint.every_seconds counts from here
  const std::string& last_checkpoint() const { return last_; }
  bool signalled() const { return *signal_ != 0; }

 private:
  static constexpr int kFlagCheckpoint = 1, kFlagStop = 2;
  struct Pending {
    int64_t version;
    MPI_Request req;
    int local, result;
  };
  int local_flags();
  const Deck& deck_;
  const TrainArgs& args_;
  const ParallelContext& ctx_;
  int64_t stride_;
  size_t lag_;
  const volatile std::sig_atomic_t* signal_;
  MPI_Comm control_ = MPI_COMM_NULL;
  std::unique_ptr<CheckpointWriter> writer_;
  std::deque<std::unique_ptr<Pending>> pending_;
  bool time_flag_outstanding_ = false;
  double last_time_ = 0;
  std::string last_;
};

}  // namespace pt
