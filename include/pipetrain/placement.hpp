// Where stages live: the placement of pipeline stages on rank groups, an enumeration the
// deck (parallel.placement), plan files and checkpoints name. Its own small header so that
// the deck need not include the schedule IR.
#pragma once
#include <cstdint>
#include <string>

#include "pipetrain/enum_names.hpp"

namespace pt {

// Contiguous: rank group g holds stage g. Looped (interleaved): group g holds stages g, g+p,
// g+2p, ... V: group g holds stages g and 2p-1-g.
enum class Placement : uint8_t { contiguous, looped, v };
template <>
struct EnumNames<Placement> {
  static constexpr const char* names[] = {"contiguous", "looped", "v"};
};
const char* placement_name(Placement p);
Placement placement_from_name(const std::string& name);  // throws bad_input naming the choices
// Whether `stages` stages spread over `groups` rank groups (entries of parallel.replicas)
// under the placement: contiguous one per group, V two per group, looped the same number
// (>= 1) per group. The one rule the deck's checks, Layout::from_deck and make use.
bool placement_fits(Placement p, int stages, int groups);

}  // namespace pt
