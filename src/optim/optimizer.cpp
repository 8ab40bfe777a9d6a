// Optimizer steps and learning-rate schedules. Update rules follow PyTorch 1.13:
// SGD: d = g + wd w; buf = m buf + d; d = nesterov ? d + m buf : buf; w -= lr d.
// AdamW: w *= 1 - lr wd; m, v moments; w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
#include "pipetrain/optim.hpp"

#include <cmath>

#include "pipetrain/error.hpp"

namespace pt {

double learning_rate(const Deck::Train& t, int64_t update, int64_t total) {
  double lr = t.lr;
  if (t.lr_schedule == "step") {
    lr *= std::pow(t.gamma, static_cast<double>(update / t.step_size));
  } else if (t.lr_schedule == "cosine") {
    const double frac = total > 0 ? std::min(1.0, static_cast<double>(update) / static_cast<double>(total)) : 0.0;
    lr = t.min_lr + 0.5 * (t.lr - t.min_lr) * (1.0 + std::cos(M_PI * frac));
  }
  if (update < t.warmup_steps) lr *= static_cast<double>(update + 1) / static_cast<double>(t.warmup_steps);
  return lr;
}

Optimizer::Optimizer(const Deck::Train& cfg, Backend& be, size_t n, int64_t total_updates)
    : cfg_(cfg), be_(be), n_(n), total_(total_updates) {
  if (cfg.optimizer == "sgd") {
    if (cfg.momentum != 0.0) s1_ = Buffer(be, n);
  } else {
    s1_ = Buffer(be, n);
    s2_ = Buffer(be, n);
  }
}

void Optimizer::step(float* w, const float* g, float grad_scale) {
  const double lr_d = current_lr();
  const float lr = static_cast<float>(lr_d);
  ++updates_;
  if (n_ == 0) return;
  if (cfg_.optimizer == "sgd") {
    be_.sgd_update(n_, w, g, s1_.data(), lr, static_cast<float>(cfg_.momentum), static_cast<float>(cfg_.weight_decay),
                   cfg_.nesterov, grad_scale);
  } else {
    be_.adamw_update(n_, w, g, s1_.data(), s2_.data(), lr_d, cfg_.beta1, cfg_.beta2, cfg_.eps,
                     cfg_.weight_decay, updates_, grad_scale);
  }
}

std::vector<Buffer*> Optimizer::state() {
  std::vector<Buffer*> s;
  if (s1_.data()) s.push_back(&s1_);
  if (s2_.data()) s.push_back(&s2_);
  return s;
}

std::vector<std::string> Optimizer::state_names() const {
  std::vector<std::string> names;  // one per buffer of state(): none on a stage without parameters
  if (s1_.data()) names.push_back(cfg_.optimizer == "sgd" ? "momentum" : "exp_avg");
  if (s2_.data()) names.push_back("exp_avg_sq");
  return names;
}

}  // namespace pt
