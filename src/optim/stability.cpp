// Words for the delayed-gradient instability of asynchronous schedules (see stability.hpp).
// On a quadratic with curvature λ, heavy-ball SGD (lr ν, momentum β) with a gradient one update
// old, w(t+1) = (1+β)w(t) − (β + νλ)w(t−1), is stable only for νλ < 1 − β (0.1 at β = 0.9),
// against νλ < 2(1+β) (3.8) without the delay; longer delays shrink it further.
#include "pipetrain/stability.hpp"

#include <cstdio>

#include "pipetrain/optim.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {

int gradient_staleness(const std::string& schedule, int stages) {
  const ScheduleDef* d = find_schedule(schedule);
  return d ? d->staleness(stages) : 0;  // -1: K-1, K not known yet
}

namespace {

std::string num(double v) {
  char b[32];
  std::snprintf(b, sizeof b, "%g", v);
  return b;
}

// The flush schedules a run of `schedule` can switch to on its layout (the planner's flush
// candidates on its placement), from the registry: each name quoted, joined by ", " and " or ".
std::string flush_choices(const std::string& schedule) {
  const Placement placement = schedule_def(schedule).placement;
  std::vector<std::string> names;
  for (const ScheduleDef* d : schedule_defs())
    if (d->flush && d->planner && d->placement == placement) names.push_back("\"" + d->name + "\"");
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + names[i];
  return s;
}

std::string staleness_words(const std::string& schedule, int stages) {
  const int d = gradient_staleness(schedule, stages);
  if (d < 0) return schedule + " applies gradients computed on weights up to K-1 updates old (K stages)";
  std::string w = schedule + " applies gradients computed on weights up to " + std::to_string(d) + " update" +
                  (d == 1 ? "" : "s") + " old";
  if (find_schedule(schedule)->versions.staleness < 0) w += " (K-1 on " + std::to_string(stages) + " stages)";
  return w;
}

// The momentum-like coefficient of the optimizer, and the key that sets it.
double momentum_of(const OptimConfig& t, std::string* key) {
  *key = t.optimizer->momentum_key;
  return t.*(t.optimizer->momentum);
}

}  // namespace

std::string nonfinite_cause(const std::string& schedule, int stages, const OptimConfig& train) {
  if (gradient_staleness(schedule, stages) == 0) return "";
  std::string key;
  const double beta = momentum_of(train, &key);
  std::string s = "\nlikely cause: " + staleness_words(schedule, stages) + "; ";
  if (beta > 0)
    s += "with momentum " + num(beta) + " (" + key + ") such a step is stable only for a small enough learning rate (with one update of "
         "delay and curvature h, lr*h < 1-momentum = " + num(1 - beta) + ", against 2(1+momentum) = " + num(2 * (1 + beta)) +
         " without delay; bench/README.md)";
  else
    s += "a delayed gradient is stable only for a smaller learning rate than the same step without delay (bench/README.md)";
  s += "\nremedy: lower train.lr (now " + num(train.lr) + ")";
  if (beta > 0) s += " or " + key + " (now " + num(beta) + "; 0 with a larger lr also works)";
  s += ", or use a flush schedule (parallel.schedule = " + flush_choices(schedule) + "), which applies every gradient to the weights it "
       "was computed on";
  return s;
}

std::string async_momentum_warning(const std::string& schedule, int stages, const OptimConfig& train) {
  if (gradient_staleness(schedule, stages) == 0) return "";
  std::string key;
  const double beta = momentum_of(train, &key);
  if (beta < 0.9) return "";
  return "warning: " + staleness_words(schedule, stages) + ", with " + key + " = " + num(beta) + " and train.lr = " + num(train.lr) +
         ": delayed-gradient steps with high momentum are stable only for a small lr and may diverge (non-finite, exit 4); "
         "consider a lower train.lr or " + key + ", or a flush schedule (bench/README.md)\n";
}

}  // namespace pt
