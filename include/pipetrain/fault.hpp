// Test-only fault injection. Enabled only by the environment variable PIPETRAIN_FAULT,
// e.g. "error:rank=1:step=5", "hang:rank=1:step=3", "kill:rank=0:step=4",
// "nan:stage=1:step=2", "ckpt-kill:rank=1:phase=manifest", "slow:ms=20" (every rank sleeps
// 20 ms after each update: time triggers tested on a run of known minimum length),
// "wait-signal:rank=0:step=20" (rank 0 waits at boundary 20 until SIGUSR1/SIGTERM arrives, at
// most 120 s: a signal test that cannot lose the race against a fast run). Hook points call
// fault_at_step() (and the trainer, for wait-signal).
#pragma once
#include <cstdint>
#include <string>

namespace pt {

struct FaultSpec {
  std::string kind;          // error | hang | kill | slow | wait-signal | nan | ckpt-kill | ckpt-io
  int rank = -1, stage = -1;  // -1: any
  int64_t step = -1;         // -1: any
  std::string phase;         // checkpoint phase for ckpt-*
  int ms = 0;                // slow: milliseconds per update
  bool active() const { return !kind.empty(); }
};

const FaultSpec& fault_spec();  // parsed once from PIPETRAIN_FAULT
// True when the configured fault of `kind` applies here (rank/stage/step/phase match).
bool fault_matches(const char* kind, int rank, int stage, int64_t step, const char* phase = "");
// Act on error/hang/kill faults at a step boundary (no-op unless configured).
void fault_at_step(int rank, int stage, int64_t step);

}  // namespace pt
