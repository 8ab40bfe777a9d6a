// Optimizers and learning-rate schedules: registry entries (NamedRegistry, as layers and
// schedules), one .cpp each in src/optim (sgd.cpp, adamw.cpp; lr_schedules.cpp). The deck's
// train.optimizer and train.lr_schedule name one (their choices are the registries' names) and
// resolve to the entry once; an Optimizer steps a stage's flat parameter buffer with it.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "pipetrain/backend.hpp"

namespace pt {

struct OptimizerDef;
struct LrScheduleDef;

// What an optimizer and its schedule read (the deck's [train] keys of the same names; the
// deck builds it: optim_config in deck.hpp).
struct OptimConfig {
  const OptimizerDef* optimizer = nullptr;
  const LrScheduleDef* lr_schedule = nullptr;
  double lr = 0, momentum = 0, weight_decay = 0, beta1 = 0, beta2 = 0, eps = 0;
  bool nesterov = false;
  int64_t warmup_steps = 0, step_size = 0;
  double gamma = 0, min_lr = 0;
};

// One update of n parameters w by gradients g * grad_scale at learning rate lr; `state` holds
// the entry's state buffers (state_names' order), `update` counts this update from 1. A step
// must be elementwise: Optimizer::step may apply it to consecutive ranges of the buffers.
struct OptimStep {
  Backend& be;
  const OptimConfig& cfg;
  size_t n;
  float* w;
  const float* g;
  const std::vector<float*>& state;
  double lr;
  int64_t update;
  float grad_scale;
};

struct OptimizerDef {
  std::string name;  // train.optimizer
  std::string doc;
  // Its state buffers (one float per parameter each) by checkpoint name, for this config.
  std::function<std::vector<std::string>(const OptimConfig&)> state_names;
  std::function<void(const OptimStep&)> step;
  // Its momentum-like coefficient and the deck key that sets it (the delayed-gradient
  // stability words, stability.hpp).
  std::string momentum_key;
  double OptimConfig::*momentum = nullptr;
};

struct LrScheduleDef {
  std::string name;  // train.lr_schedule
  std::string doc;
  // The learning rate of update t (0-based) out of `total`, before the linear warm-up.
  std::function<double(const OptimConfig&, int64_t update, int64_t total)> rate;
  // train.min_lr is a floor the rate never falls below once it has reached it, the warm-up
  // included (a warm-up longer than the run: learning_rate()).
  bool min_lr_floor = false;
};

bool register_optimizer(OptimizerDef d);
bool register_lr_schedule(LrScheduleDef d);
#define PT_REGISTER_OPTIMIZER(id, ...) \
  namespace { [[maybe_unused]] const bool pt_optimizer_registered_##id = ::pt::register_optimizer(__VA_ARGS__); }
#define PT_REGISTER_LR_SCHEDULE(id, ...) \
  namespace { [[maybe_unused]] const bool pt_lr_schedule_registered_##id = ::pt::register_lr_schedule(__VA_ARGS__); }
const OptimizerDef* find_optimizer(const std::string& name);      // null when unknown
const LrScheduleDef* find_lr_schedule(const std::string& name);  // null when unknown
std::vector<const OptimizerDef*> optimizers();  // by name
std::vector<const LrScheduleDef*> lr_schedules();

// Learning rate of update t (0-based) out of `total` updates: the schedule's, times
// (t + 1) / warmup_steps while t < warmup_steps. A schedule with a min_lr floor (cosine)
// never goes below train.min_lr again once the ramped rate has reached it: with a warm-up
// longer than the run the ramp would otherwise carry the decayed rate under the floor.
double learning_rate(const OptimConfig& c, int64_t update, int64_t total);

class Optimizer {
 public:
  Optimizer(const OptimConfig& cfg, Backend& be, size_t n, int64_t total_updates);
  // w -= update(g * grad_scale); advances the update counter. With `after`, the update runs
  // over consecutive ranges [offset, offset + count) (on the host of kRange parameters, which
  // stay in the L2 cache until after(offset, count) reads them; on a GPU one range) and calls
  // after each one: the executor clears that range of the gradients there and rounds it into
  // the bf16 compute copy (WeightStore::updated_range) while both are in cache. The values are
  // the same either way.
  using RangeHook = std::function<void(size_t offset, size_t count)>;
  static constexpr size_t kRange = 16384;
  void step(float* w, const float* g, float grad_scale, const RangeHook& after = {});
  int64_t updates() const { return updates_; }
  void set_updates(int64_t u) { updates_ = u; }
  double current_lr() const { return learning_rate(cfg_, updates_, total_); }
  const OptimConfig& config() const { return cfg_; }
  // Optimizer state buffers (momentum; or Adam m and v), for checkpoints, and their names
  // (the same count: both empty without parameters or SGD momentum).
  std::vector<Buffer*> state();
  std::vector<std::string> state_names() const;
  size_t size() const { return n_; }

 private:
  OptimConfig cfg_;
  Backend& be_;
  size_t n_;
  int64_t total_, updates_ = 0;
  std::vector<std::string> names_;  // the entry's state_names(cfg_)
  std::vector<Buffer> state_;       // one per name (no memory when n = 0)
  std::vector<float*> state_ptr_;   // their data, for OptimStep
};

}  // namespace pt
