// Internal to src/schedule: the passes make_schedule runs after a generator (updates,
// versions, messages), the one version rule they and the validator share, and the key that
// matches a send with its receive.
#pragma once
#include <tuple>

#include "pipetrain/schedule_registry.hpp"

namespace pt {

// The weight version action `op` of unit m on stage s reads under the entry's version rule
// (ScheduleDef::versions.read), given the stage's latest version on this worker, the version
// its forward read (backward actions) and the version stage 0's forward of m read (vsync).
int32_t rule_version(const Schedule& S, Op op, int stage, int64_t m, int64_t latest, int32_t fwd, int32_t v0);

// After each stage's last B (or W) of an update group: ALLREDUCE among its replicas (when
// replicated) and OPTIMIZER_STEP; groups with no unit on a worker update as soon as the
// groups before them have.
void insert_updates(Schedule& S);
// Every compute action's version and every optimizer step's produced version.
void assign_versions(Schedule& S);
// RECV before each F (stage > 0) and each B/I (stage < K-1); SEND after each F (stage <
// K-1) and each B/I (stage > 0); peers from the placement (a rank may send to itself).
void lower_comm(Schedule& S);

// The boundary a message crosses (the lower of its two stages) and the message key
// (src, dst, gradient?, boundary, unit).
int message_boundary(const Action& a);
using MessageKey = std::tuple<int, int, int, int, int32_t>;
MessageKey message_key(int rank, const Action& a);

}  // namespace pt
