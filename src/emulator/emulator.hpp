// Internal to src/emulator: the sequential emulator (emulator.cpp) that `pipetrain emulate`
// (emulate_command.cpp) runs. One process, the same layers, and each schedule's update rule
// applied literally from its registry entry's formula (VersionRule::formula), not from the
// schedule IR, keeping every old weight version it needs. It is the reference the
// distributed asynchronous runs are tested against (docs/ARCHITECTURE.md, "Weight versions").
#pragma once
#include <map>
#include <memory>
#include <vector>

#include "pipetrain/data.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/train.hpp"

namespace pt {

class SequentialEmulator {
 public:
  // The deck's model on setup's layout, every stage initialised as a run's would be.
  SequentialEmulator(const Deck& deck, const TrainSetup& setup);
  ~SequentialEmulator();
  // Train every step of the run (TrainSetup::total_steps), segment by segment.
  void run();
  int64_t total_steps() const { return total_; }
  const std::vector<double>& step_losses() const { return step_loss_; }
  // The latest weights of every layer, for weights.h5.
  std::vector<std::vector<float>> layer_weights() const;
  const Dataset& train_data() const { return *data_.train; }

 private:
  struct StageState;
  void init_stage(int s);
  void segment(int64_t done);
  void unit(int64_t m, int64_t sample0, const std::vector<int64_t>& perm, const std::vector<int64_t>& base, double& loss_acc);
  void forward(int64_t sample0, const std::vector<int64_t>& vf);
  void backward(int64_t sample0, const std::vector<int64_t>& vb);
  void update(int64_t m);
  float clip_coefficient_of(int s, bool flush_norm);
  void drop_versions(const std::vector<int64_t>& vf, const std::vector<int64_t>& vb);

  const Deck& deck_;
  const TrainSetup& setup_;
  const Layout& L_;
  const int K_, M_;
  const int64_t B_, mb_;
  const bool bf16_;
  const uint64_t seed_;
  DataSplit data_;
  int64_t N_ = 0, spe_ = 0, total_ = 0;
  std::unique_ptr<Backend> be_;
  std::vector<StageState> st_;
  std::vector<double> step_loss_;
  std::vector<float> host_x_;
  std::vector<int32_t> host_labels_;
  std::vector<int64_t> idx_;
  double norm_ = 0;  // a flush schedule's gradient norm of the update group being applied
};

}  // namespace pt
