// The reporter: progress lines, metrics.jsonl and evaluation records (reporter.hpp).
#include "reporter.hpp"

#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

namespace pt {

std::string human_rate(double v) {
  char b[32];
  if (v >= 1e6) std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3) std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else std::snprintf(b, sizeof b, "%.1f", v);
  return b;
}

std::string human_time(double s) {
  char b[32];
  if (!std::isfinite(s) || s < 0) return "?";
  if (s >= 3600) std::snprintf(b, sizeof b, "%dh%02dm", static_cast<int>(s / 3600), static_cast<int>(std::fmod(s, 3600) / 60));
  else if (s >= 60) std::snprintf(b, sizeof b, "%dm%02ds", static_cast<int>(s / 60), static_cast<int>(std::fmod(s, 60)));
  else std::snprintf(b, sizeof b, "%.1fs", s);
  return b;
}

Reporter::Reporter(const Deck& deck, bool active, int64_t total_steps, int last_stage, std::string token_unit,
                   int64_t labels_per_sample)
    : deck_(deck), active_(active), total_steps_(total_steps), next_log_(deck.train.log_every), last_stage_(last_stage),
      unit_(std::move(token_unit)), labels_per_sample_(labels_per_sample) {}

void Reporter::open(const std::string& run_dir, bool append) {
  if (active_) metrics_ = std::make_unique<MetricsLog>(run_dir + "/metrics.jsonl", append);
}

void Reporter::restore(const WorkerState::Reporting& r, int64_t resume_step) {
  epoch_loss_ = r.epoch_loss, epoch_samples_ = r.epoch_samples;
  interval_loss_ = r.interval_loss, interval_samples_ = r.interval_samples;
  time_to_target_ = r.time_to_target;
  next_log_ = (resume_step / deck_.train.log_every + 1) * deck_.train.log_every;
}

void Reporter::start_segment(double t0, double last_segment_end) {
  if (last_segment_end > 0) interval_start_ += t0 - last_segment_end;  // evaluation is not training time
  else interval_start_ = t0;
}

WorkerState::Reporting Reporter::totals(double epoch_time) const {
  return {epoch_loss_, epoch_samples_, interval_loss_, interval_samples_, epoch_time, time_to_target_};
}

std::string Reporter::loss_words(double nats) const {
  char b[96];
  if (unit_.empty()) std::snprintf(b, sizeof b, "%.4f", nats);
  else std::snprintf(b, sizeof b, "%.4f nats (%.3f bits/%s)", nats, nats / std::log(2.0), unit_.c_str());
  return b;
}

void Reporter::on_update(const UpdateReport& r, const TrainClock& clock) {
  if (!active_ || r.stage != last_stage_) return;  // the loss is the last stage's
  interval_loss_ += r.loss_sum, interval_samples_ += static_cast<double>(r.samples);
  epoch_loss_ += r.loss_sum, epoch_samples_ += static_cast<double>(r.samples);
  const int64_t step = r.minibatches;
  if (step < next_log_ && step != total_steps_) return;
  const double now = now_s(), elapsed = clock.train_time + (now - clock.t_epoch0);
  const double sps = interval_samples_ / std::max(1e-9, now - interval_start_);
  const double loss = interval_loss_ / std::max(1.0, interval_samples_);
  const int64_t done_here = std::max<int64_t>(1, step - clock.epoch_start);
  const double eta = static_cast<double>(total_steps_ - step) * (now - clock.t_epoch0) / static_cast<double>(done_here);
  const std::string tokens = unit_.empty() ? "" : "  " + human_rate(sps * static_cast<double>(labels_per_sample_)) + " tokens/s";
  const bool clipping = deck_.train.clip_grad_norm > 0;
  char norm[48] = "";
  if (clipping) std::snprintf(norm, sizeof norm, "  grad norm %.4g", r.grad_norm);
  std::printf("step %lld/%lld  epoch %lld  loss %s  lr %.4g%s  %s samples/s%s  elapsed %s  ETA %s%s\n",
              static_cast<long long>(step), static_cast<long long>(total_steps_), static_cast<long long>(clock.epoch + 1),
              loss_words(loss).c_str(), r.lr, norm, human_rate(sps).c_str(), tokens.c_str(), human_time(elapsed).c_str(),
              human_time(eta).c_str(), r.skipped ? "  (non-finite gradient: update skipped)" : "");
  std::fflush(stdout);
  nlohmann::json j = {{"type", "step"}, {"step", step}, {"epoch", clock.epoch}, {"loss", loss}, {"lr", r.lr},
                      {"samples_per_s", sps}, {"elapsed_s", elapsed}};
  if (!unit_.empty()) j["tokens_per_s"] = sps * static_cast<double>(labels_per_sample_), j["bits_per_" + unit_] = loss / std::log(2.0);
  if (clipping) j["grad_norm"] = r.grad_norm;  // this step's, before clipping (null when not finite)
  metrics_->append(j.dump());
  last_train_loss_ = loss;
  interval_start_ = now;
  interval_samples_ = interval_loss_ = 0;
  while (next_log_ <= step) next_log_ += deck_.train.log_every;
}

void Reporter::log_eval(int64_t step, bool epoch_end, double seconds, int64_t steps, const Executor::EvalResult& res,
                        const TrainClock& clock, double lr, double eval_s) {
  if (!active_) return;
  final_acc_ = static_cast<double>(res.correct) / static_cast<double>(std::max<int64_t>(1, res.labels));
  final_test_loss_ = res.loss_sum / static_cast<double>(std::max<int64_t>(1, res.samples));
  const double train_loss = epoch_loss_ / std::max(1.0, epoch_samples_);
  bool reached = false;
  const bool hit = (deck_.train.target_accuracy > 0 && final_acc_ >= deck_.train.target_accuracy) ||
                   (deck_.train.target_loss > 0 && final_test_loss_ <= deck_.train.target_loss);
  if (hit && time_to_target_ < 0) time_to_target_ = clock.train_time, reached = true;
  const double sps = static_cast<double>(steps * deck_.train.batch_size) / std::max(1e-9, seconds);
  const char* acc = unit_.empty() ? "test accuracy" : "next-token accuracy";
  char ev[96];
  std::snprintf(ev, sizeof ev, "evaluated %lld samples in %s", static_cast<long long>(res.samples), human_time(eval_s).c_str());
  if (epoch_end) {
    last_train_loss_ = train_loss;
    std::printf("epoch %lld: train loss %s  test loss %s  %s %.4f  (%s samples/s, epoch %s; %s)%s\n",
                static_cast<long long>(clock.epoch + 1), loss_words(train_loss).c_str(), loss_words(final_test_loss_).c_str(), acc,
                final_acc_, human_rate(sps).c_str(), human_time(seconds).c_str(), ev, reached ? "  target reached" : "");
  } else {
    std::printf("step %lld: test loss %s  %s %.4f  (%s)%s\n", static_cast<long long>(step), loss_words(final_test_loss_).c_str(), acc,
                final_acc_, ev, reached ? "  target reached" : "");
  }
  std::fflush(stdout);
  nlohmann::json j = {{"type", epoch_end ? "epoch" : "eval"}, {"epoch", clock.epoch}, {"step", step}, {"test_loss", final_test_loss_},
                      {"test_accuracy", final_acc_}, {"elapsed_s", clock.train_time}, {"lr", lr}, {"eval_s", eval_s},
                      {"eval_samples", res.samples}};
  if (!unit_.empty()) j["test_bits_per_" + unit_] = final_test_loss_ / std::log(2.0);
  if (epoch_end) j["loss"] = train_loss, j["train_loss"] = train_loss, j["samples_per_s"] = sps;
  metrics_->append(j.dump());
}

}  // namespace pt
