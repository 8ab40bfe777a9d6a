// The learning-rate schedules over optimizer updates t of `total` (before the warm-up,
// optimizer.cpp): constant lr; step lr * gamma^floor(t / step_size); cosine from lr to
// min_lr over the whole run, min_lr + (lr - min_lr) (1 + cos(pi min(t, total) / total)) / 2,
// never below min_lr once the warm-up has reached it (optimizer.cpp).
#include <algorithm>
#include <cmath>

#include "pipetrain/optim.hpp"

namespace pt {
namespace {

LrScheduleDef constant() {
  LrScheduleDef d;
  d.name = "constant";
  d.doc = "train.lr throughout";
  d.rate = [](const OptimConfig& t, int64_t, int64_t) { return t.lr; };
  return d;
}

LrScheduleDef step() {
  LrScheduleDef d;
  d.name = "step";
  d.doc = "train.lr times train.gamma every train.step_size updates";
  d.rate = [](const OptimConfig& t, int64_t update, int64_t) {
    return t.lr * std::pow(t.gamma, static_cast<double>(update / t.step_size));
  };
  return d;
}

LrScheduleDef cosine() {
  LrScheduleDef d;
  d.name = "cosine";
  d.doc = "cosine from train.lr to train.min_lr over the run's updates";
  d.rate = [](const OptimConfig& t, int64_t update, int64_t total) {
    const double frac = total > 0 ? std::min(1.0, static_cast<double>(update) / static_cast<double>(total)) : 0.0;
    return t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * frac));
  };
  d.min_lr_floor = true;
  return d;
}

}  // namespace

PT_REGISTER_LR_SCHEDULE(constant, constant())
PT_REGISTER_LR_SCHEDULE(step, step())
PT_REGISTER_LR_SCHEDULE(cosine, cosine())

}  // namespace pt
