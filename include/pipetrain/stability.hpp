// Delayed-gradient stability of the asynchronous schedules (bench/README.md, "Time to
// accuracy"): how many updates old the weights behind a gradient can be, and the words for
// the non-finite message and the check/plan warning.
#pragma once
#include <string>

namespace pt {

struct OptimConfig;  // optim.hpp

// Updates by which the weights a gradient was computed on can lag the weights it is applied
// to: pipedream, pipedream-vsync and pipedream-nostash K-1 (stage 0 of K stages), 2bw 1
// (minibatch t reads W(t-1)), flush schedules 0. stages <= 0: not known yet (split "auto").
int gradient_staleness(const std::string& schedule, int stages);

// Appended to a non-finite gradient message: the likely cause and the remedy when the
// schedule applies stale gradients ("" when it does not).
std::string nonfinite_cause(const std::string& schedule, int stages, const OptimConfig& train);

// One warning line for `check` and `plan` when stale gradients meet momentum >= 0.9 (SGD
// momentum or AdamW beta1); "" otherwise.
std::string async_momentum_warning(const std::string& schedule, int stages, const OptimConfig& train);

}  // namespace pt
