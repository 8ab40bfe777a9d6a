// SGD as PyTorch 1.13 updates: d = g + wd w; buf = m buf + d; d = nesterov ? d + m buf : buf;
// w -= lr d (Backend::sgd_update, in float). State: the momentum buffer, unless momentum = 0.
#include "pipetrain/optim.hpp"

namespace pt {
namespace {

OptimizerDef sgd() {
  OptimizerDef d;
  d.name = "sgd";
  d.doc = "SGD with momentum (train.momentum, train.nesterov) and L2 weight decay";
  d.state_names = [](const OptimConfig& c) {
    return c.momentum != 0.0 ? std::vector<std::string>{"momentum"} : std::vector<std::string>{};
  };
  d.step = [](const OptimStep& s) {
    const OptimConfig& c = s.cfg;
    s.be.sgd_update(s.n, s.w, s.g, s.state.empty() ? nullptr : s.state[0], static_cast<float>(s.lr),
                    static_cast<float>(c.momentum), static_cast<float>(c.weight_decay), c.nesterov, s.grad_scale);
  };
  d.momentum_key = "train.momentum";
  d.momentum = &OptimConfig::momentum;
  return d;
}

}  // namespace

PT_REGISTER_OPTIMIZER(sgd, sgd())

}  // namespace pt
