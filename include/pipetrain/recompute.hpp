// Activation recomputation (parallel.recompute; docs/ARCHITECTURE.md "Recomputation"): what
// a stage keeps per unit in flight between its forward and its backward, and what it
// recomputes instead. An enumeration the deck, the layers (their saved extras), the Stage
// (its slot layouts), the pools, checkpoints, the profiler and the simulator name; its own
// small header so that none of them needs another's.
//  - none: every layer output and saved extra stays from F until B (or W).
//  - selective: layers that support it (transformer_block, attention: the attention
//    probabilities and the MLP's hidden activations) keep less and recompute the rest in
//    their backward with the same kernels; every other layer keeps what `none` keeps.
//  - full: a unit keeps only the stage's input and output; B (or I) reruns the stage's
//    forward on the unit's weight version into a recompute buffer, then runs the backward.
#pragma once
#include <cstdint>

#include "pipetrain/enum_names.hpp"

namespace pt {

enum class Recompute : uint8_t { none, selective, full };
template <>
struct EnumNames<Recompute> {
  static constexpr const char* names[] = {"none", "selective", "full"};
};

}  // namespace pt
