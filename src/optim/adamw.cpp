// AdamW as PyTorch 1.13 updates: w *= 1 - lr wd; m, v moments; w -= lr/(1-b1^t) * m /
// (sqrt(v)/sqrt(1-b2^t) + eps) (Backend::adamw_update; the scalars in double, as PyTorch
// forms them from Python floats). State: exp_avg (m) and exp_avg_sq (v).
#include "pipetrain/optim.hpp"

namespace pt {
namespace {

OptimizerDef adamw() {
  OptimizerDef d;
  d.name = "adamw";
  d.doc = "AdamW (train.beta1, train.beta2, train.eps) with decoupled weight decay";
  d.state_names = [](const OptimConfig&) { return std::vector<std::string>{"exp_avg", "exp_avg_sq"}; };
  d.step = [](const OptimStep& s) {
    const OptimConfig& c = s.cfg;
    s.be.adamw_update(s.n, s.w, s.g, s.state[0], s.state[1], s.lr, c.beta1, c.beta2, c.eps, c.weight_decay, s.update,
                      s.grad_scale);
  };
  d.momentum_key = "train.beta1";
  d.momentum = &OptimConfig::beta1;
  return d;
}

}  // namespace

PT_REGISTER_OPTIMIZER(adamw, adamw())

}  // namespace pt
