// The optimizer and learning-rate-schedule registries, the warm-up, and the Optimizer that
// steps a stage's parameters with its entry (sgd.cpp, adamw.cpp; lr_schedules.cpp).
#include "pipetrain/optim.hpp"

#include <algorithm>

#include "pipetrain/error.hpp"
#include "pipetrain/registry.hpp"

namespace pt {

bool register_optimizer(OptimizerDef d) {
  PT_CHECK(d.step && d.state_names && d.momentum, "optimizer '" << d.name << "' registered incomplete");
  return NamedRegistry<OptimizerDef>::instance().add(std::move(d), "optimizer");
}
bool register_lr_schedule(LrScheduleDef d) {
  PT_CHECK(d.rate, "learning-rate schedule '" << d.name << "' registered without a rate");
  return NamedRegistry<LrScheduleDef>::instance().add(std::move(d), "learning-rate schedule");
}
const OptimizerDef* find_optimizer(const std::string& name) { return NamedRegistry<OptimizerDef>::instance().find(name); }
const LrScheduleDef* find_lr_schedule(const std::string& name) {
  return NamedRegistry<LrScheduleDef>::instance().find(name);
}
std::vector<const OptimizerDef*> optimizers() { return NamedRegistry<OptimizerDef>::instance().all(); }
std::vector<const LrScheduleDef*> lr_schedules() { return NamedRegistry<LrScheduleDef>::instance().all(); }

namespace {

double ramped(const OptimConfig& t, int64_t update, int64_t total) {
  double lr = t.lr_schedule->rate(t, update, total);
  if (update < t.warmup_steps) lr *= static_cast<double>(update + 1) / static_cast<double>(t.warmup_steps);
  return lr;
}

}  // namespace

double learning_rate(const OptimConfig& t, int64_t update, int64_t total) {
  const double lr = ramped(t, update, total);
  if (!t.lr_schedule->min_lr_floor || lr >= t.min_lr || update >= t.warmup_steps) return lr;
  for (int64_t u = 0; u < update; ++u)  // inside the warm-up only: at most warmup_steps rates
    if (ramped(t, u, total) >= t.min_lr) return t.min_lr;
  return lr;
}

Optimizer::Optimizer(const OptimConfig& cfg, Backend& be, size_t n, int64_t total_updates)
    : cfg_(cfg), be_(be), n_(n), total_(total_updates) {
  PT_CHECK(cfg.optimizer, "an Optimizer without an optimizer entry");
  names_ = cfg.optimizer->state_names(cfg);
  for (size_t i = 0; i < names_.size(); ++i) {
    state_.emplace_back(be, n);
    state_ptr_.push_back(state_.back().data());
  }
}

void Optimizer::step(float* w, const float* g, float grad_scale, const RangeHook& after) {
  const double lr = current_lr();
  ++updates_;
  if (n_ == 0) return;
  const size_t range = after && be_.device() == Device::cpu ? kRange : n_;
  std::vector<float*> state(state_ptr_.size());
  for (size_t off = 0; off < n_; off += range) {
    const size_t count = std::min(range, n_ - off);
    for (size_t i = 0; i < state.size(); ++i) state[i] = state_ptr_[i] + off;
    cfg_.optimizer->step(OptimStep{be_, cfg_, count, w + off, g + off, state, lr, updates_, grad_scale});
    if (after) after(off, count);
  }
}

std::vector<Buffer*> Optimizer::state() {
  std::vector<Buffer*> s;
  for (Buffer& b : state_)
    if (b.data()) s.push_back(&b);
  return s;
}

std::vector<std::string> Optimizer::state_names() const {
  std::vector<std::string> names;  // one per buffer of state(): none on a stage without parameters
  for (size_t i = 0; i < state_.size(); ++i)
    if (state_[i].data()) names.push_back(names_[i]);
  return names;
}

}  // namespace pt
