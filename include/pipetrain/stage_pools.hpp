// StagePools: the per-unit buffers of one held stage and the only code that touches them.
// A unit (microbatch) in flight on the stage holds an activation slot (Stage::carve_unit:
// under parallel.recompute none and selective the whole layout, i.e. the stage input, every
// layer output, saved extras and, for a split backward, the output gradients kept for W;
// under full only the stage's input and output) with its labels (last stage) and its state;
// under full also a recompute buffer (Stage::carve: the whole layout) while its FORWARD or B
// runs, or from its I until its W; an incoming-gradient buffer
// from its RECV_GRAD posted ahead until its B or I; an outgoing-gradient buffer from its B
// or I until that buffer's next reuse (a ring). Where a boundary's messages are bf16
// (Boundary) each slot and gradient buffer has its packed wire copy. The executor and the
// checkpoint code name units by microbatch and use only the operations below; each returns
// the buffers and the Request of the transfer that uses them (MessageBuffer).
//
// A slot's life: free -> claim (FORWARD on the first stage, or RECV_ACT posted ahead) ->
// forward_slot/forwarded (FORWARD) -> backward_slot (B: finished; I: kept, its output
// gradients live in the slot until W) -> weight_slot (W of a kept slot: finished) ->
// release (after B or W, once its activation send completed) -> free. restore (resume)
// takes a free slot straight to forwarded with its saved contents.
//
// Full recomputation: compute_slot (FORWARD) binds a free recompute buffer to the unit with
// a copy of its input, and forwarded copies the stage output back into the unit's slot and
// frees the buffer; backward_slot binds one again (the executor reruns the forward in it
// before the backward) and hands it out instead of the unit's slot; B frees it at release,
// I keeps it bound (with the output gradients W needs) until W's release. So units between
// F and their B or I hold only their input and output; units between I and W hold a whole
// layout. Under none and selective compute_slot is the unit's slot and nothing is bound.
// Reuse: the buffer a FORWARD computed in keeps that unit's layout after forwarded until the
// next bind of any unit; if that next bind is the same unit's B or I, backward_slot hands the
// buffer back filled and must_recompute() is false (the layout is bitwise what the forward
// again would write). So a stage whose backward directly follows its forward (the last stage
// of 1f1b) recomputes nothing; backward_reuses_forward (schedule_ir.hpp) is the same rule on
// an IR, for the simulator.
//
// Invariants, checked by the operations (Exit::internal naming the microbatch):
//  - a unit holds at most one activation slot and at most one incoming-gradient buffer;
//  - a FORWARD runs on a claimed slot whose receive completed, once; B and I read a
//    forwarded slot; W reads only a slot its I kept (a W without its kept gradients fails);
//  - a slot is released only when finished (never between I and W) and when its activation
//    send is not pending; an incoming-gradient buffer only once its receive completed; an
//    outgoing-gradient buffer is claimed only when its earlier send completed and the
//    previous backward's gradient was sent;
//  - full recomputation: a unit holds at most one recompute buffer, bound only during its
//    FORWARD, during its B, or from its I to its W; a checkpoint captures no unit holding
//    one (a cut never falls inside an action or between an I and its W);
//  - the pools never grow while an IR runs: prepare() sizes them (from the IR's max units in
//    flight on the stage, and under full 1 + its max units between I and W for the recompute
//    buffers) before it runs, and requires that nothing is held or pending then; claims and
//    binds never allocate.
#pragma once
#include <cstdint>
#include <deque>
#include <vector>

#include "pipetrain/schedule_ir.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/transport.hpp"

namespace pt {

// What crosses the boundary between stage b and b+1, computed once from the model and
// asked for by name: the activation (and its gradient) shape, and the floats of a unit.
struct Boundary {
  int below = -1;  // stage b; -1 for the model input
  Shape shape;
  // train.precision = "bf16": a message across the boundary carries bf16 values packed two
  // per 32-bit word where the value is known to be bf16: every gradient, and an activation
  // some layer computed. The model input passed on through views only (a stage of just
  // `flatten`) crosses as fp32: data and token ids must arrive unchanged.
  bool act_bf16 = false, grad_bf16 = false;
  int64_t floats(int64_t samples) const { return samples * shape.numel(); }
  // 32-bit words a message of `samples` puts on the wire (activation or gradient)
  int64_t words(int64_t samples, bool grad) const {
    const int64_t n = floats(samples);
    return (grad ? grad_bf16 : act_bf16) ? (n + 1) / 2 : n;
  }
};

// One message's buffers: its floats, the packed bf16 copy that travels instead (null where
// the boundary's message is fp32), and the request of its transfer.
struct MessageBuffer {
  float* data = nullptr;
  Buffer* wire = nullptr;
  Request* req = nullptr;
  float* words() const { return wire ? wire->data() : data; }  // what goes to the transport
};

class StagePools {
 public:
  // A unit holding a slot, as capture and finish_unit see it.
  struct Unit {
    int64_t mb = -1;
    int64_t fwd_version = -1;  // absolute version its FORWARD read (debug_versions, checkpoints)
    double loss = 0;           // last stage: its summed loss
  };
  enum class Half { fused, input };  // B, or I (which keeps the slot for W)
  enum class Requests { grad_sends, act_sends, act_recvs, grad_recvs };

  // What one more unit in flight allocates (grow), as a function of sizes alone: grow
  // allocates exactly this, and the memory model counts it before anything is allocated.
  // Floats, int32 labels and 32-bit wire words.
  struct UnitSizes {
    int64_t slot_floats = 0, labels = 0;              // activation slot; last stage: its labels
    int64_t grad_in_floats = 0, grad_out_floats = 0;  // incoming (not last) / outgoing (not first) gradient
    int64_t wire_act_in = 0, wire_act_out = 0, wire_grad_in = 0, wire_grad_out = 0;  // bf16 copies (0: fp32)
    int64_t activation_bytes() const { return (slot_floats + labels) * 4; }
    int64_t buffer_bytes() const {
      return (grad_in_floats + grad_out_floats + wire_act_in + wire_act_out + wire_grad_in + wire_grad_out) * 4;
    }
  };
  static UnitSizes unit_sizes(int64_t slot_floats, int64_t train_mb, const Boundary& in, const Boundary& out, bool first,
                              bool last, int64_t mb_size, int64_t labels_per_sample);

  // in, out: the stage's boundaries; first / last: it holds the model's first / last layer
  // (no outgoing gradients / no incoming gradients and a label buffer per slot).
  StagePools(const Stage& stage, const Boundary& in, const Boundary& out, bool first, bool last);
  ~StagePools();
  StagePools(const StagePools&) = delete;
  StagePools& operator=(const StagePools&) = delete;

  // Before an IR runs: grow to its max units in flight on this stage (at least 1; never
  // shrinks), units of mb_size samples; then start with every buffer free.
  void prepare(const Schedule& ir, int rank, int stage, int64_t mb_size, int64_t labels_per_sample);
  // prepare's growing alone (the trainer's setup, before the clock starts): held units keep
  // their buffers, and the new ones are claimable after the next prepare, which for the same
  // IR then grows nothing.
  void reserve(const Schedule& ir, int rank, int stage, int64_t mb_size, int64_t labels_per_sample);

  // Activation slots.
  bool can_claim() const { return !free_slots_.empty(); }
  Stage::Slot& claim(int64_t mb);              // a free slot for unit mb
  MessageBuffer act_in(int64_t mb);            // its input, for the RECV_ACT posted ahead (claimed)
  Stage::Slot& forward_slot(int64_t mb);       // FORWARD: claimed, its receive completed (its inputs go here)
  // FORWARD: the slot the stage computes in: the unit's slot, or under full a recompute
  // buffer bound to it holding a copy of its input (and its labels)
  Stage::Slot& compute_slot(int64_t mb);
  // after the FORWARD (full: the output copied into the unit's slot, the buffer free again)
  void forwarded(int64_t mb, int64_t fwd_version, double loss);
  MessageBuffer act_out(int64_t mb);           // SEND_ACT: its output (forwarded, no send pending)
  // B (then finished) or I (then kept until W): the slot the backward reads; under full a
  // recompute buffer bound to the unit with a copy of its input, which the caller fills by
  // Stage::recompute_forward before the backward (recomputes())
  Stage::Slot& backward_slot(int64_t mb, Half half);
  Stage::Slot& weight_slot(int64_t mb);        // W: the slot (or recompute buffer) its I kept (then finished)
  bool recomputes() const { return full_; }    // parallel.recompute = "full" on this stage
  // After backward_slot: whether the slot still needs the forward again (full, and not the
  // buffer the unit's own FORWARD just computed in: backward_reuses_forward)
  bool must_recompute(int64_t mb) const;
  const Unit& unit(int64_t mb) const;          // a unit holding a slot
  Request& act_send_req(int64_t mb);           // its activation send (wait for it before release)
  void release(int64_t mb);                    // finished, its send completed: the slot is free
  // Resume: unit mb comes back forwarded into a free slot with its saved contents (host floats).
  Stage::Slot& restore(const Unit& u, const std::vector<float>& contents);
  // Units forwarded here and not yet released, by microbatch; a held slot's whole contents.
  std::vector<Unit> forwarded_units() const;
  std::vector<float> host_contents(int64_t mb) const;
  const float* output_of(int64_t mb) const;    // the stage output in unit mb's slot
  Request* posted_act_recv(int64_t mb);        // unit mb's RECV_ACT still in flight, or null

  // Incoming gradients (not on the last stage): claimed by the RECV_GRAD posted ahead, read by
  // B or I, released after it.
  bool can_claim_grad_in() const { return !free_grad_in_.empty(); }
  MessageBuffer claim_grad_in(int64_t mb);
  MessageBuffer grad_in(int64_t mb);
  bool holds_grad_in(int64_t mb) const { return find_grad_in(mb) >= 0; }
  void release_grad_in(int64_t mb);

  // Outgoing gradients (not on the first stage): a ring. B or I of unit mb claims the next
  // buffer (wait for next_grad_out_req() first) and writes its input gradient there; the
  // SEND_GRAD after it sends it (grad_out_to_send). The buffer keeps mb until reused.
  Request& next_grad_out_req();
  float* claim_grad_out(int64_t mb);
  MessageBuffer grad_out_to_send(int64_t mb);
  const float* grad_out_of(int64_t mb) const;  // the buffer holding mb's input gradient, or null

  // Every request of one kind (progress, draining, cancelling at a stop).
  template <class F>
  void each_request(Requests which, F&& f) {
    switch (which) {
      case Requests::grad_sends: for (Request& q : grad_out_req_) f(q); break;
      case Requests::act_sends: for (SlotState& s : slot_state_) f(s.send); break;
      case Requests::act_recvs: for (SlotState& s : slot_state_) f(s.recv); break;
      case Requests::grad_recvs: for (GradIn& g : grad_in_) f(g.recv); break;
    }
  }

  int size() const { return static_cast<int>(slots_.size()); }  // activation slots
  int recompute_buffers() const { return static_cast<int>(rec_slots_.size()); }
  int64_t activation_bytes() const;  // the slots and the recompute buffers
  int64_t recompute_bytes() const;   // the recompute buffers (full)
  int64_t buffer_bytes() const;      // gradient buffers and wire copies

 private:
  enum class Phase { free, claimed, forwarded, kept, finished };
  struct SlotState {
    Unit unit;
    Phase phase = Phase::free;
    Request recv, send;
  };
  struct GradIn {
    Buffer buf, wire;
    int64_t mb = -1;
    Request recv;
  };
  int find_slot(int64_t mb) const;  // -1: mb holds none
  int find_grad_in(int64_t mb) const;
  int held_slot(int64_t mb, const char* use) const;  // find_slot, an internal error if none
  int find_rec(int64_t mb) const;                    // unit mb's recompute buffer, -1 none
  // full: a free recompute buffer for mb, its input copied; for a backward, the last
  // FORWARD's buffer when that FORWARD was mb's and nothing bound since (filled: no recompute)
  Stage::Slot& bind_rec(int64_t mb, const char* use, bool backward);
  void unbind_rec(int64_t mb);
  void grow(int64_t mb_size, int64_t labels_per_sample);
  void reset();

  const Stage& stage_;
  const Boundary in_, out_;
  bool first_, last_;
  std::vector<Buffer> slot_mem_, wire_act_in_, wire_act_out_;
  std::vector<int32_t*> slot_labels_;
  std::vector<Stage::Slot> slots_;
  std::vector<SlotState> slot_state_;
  std::deque<int> free_slots_;
  std::vector<GradIn> grad_in_;
  std::deque<int> free_grad_in_;
  std::vector<Buffer> grad_out_, wire_grad_out_;
  std::vector<Request> grad_out_req_;
  std::vector<int64_t> grad_out_mb_;  // unit whose gradient each outgoing buffer holds, -1 none
  int grad_out_next_ = 0, pending_grad_out_ = -1;
  // full recomputation: the recompute buffers, their layouts and the unit each is bound to (-1 free)
  const bool full_;
  std::vector<Buffer> rec_mem_;
  std::vector<Stage::Slot> rec_slots_;
  std::vector<int64_t> rec_mb_;
  std::vector<char> rec_filled_;  // a bound buffer holds its unit's forward layout already
  int cached_ = -1;               // the free buffer the last FORWARD computed in (-1: overwritten since)
  int64_t cached_mb_ = -1;        // ... and its unit
};

}  // namespace pt
