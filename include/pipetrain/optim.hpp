// Optimizers over a stage's flat parameter buffer (SGD with momentum/Nesterov, AdamW),
// with weight decay and the learning-rate schedules (constant, step, cosine; linear warm-up).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/deck.hpp"

namespace pt {

// Learning rate of update t (0-based) out of `total` updates.
double learning_rate(const Deck::Train& t, int64_t update, int64_t total);

class Optimizer {
 public:
  Optimizer(const Deck::Train& cfg, Backend& be, size_t n, int64_t total_updates);
  // w -= update(g * grad_scale); advances the update counter.
  void step(float* w, const float* g, float grad_scale);
  int64_t updates() const { return updates_; }
  void set_updates(int64_t u) { updates_ = u; }
  double current_lr() const { return learning_rate(cfg_, updates_, total_); }
  const Deck::Train& config() const { return cfg_; }
  // Optimizer state buffers (momentum; or Adam m and v), for checkpoints, and their names
  // (the same count: both empty without parameters or SGD momentum).
  std::vector<Buffer*> state();
  std::vector<std::string> state_names() const;
  size_t size() const { return n_; }

 private:
  Deck::Train cfg_;
  Backend& be_;
  size_t n_;
  int64_t total_, updates_ = 0;
  Buffer s1_, s2_;
};

}  // namespace pt
