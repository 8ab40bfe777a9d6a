// StagePools: a held stage's activation slots, incoming and outgoing gradient buffers and
// their bf16 wire copies, sized from the IR before it runs; every operation checks the
// invariants stated in stage_pools.hpp and names the microbatch when one breaks.
#include "pipetrain/stage_pools.hpp"

#include <algorithm>

#include "pipetrain/error.hpp"

namespace pt {

StagePools::StagePools(const Stage& stage, const Boundary& in, const Boundary& out, bool first, bool last)
    : stage_(stage), in_(in), out_(out), first_(first), last_(last), full_(stage.recompute() == Recompute::full) {}

StagePools::~StagePools() {
  for (int32_t* p : slot_labels_)
    if (p) stage_.backend().release_int(p);
}

void StagePools::prepare(const Schedule& ir, int rank, int stage, int64_t mb_size, int64_t labels_per_sample) {
  for (const SlotState& s : slot_state_)
    PT_CHECK(s.phase == Phase::free && !s.recv.pending() && !s.send.pending(),
             "an IR starts while mb " << s.unit.mb << " still holds an activation slot of stage " << stage);
  for (const GradIn& g : grad_in_)
    PT_CHECK(g.mb < 0 && !g.recv.pending(), "an IR starts while mb " << g.mb << " still holds an incoming gradient buffer");
  for (const Request& q : grad_out_req_) PT_CHECK(!q.pending(), "an IR starts while a gradient send is pending");
  for (int64_t m : rec_mb_) PT_CHECK(m < 0, "an IR starts while mb " << m << " still holds a recompute buffer");
  reserve(ir, rank, stage, mb_size, labels_per_sample);
  reset();
}

void StagePools::reserve(const Schedule& ir, int rank, int stage, int64_t mb_size, int64_t labels_per_sample) {
  const int need = std::max(1, max_in_flight(ir, rank, stage));
  while (size() < need) grow(mb_size, labels_per_sample);
  const int rec = full_ ? 1 + max_between_i_and_w(ir, rank, stage) : 0;
  while (recompute_buffers() < rec) {
    rec_mem_.emplace_back(stage_.backend(), static_cast<size_t>(stage_.slot_floats()));
    rec_slots_.push_back(stage_.carve(rec_mem_.back().data(), nullptr));  // labels: the bound unit's
    rec_mb_.push_back(-1);
    rec_filled_.push_back(0);
  }
}

StagePools::UnitSizes StagePools::unit_sizes(int64_t slot_floats, int64_t train_mb, const Boundary& in, const Boundary& out,
                                              bool first, bool last, int64_t mb_size, int64_t labels_per_sample) {
  UnitSizes u;
  auto wire = [&](bool used, const Boundary& b, bool grad) {
    return used && (grad ? b.grad_bf16 : b.act_bf16) ? b.words(mb_size, grad) : 0;
  };
  u.slot_floats = slot_floats;
  u.labels = last ? train_mb * labels_per_sample : 0;
  u.grad_in_floats = last ? 0 : out.floats(mb_size);
  u.grad_out_floats = first ? 0 : in.floats(mb_size);
  u.wire_act_in = wire(!first, in, false);
  u.wire_act_out = wire(!last, out, false);
  u.wire_grad_in = wire(!last, out, true);
  u.wire_grad_out = wire(!first, in, true);
  return u;
}

// One more unit's worth of every pool (between IRs only), sized by unit_sizes.
void StagePools::grow(int64_t mb_size, int64_t labels_per_sample) {
  Backend& be = stage_.backend();
  const UnitSizes u = unit_sizes(stage_.unit_floats(), stage_.train_mb(), in_, out_, first_, last_, mb_size, labels_per_sample);
  auto n = [](int64_t x) { return static_cast<size_t>(x); };
  slot_mem_.emplace_back(be, n(u.slot_floats));
  slot_labels_.push_back(last_ ? be.alloc_int(n(u.labels)) : nullptr);
  slots_.push_back(stage_.carve_unit(slot_mem_.back().data(), slot_labels_.back()));
  slot_state_.emplace_back();
  if (!last_) grad_in_.push_back(GradIn{Buffer(be, n(u.grad_in_floats)), Buffer(), -1, Request()});
  if (!first_) {
    grad_out_.emplace_back(be, n(u.grad_out_floats));
    grad_out_req_.emplace_back();
    grad_out_mb_.push_back(-1);
  }
  wire_act_in_.emplace_back(be, n(u.wire_act_in));
  wire_act_out_.emplace_back(be, n(u.wire_act_out));
  if (!last_) grad_in_.back().wire = Buffer(be, n(u.wire_grad_in));
  if (!first_) wire_grad_out_.emplace_back(be, n(u.wire_grad_out));
}

// Every buffer free, in index order; the outgoing ring keeps its position but forgets its units.
void StagePools::reset() {
  free_slots_.clear();
  for (int s = 0; s < size(); ++s) {
    slot_state_[static_cast<size_t>(s)].unit = Unit{};
    free_slots_.push_back(s);
  }
  free_grad_in_.clear();
  for (size_t g = 0; g < grad_in_.size(); ++g) free_grad_in_.push_back(static_cast<int>(g));
  std::fill(grad_out_mb_.begin(), grad_out_mb_.end(), -1);
  std::fill(rec_mb_.begin(), rec_mb_.end(), -1);
  cached_ = -1, cached_mb_ = -1;
  pending_grad_out_ = -1;
}

int StagePools::find_rec(int64_t mb) const {
  for (size_t b = 0; b < rec_mb_.size(); ++b)
    if (rec_mb_[b] == mb) return static_cast<int>(b);
  return -1;
}

// Any bind ends the reuse of the last FORWARD's layout (cached_): only the unit that layout
// belongs to, binding for its backward before anything else binds, takes it back filled.
Stage::Slot& StagePools::bind_rec(int64_t mb, const char* use, bool backward) {
  PT_CHECK(find_rec(mb) < 0, use << " of mb " << mb << ": the unit already holds a recompute buffer");
  const bool reuse = backward && cached_ >= 0 && cached_mb_ == mb;
  const int b = reuse ? cached_ : find_rec(-1);
  cached_ = -1, cached_mb_ = -1;
  PT_CHECK(b >= 0, use << " of mb " << mb << ": no free recompute buffer (" << rec_mb_.size() << ", all bound)");
  const Stage::Slot& unit = slots_[static_cast<size_t>(held_slot(mb, use))];
  Stage::Slot& r = rec_slots_[static_cast<size_t>(b)];
  rec_mb_[static_cast<size_t>(b)] = mb;
  rec_filled_[static_cast<size_t>(b)] = reuse;
  r.labels = unit.labels;
  if (!reuse) stage_.backend().copy(r.input, unit.input, static_cast<size_t>(stage_.train_mb() * stage_.in_shape().numel()));
  return r;
}

bool StagePools::must_recompute(int64_t mb) const {
  if (!full_) return false;
  const int b = find_rec(mb);
  PT_CHECK(b >= 0, "mb " << mb << " holds no recompute buffer to recompute into");
  return !rec_filled_[static_cast<size_t>(b)];
}

void StagePools::unbind_rec(int64_t mb) {
  const int b = find_rec(mb);
  if (b < 0) return;
  rec_mb_[static_cast<size_t>(b)] = -1;
  rec_slots_[static_cast<size_t>(b)].labels = nullptr;
}

int StagePools::find_slot(int64_t mb) const {
  for (size_t s = 0; s < slot_state_.size(); ++s)
    if (slot_state_[s].phase != Phase::free && slot_state_[s].unit.mb == mb) return static_cast<int>(s);
  return -1;
}

int StagePools::held_slot(int64_t mb, const char* use) const {
  const int s = find_slot(mb);
  PT_CHECK(s >= 0, use << " of mb " << mb << ": the unit holds no activation slot");
  return s;
}

Stage::Slot& StagePools::claim(int64_t mb) {
  PT_CHECK(!free_slots_.empty(), "no free activation slot for mb " << mb);
  PT_CHECK(find_slot(mb) < 0, "mb " << mb << " claims a second activation slot");
  const int s = free_slots_.front();
  free_slots_.pop_front();
  SlotState& ss = slot_state_[static_cast<size_t>(s)];
  PT_CHECK(ss.phase == Phase::free, "mb " << mb << " claims activation slot " << s << ", still held by mb " << ss.unit.mb);
  ss.unit = Unit{mb, -1, 0.0};
  ss.phase = Phase::claimed;
  return slots_[static_cast<size_t>(s)];
}

MessageBuffer StagePools::act_in(int64_t mb) {
  const size_t s = static_cast<size_t>(held_slot(mb, "RECV_ACT"));
  PT_CHECK(slot_state_[s].phase == Phase::claimed, "RECV_ACT of mb " << mb << " into a slot already forwarded");
  return {slots_[s].input, in_.act_bf16 ? &wire_act_in_[s] : nullptr, &slot_state_[s].recv};
}

Stage::Slot& StagePools::forward_slot(int64_t mb) {
  const size_t s = static_cast<size_t>(held_slot(mb, "FORWARD"));
  PT_CHECK(slot_state_[s].phase == Phase::claimed, "FORWARD of mb " << mb << " a second time");
  PT_CHECK(!slot_state_[s].recv.pending(), "FORWARD of mb " << mb << " before its activation arrived");
  return slots_[s];
}

Stage::Slot& StagePools::compute_slot(int64_t mb) {
  Stage::Slot& unit = forward_slot(mb);
  return full_ ? bind_rec(mb, "FORWARD", false) : unit;
}

void StagePools::forwarded(int64_t mb, int64_t fwd_version, double loss) {
  const int s = held_slot(mb, "FORWARD");
  SlotState& ss = slot_state_[static_cast<size_t>(s)];
  PT_CHECK(ss.phase == Phase::claimed, "FORWARD of mb " << mb << " a second time");
  if (full_) {  // the output stays for the SEND_ACT; the layout goes back to the pool
    const int b = find_rec(mb);
    PT_CHECK(b >= 0, "FORWARD of mb " << mb << " finished without the recompute buffer it computes in");
    Stage::Slot& unit = slots_[static_cast<size_t>(s)];
    stage_.backend().copy(stage_.output(unit), stage_.output(rec_slots_[static_cast<size_t>(b)]),
                          static_cast<size_t>(stage_.train_mb() * stage_.out_shape().numel()));
    unbind_rec(mb);
    cached_ = b, cached_mb_ = mb;  // free, but its layout is this unit's until something else binds
  }
  ss.phase = Phase::forwarded;
  ss.unit.fwd_version = fwd_version;
  ss.unit.loss = loss;
}

MessageBuffer StagePools::act_out(int64_t mb) {
  const size_t s = static_cast<size_t>(held_slot(mb, "SEND_ACT"));
  PT_CHECK(slot_state_[s].phase == Phase::forwarded, "SEND_ACT of mb " << mb << " from a slot not (or no longer) forwarded");
  PT_CHECK(!slot_state_[s].send.pending(), "SEND_ACT of mb " << mb << " while its previous send is pending");
  return {stage_.output(slots_[s]), out_.act_bf16 ? &wire_act_out_[s] : nullptr, &slot_state_[s].send};
}

Stage::Slot& StagePools::backward_slot(int64_t mb, Half half) {
  const char* op = half == Half::fused ? "BACKWARD" : "BACKWARD_INPUT";
  SlotState& ss = slot_state_[static_cast<size_t>(held_slot(mb, op))];
  PT_CHECK(ss.phase == Phase::forwarded, op << " of mb " << mb << " on a slot that is not forwarded (or already ran its backward)");
  Stage::Slot& unit = slots_[static_cast<size_t>(&ss - slot_state_.data())];
  Stage::Slot& slot = full_ ? bind_rec(mb, op, true) : unit;
  ss.phase = half == Half::fused ? Phase::finished : Phase::kept;
  return slot;
}

Stage::Slot& StagePools::weight_slot(int64_t mb) {
  const int s = find_slot(mb);
  PT_CHECK(s >= 0 && slot_state_[static_cast<size_t>(s)].phase == Phase::kept,
           "BACKWARD_WEIGHT of mb " << mb << " without its kept output gradients (no BACKWARD_INPUT kept its slot)");
  slot_state_[static_cast<size_t>(s)].phase = Phase::finished;
  if (!full_) return slots_[static_cast<size_t>(s)];
  const int b = find_rec(mb);
  PT_CHECK(b >= 0, "BACKWARD_WEIGHT of mb " << mb << " without the recompute buffer its BACKWARD_INPUT kept");
  return rec_slots_[static_cast<size_t>(b)];
}

const StagePools::Unit& StagePools::unit(int64_t mb) const { return slot_state_[static_cast<size_t>(held_slot(mb, "unit"))].unit; }

Request& StagePools::act_send_req(int64_t mb) { return slot_state_[static_cast<size_t>(held_slot(mb, "SEND_ACT"))].send; }

void StagePools::release(int64_t mb) {
  const int s = held_slot(mb, "release");
  SlotState& ss = slot_state_[static_cast<size_t>(s)];
  PT_CHECK(ss.phase != Phase::kept, "activation slot of mb " << mb << " released while its BACKWARD_WEIGHT still needs it");
  PT_CHECK(ss.phase == Phase::finished, "activation slot of mb " << mb << " released before its backward ran");
  PT_CHECK(!ss.send.pending(), "activation slot of mb " << mb << " released while its SEND_ACT is pending");
  PT_CHECK(!ss.recv.pending(), "activation slot of mb " << mb << " released while its RECV_ACT is pending");
  unbind_rec(mb);
  ss.phase = Phase::free;
  ss.unit = Unit{};
  free_slots_.push_back(s);
}

Stage::Slot& StagePools::restore(const Unit& u, const std::vector<float>& contents) {
  PT_CHECK(!free_slots_.empty(), "no free slot to restore mb " << u.mb);
  PT_CHECK(contents.size() == static_cast<size_t>(stage_.unit_floats()),
           "restored slot of mb " << u.mb << ": " << contents.size() << " floats, the unit slot has " << stage_.unit_floats());
  Stage::Slot& slot = claim(u.mb);
  const size_t s = static_cast<size_t>(find_slot(u.mb));
  stage_.backend().from_host(slot_mem_[s].data(), contents.data(), contents.size());
  slot_state_[s].unit = u;
  slot_state_[s].phase = Phase::forwarded;
  return slot;
}

std::vector<StagePools::Unit> StagePools::forwarded_units() const {
  std::vector<Unit> out;
  for (const SlotState& ss : slot_state_)
    if (ss.phase != Phase::free && ss.phase != Phase::claimed) out.push_back(ss.unit);  // only posted ahead: not state
  std::sort(out.begin(), out.end(), [](const Unit& a, const Unit& b) { return a.mb < b.mb; });
  return out;
}

std::vector<float> StagePools::host_contents(int64_t mb) const {
  PT_CHECK(find_rec(mb) < 0, "capture of mb " << mb << " while it holds a recompute buffer (a cut inside its backward)");
  std::vector<float> v(static_cast<size_t>(stage_.unit_floats()));
  stage_.backend().to_host(v.data(), slot_mem_[static_cast<size_t>(held_slot(mb, "capture"))].data(), v.size());
  return v;
}

const float* StagePools::output_of(int64_t mb) const { return stage_.output(slots_[static_cast<size_t>(held_slot(mb, "output"))]); }

Request* StagePools::posted_act_recv(int64_t mb) {
  const int s = find_slot(mb);
  return s >= 0 && slot_state_[static_cast<size_t>(s)].recv.pending() ? &slot_state_[static_cast<size_t>(s)].recv : nullptr;
}

int StagePools::find_grad_in(int64_t mb) const {
  for (size_t g = 0; g < grad_in_.size(); ++g)
    if (grad_in_[g].mb == mb) return static_cast<int>(g);
  return -1;
}

MessageBuffer StagePools::claim_grad_in(int64_t mb) {
  PT_CHECK(!free_grad_in_.empty(), "no free incoming gradient buffer for mb " << mb);
  PT_CHECK(find_grad_in(mb) < 0, "mb " << mb << " claims a second incoming gradient buffer");
  const int g = free_grad_in_.front();
  free_grad_in_.pop_front();
  grad_in_[static_cast<size_t>(g)].mb = mb;
  return grad_in(mb);
}

MessageBuffer StagePools::grad_in(int64_t mb) {
  const int g = find_grad_in(mb);
  PT_CHECK(g >= 0, "mb " << mb << " holds no incoming gradient buffer");
  GradIn& x = grad_in_[static_cast<size_t>(g)];
  return {x.buf.data(), out_.grad_bf16 ? &x.wire : nullptr, &x.recv};
}

void StagePools::release_grad_in(int64_t mb) {
  const int g = find_grad_in(mb);
  PT_CHECK(g >= 0, "mb " << mb << " releases an incoming gradient buffer it does not hold");
  GradIn& x = grad_in_[static_cast<size_t>(g)];
  PT_CHECK(!x.recv.pending(), "incoming gradient buffer of mb " << mb << " released before its RECV_GRAD completed");
  x.mb = -1;
  free_grad_in_.push_back(g);
}

Request& StagePools::next_grad_out_req() {
  PT_CHECK(!grad_out_.empty(), "the first stage sends no gradients");
  return grad_out_req_[static_cast<size_t>(grad_out_next_)];
}

float* StagePools::claim_grad_out(int64_t mb) {
  const size_t b = static_cast<size_t>(grad_out_next_);
  PT_CHECK(b < grad_out_.size(), "the first stage sends no gradients (mb " << mb << ")");
  PT_CHECK(pending_grad_out_ < 0, "backward of mb " << mb << " while the input gradient of mb "
                                      << grad_out_mb_[static_cast<size_t>(pending_grad_out_)] << " was never sent");
  PT_CHECK(!grad_out_req_[b].pending(), "outgoing gradient buffer " << b << " reused for mb " << mb << " while its send is pending");
  pending_grad_out_ = static_cast<int>(b);
  grad_out_mb_[b] = mb;
  grad_out_next_ = (grad_out_next_ + 1) % static_cast<int>(grad_out_.size());
  return grad_out_[b].data();
}

MessageBuffer StagePools::grad_out_to_send(int64_t mb) {
  PT_CHECK(pending_grad_out_ >= 0, "SEND_GRAD without a backward (mb " << mb << ")");
  const size_t b = static_cast<size_t>(pending_grad_out_);
  PT_CHECK(grad_out_mb_[b] == mb, "SEND_GRAD of mb " << mb << " but the last backward was of mb " << grad_out_mb_[b]);
  pending_grad_out_ = -1;
  return {grad_out_[b].data(), in_.grad_bf16 ? &wire_grad_out_[b] : nullptr, &grad_out_req_[b]};
}

const float* StagePools::grad_out_of(int64_t mb) const {
  for (size_t b = 0; b < grad_out_.size(); ++b)
    if (grad_out_mb_[b] == mb) return grad_out_[b].data();
  return nullptr;
}

int64_t StagePools::activation_bytes() const {
  return static_cast<int64_t>(slot_mem_.size()) * stage_.unit_floats() * 4 + recompute_bytes();
}

int64_t StagePools::recompute_bytes() const { return static_cast<int64_t>(rec_mem_.size()) * stage_.slot_floats() * 4; }

int64_t StagePools::buffer_bytes() const {
  int64_t b = 0;
  for (const GradIn& g : grad_in_) b += static_cast<int64_t>(g.buf.bytes() + g.wire.bytes());
  for (const Buffer& x : grad_out_) b += static_cast<int64_t>(x.bytes());
  for (auto* w : {&wire_act_in_, &wire_act_out_, &wire_grad_out_})
    for (const Buffer& x : *w) b += static_cast<int64_t>(x.bytes());
  return b;
}

}  // namespace pt
