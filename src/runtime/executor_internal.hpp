// Internal to the executor's files: the state of one train() call and the message tags.
#pragma once
#include <map>

#include "pipetrain/runtime.hpp"

namespace pt {

// Tag kinds: activation, gradient, evaluation activation.
enum TagKind { kTagAct = 0, kTagGrad = 1, kTagEval = 2, kTagKinds = 3 };

struct Executor::Step {
  Step(const Schedule& s, int rank, PollHook p) : ir(s), poll(p) {
    const auto& acts = ir.workers[static_cast<size_t>(rank)];
    for (size_t k = 0; k < acts.size(); ++k)
      if (acts[k].op == Op::optimizer_step) last_update[acts[k].version] = k;
  }
  const Schedule& ir;
  size_t i = 0;          // the action running
  bool stopped = false;  // a checkpoint_and_stop cut ended the IR
  int64_t bytes = 0;     // bytes the running action moved (timeline)
  PollHook poll;
  // Index of the rank's last OPTIMIZER_STEP producing `version` (a rank holding several
  // stages updates each; the boundary is after the last).
  size_t last_update_of(int32_t version) const { return last_update.at(version); }
  std::map<int32_t, size_t> last_update;
};

}  // namespace pt
