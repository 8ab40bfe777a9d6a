// The memory model (memory_model.hpp): a stage's bytes from the engine's own sizing functions
// (or a profile's per-layer bytes), each buffer rounded as the host backend keeps it resident,
// a rank's from its stages and its rank terms, and the IR length units in flight are read from.
#include "pipetrain/memory_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

// A float buffer from the backend (huge pages from 2 MiB), and an allocation that never asks
// for them (labels, std::vector).
int64_t R(int64_t bytes) { return bytes > 0 ? host_resident_bytes(bytes) : 0; }
int64_t Rv(int64_t bytes) { return bytes > 0 ? host_resident_bytes(bytes, false) : 0; }

constexpr const char* kNames[kMemCategories] = {"master_weights", "gradients",  "optimizer", "weight_copies",
                                                "activations",    "output_grads", "messages", "evaluation",
                                                "workspace",      "snapshots",  "dataset",   "runtime"};
constexpr const char* kWords[kMemCategories] = {
    "fp32 master weights and running state",
    "accumulated gradients",
    "optimizer state",
    "other weight versions and bf16 compute copies",
    "activations (slots x units in flight)",
    "output gradients kept for the split backward",
    "message buffers and sample staging",
    "evaluation buffers",
    "scratch and workspace (layers and kernels)",
    "host copies of weights and optimizer state (checkpoints, weights.h5)",
    "the dataset in memory",
    "the runtime's own (libraries, MPI, allocator; measured at start-up)"};

// The optimizer's state buffers (states x params floats each; or, from per-layer bytes, as
// given), on the backend or as host copies.
int64_t optimizer_bytes(const StageFootprint& f, bool host) {
  if (f.optimizer_states > 0) return f.params > 0 ? f.optimizer_states * (host ? Rv(f.params * 4) : R(f.params * 4)) : 0;
  return host ? Rv(f.optimizer_floats * 4) : R(f.optimizer_floats * 4);
}

}  // namespace

const char* memory_category_name(MemCategory c) { return kNames[static_cast<int>(c)]; }
const char* memory_category_words(MemCategory c) { return kWords[static_cast<int>(c)]; }

int64_t RankMemory::total() const {
  int64_t t = 0;
  for (int64_t b : bytes) t += b;
  return t;
}

MemCategory RankMemory::largest() const {
  size_t best = 0;
  for (size_t i = 1; i < bytes.size(); ++i)
    if (bytes[i] > bytes[best]) best = i;
  return static_cast<MemCategory>(best);
}

void RankMemory::add(const RankMemory& o) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] += o.bytes[i];
  in_flight = std::max(in_flight, o.in_flight);
  versions = std::max(versions, o.versions);
}

nlohmann::json memory_json(const RankMemory& m) {
  nlohmann::json cat = nlohmann::json::object();
  for (int i = 0; i < kMemCategories; ++i) cat[kNames[i]] = m.bytes[static_cast<size_t>(i)];
  return {{"rank", m.rank}, {"total_bytes", m.total()}, {"max_in_flight", m.in_flight}, {"weight_versions", m.versions},
          {"categories", cat}};
}

std::string bytes_text(double b) {
  char s[32];
  if (b >= 1e9) std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof s, "%.0f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(s, sizeof s, "%.1f kB", b / 1e3);
  else std::snprintf(s, sizeof s, "%.0f B", b);
  return s;
}

// The stage's own buffers: weights (WeightStore::sizes), gradients and state (StageRuntime),
// optimizer state, the units' slots and message buffers (StagePools::unit_sizes), scratch,
// workspace and evaluation buffers (Stage::geometry, StageRuntime::eval_sizes). Scratch and
// workspace are sized for max(train_mb, eval_mb): what a train_mb buffer would take is
// workspace, the rest is the evaluation's.
RankMemory stage_memory(const StageFootprint& f, int in_flight, int versions, int recompute_buffers) {
  using C = MemCategory;
  RankMemory m;
  const int n = std::max(1, in_flight);
  m.in_flight = n;
  m.versions = std::max(1, versions);
  const WeightStore::Sizes w = WeightStore::sizes(static_cast<size_t>(f.params), f.bf16, m.versions);
  m[C::master] = R(w.latest * 4) + R(f.state * 4);
  m[C::weight_copies] = w.others * R(w.per_other * 4) + R(w.compute * 4) + R(w.compute_packed * 4);
  // oneDNN's own allocations: one per bf16 array a version is read from (the compute copy's
  // and each stash's)
  if (kept_weight_layouts()) m[C::weight_copies] += m.versions * Rv(f.kept_weight_values * 2);
  m[C::gradients] = R((f.params + 1) * 4);
  m[C::optimizer] = optimizer_bytes(f, false);
  const StagePools::UnitSizes& u = f.unit;
  const int64_t slot = R(u.slot_floats * 4), kept = f.geo.slot_kept_floats * 4;
  m[C::activations] = n * (slot - kept + Rv(u.labels * 4)) + recompute_buffers * R(f.geo.recompute_floats * 4);
  m[C::output_grads] = n * kept;
  m[C::messages] = n * (R(u.grad_in_floats * 4) + R(u.grad_out_floats * 4) + R(u.wire_act_in * 4) + R(u.wire_act_out * 4) +
                        R(u.wire_grad_in * 4) + R(u.wire_grad_out * 4));
  const int64_t scratch = R(f.geo.scratch_floats * 4), scratch_train = std::min(scratch, R(f.train_mb * f.geo.max_numel * 4));
  const int64_t work = R(f.geo.work_floats * 4), work_train = std::min(work, R(f.train_mb * f.geo.work_max * 4));
  m[C::workspace] = 2 * scratch_train + work_train;
  m[C::evaluation] = 2 * (scratch - scratch_train) + (work - work_train) + R(f.geo.eval_aux_floats * 4) +
                     R(f.geo.eval_loss_floats * 4) + 2 * R(f.eval.in * 4) + 2 * R(f.eval.out * 4) + Rv(f.eval.labels * 4);
  return m;
}

// Snapshots: a checkpoint copies every held stage's latest weights and optimizer state
// (replica 0, which writes them) and running state (every replica) to host vectors (and,
// when it may cut a segment, each unit in flight's slot), and the writer reads each dataset
// of the file back into a buffer of its size (the largest: a stage's parameters on replica
// 0, its running state on the others, or a unit's slot); --resume holds the weights and optimizer state on
// every replica until its first segment ran. At the end the reporter gathers every
// stage's weights (its own straight from its stores, the others one stage at a time) and
// replica 0 of every other stage copies its stages' weights one at a time to send them. The
// two never overlap: the larger counts.
void add_rank_terms(RankMemory& m, const std::vector<const StageFootprint*>& held, const MemoryShared& s, RankRole role) {
  using C = MemCategory;
  m[C::dataset] += s.dataset;
  m[C::runtime] += s.base;
  int64_t widest = 1, in_numel = 1, kernel = 0, pad = 0, scratch = 0, ckpt = 0, own = 0, readback = 0, held_params = 0;
  for (const StageFootprint* f : held) {
    widest = std::max({widest, f->train_mb, f->eval_mb});
    in_numel = std::max(in_numel, f->in_numel);
    kernel += f->kernel_work;
    pad = std::max(pad, f->kernel_scratchpad);
    scratch = std::max(scratch, f->kernel_scratch);
    const bool copies = role.replica0 || s.resuming;
    ckpt += (copies ? Rv(f->params * 4) + optimizer_bytes(*f, true) : 0) + Rv(f->state * 4);
    if (s.mid_segment && role.asynchronous) ckpt += m.in_flight * Rv(f->unit.slot_floats * 4);
    own = std::max(own, Rv(f->params * 4));  // replica 0's end-of-run copy
    // the writer's read-back buffer: the file's largest dataset
    int64_t largest = copies ? Rv(f->params * 4) : Rv(f->state * 4);
    if (s.mid_segment && role.asynchronous) largest = std::max(largest, Rv(f->unit.slot_floats * 4));
    readback = std::max(readback, largest);
    held_params += f->params;
  }
  m[C::messages] += Rv(Executor::staging_bytes(widest, in_numel, s.label_count));
  m[C::workspace] += kernel + R(pad) + Rv(scratch);
  int64_t outputs = 0;
  const int64_t remote = s.largest_stage_params > 0 ? s.largest_stage_params : std::max<int64_t>(0, s.model_params - held_params);
  // the reporter's own parts and a remote stage's at once; then (tensor rank 0) the whole
  // tensors replacing its parts layer by layer, beside one split layer's gathered parts
  if (role.reporter) outputs = std::max(Rv(s.model_params * 4) + Rv(remote * 4), Rv(s.tensor_whole * 4));
  else if (role.replica0) outputs = own;
  // a checkpoint and the end-of-run gather come after the reductions: they reuse the room
  // the allreduce's scratch took
  const int64_t snapshot = std::max(s.checkpoints ? ckpt + readback : 0, outputs);
  m[C::messages] += role.allreduce_bytes;
  m[C::snapshots] += std::max<int64_t>(0, snapshot - role.allreduce_bytes);
}

int64_t replica_allreduce_bytes(const StageFootprint& f) { return Rv((f.params + 1) * 4); }

int64_t memory_ir_steps(const ScheduleDef& def, const Layout& layout, int microbatches, int64_t longest_segment) {
  const int64_t stride = std::max<int64_t>(1, def.boundary_stride(layout));
  const int64_t units = std::max(1, def.units_per_minibatch(microbatches));
  const int64_t fill = def.flush ? 2 : 2 * ((layout.ranks() + units - 1) / units) + 4;
  const int64_t cap = (fill + stride - 1) / stride * stride;
  return std::max<int64_t>(1, std::min(longest_segment, cap));
}

MemoryModel::MemoryModel(std::shared_ptr<const FootprintSource> src, const Layout& layout, const Schedule& ir,
                         int64_t unit_samples, const MemoryShared& shared, const std::vector<Recompute>& recompute)
    : layout_(layout), shared_(shared) {
  PT_CHECK(src->layers() == layout.end_layer(layout.stages() - 1), "memory model: layout of " << layout.end_layer(layout.stages() - 1)
                                                                                              << " layers for a model of " << src->layers());
  const bool split = ir.def && ir.def->split_backward;
  flush_ = !ir.def || ir.def->flush;
  auto mode = [&](int s) { return recompute.empty() ? Recompute::none : recompute.at(static_cast<size_t>(s)); };
  for (int s = 0; s < layout.stages(); ++s)
    stages_.push_back(src->stage(layout.first_layer(s), layout.end_layer(s), unit_samples, split, mode(s)));
  held_.resize(static_cast<size_t>(layout.ranks()));
  for (int r = 0; r < layout.ranks(); ++r)
    for (int s : layout.stages_of_rank(r)) {
      const int rec = mode(s) == Recompute::full ? 1 + max_between_i_and_w(ir, r, s) : 0;
      held_[static_cast<size_t>(r)].push_back({max_in_flight(ir, r, s), max_versions_held(ir, r, s), rec});
    }
}

RankMemory MemoryModel::rank(int r) const {
  RankMemory m;
  m.rank = r;
  std::vector<const StageFootprint*> held;
  const std::vector<int> stages = layout_.stages_of_rank(r);
  for (size_t i = 0; i < stages.size(); ++i) {
    const Held& h = held_[static_cast<size_t>(r)][i];
    const StageFootprint& f = stages_[static_cast<size_t>(stages[i])];
    m.add(stage_memory(f, h.in_flight, h.versions, h.recompute_buffers));
    held.push_back(&f);
  }
  RankRole role;
  role.reporter = r == layout_.rank_of(layout_.stages() - 1, 0);
  role.replica0 = layout_.replica_of(r) == 0;
  role.asynchronous = !flush_;
  for (size_t i = 0; i < stages.size(); ++i)
    if (layout_.replicas_of(stages[i]) > 1) role.allreduce_bytes += replica_allreduce_bytes(*held[i]);
  add_rank_terms(m, held, shared_, role);
  return m;
}

std::vector<RankMemory> MemoryModel::ranks() const {
  std::vector<RankMemory> out;
  for (int r = 0; r < layout_.ranks(); ++r) out.push_back(rank(r));
  return out;
}

}  // namespace pt
