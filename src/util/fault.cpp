// Test-only fault injection from PIPETRAIN_FAULT (see include/pipetrain/fault.hpp).
#include "pipetrain/fault.hpp"

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <sstream>

#include "pipetrain/error.hpp"

namespace pt {

const FaultSpec& fault_spec() {
  static const FaultSpec spec = [] {
    FaultSpec f;
    const char* env = std::getenv("PIPETRAIN_FAULT");
    if (!env || !*env) return f;
    std::stringstream ss(env);
    std::string part;
    std::getline(ss, f.kind, ':');
    while (std::getline(ss, part, ':')) {
      auto eq = part.find('=');
      if (eq == std::string::npos) continue;
      const std::string k = part.substr(0, eq), v = part.substr(eq + 1);
      if (k == "rank") f.rank = std::atoi(v.c_str());
      else if (k == "stage") f.stage = std::atoi(v.c_str());
      else if (k == "step") f.step = std::atoll(v.c_str());
      else if (k == "phase") f.phase = v;
      else if (k == "ms") f.ms = std::atoi(v.c_str());
    }
    std::fprintf(stderr, "pipetrain: test fault injection active: %s\n", env);
    return f;
  }();
  return spec;
}

bool fault_matches(const char* kind, int rank, int stage, int64_t step, const char* phase) {
  const FaultSpec& f = fault_spec();
  if (!f.active() || f.kind != kind) return false;
  if (f.rank >= 0 && f.rank != rank) return false;
  if (f.stage >= 0 && f.stage != stage) return false;
  if (f.step >= 0 && step >= 0 && f.step != step) return false;
  if (!f.phase.empty() && f.phase != phase) return false;
  return true;
}

void fault_at_step(int rank, int stage, int64_t step) {
  if (!fault_spec().active()) return;
  if (fault_matches("error", rank, stage, step))
    fail(Exit::internal, "injected fault (PIPETRAIN_FAULT) at step " + std::to_string(step));
  if (fault_matches("kill", rank, stage, step)) {
    std::fprintf(stderr, "rank %d: injected SIGKILL at step %lld\n", rank, static_cast<long long>(step));
    std::fflush(stderr);
    raise(SIGKILL);
  }
  if (fault_matches("slow", rank, stage, step))  // a deterministic slow machine: sleep after each update
    std::this_thread::sleep_for(std::chrono::milliseconds(fault_spec().ms));
  if (fault_matches("hang", rank, stage, step)) {
    std::fprintf(stderr, "rank %d: injected hang at step %lld\n", rank, static_cast<long long>(step));
    std::fflush(stderr);
    for (;;) pause();
  }
}

}  // namespace pt
