// The reporter (internal to runtime): progress lines with ETA, metrics.jsonl records and the
// evaluation log, on the reporter rank only, and the running totals a checkpoint keeps so a
// resumed run logs what the uninterrupted one would. Language-model data (token_unit "byte"
// or "token") is also reported as bits per unit and tokens per second.
#pragma once
#include <cmath>
#include <memory>
#include <string>

#include "pipetrain/deck.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/engine.hpp"

namespace pt {

std::string human_rate(double v);
std::string human_time(double s);

// The trainer's clock, read by the reporter: training seconds before the running segment,
// the segment's start, and where the running epoch's IR began.
struct TrainClock {
  double train_time = 0, t_epoch0 = 0;
  int64_t epoch = 0, epoch_start = 0;
};

class Reporter {
 public:
  Reporter(const Deck& deck, bool active, int64_t total_steps, int last_stage, std::string token_unit, int64_t labels_per_sample);
  void open(const std::string& run_dir, bool append);
  void restore(const WorkerState::Reporting& r, int64_t resume_step);
  void start_epoch() { epoch_loss_ = epoch_samples_ = 0; }
  // A segment starts at t0; evaluation between segments is not training time.
  void start_segment(double t0, double last_segment_end);
  void on_update(const UpdateReport& r, const TrainClock& clock);
  // eval_s: the evaluation's wall seconds (printed, and eval_s in the record)
  void log_eval(int64_t step, bool epoch_end, double seconds, int64_t steps, const Executor::EvalResult& res,
                const TrainClock& clock, double lr, double eval_s);
  WorkerState::Reporting totals(double epoch_time) const;

  double final_accuracy() const { return final_acc_; }
  double final_test_loss() const { return final_test_loss_; }
  double last_train_loss() const { return last_train_loss_; }
  double time_to_target() const { return time_to_target_; }

 private:
  std::string loss_words(double nats) const;  // "2.1234" or "2.1234 nats (3.06 bits/byte)"
  const Deck& deck_;
  bool active_;
  int64_t total_steps_, next_log_ = 0;
  int last_stage_;
  std::string unit_;
  int64_t labels_per_sample_;
  std::unique_ptr<MetricsLog> metrics_;
  double interval_start_ = 0, interval_samples_ = 0, interval_loss_ = 0, epoch_loss_ = 0, epoch_samples_ = 0;
  double last_train_loss_ = NAN, time_to_target_ = -1, final_acc_ = NAN, final_test_loss_ = NAN;
};

}  // namespace pt
