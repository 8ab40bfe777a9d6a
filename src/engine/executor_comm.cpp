// The executor's messages: tags (kind, boundary, unit), receives posted ahead in IR order
// into pooled buffers, progress between layers, and the four communication handlers.
#include "executor_internal.hpp"
#include "pipetrain/error.hpp"

namespace pt {

// Unique among the messages in flight: a unit crosses each boundary once each way.
int Executor::tag(int kind, int boundary, int64_t mb) const {
  const int64_t nb = std::max(1, ctx_.layout().stages() - 1);
  const int64_t units = std::max<int64_t>(1, static_cast<int64_t>(ctx_.tag_modulus()) * 4 / (kTagKinds * nb));
  return static_cast<int>(((mb % units) * nb + std::max(0, boundary)) * kTagKinds + kind);
}

std::string Executor::waiting_for(const Action& a) const {
  return std::string(op_name(a.op)) + " mb " + std::to_string(a.mb) + (a.peer >= 0 ? " from rank " + std::to_string(a.peer) : "") +
         " (rank " + std::to_string(ctx_.rank()) + ", stage " + std::to_string(a.stage) + ")";
}

// Post the receive of the next RECV in IR order when its stage has a free buffer; in-order
// posting keeps the pools as small as the IR's units in flight.
void Executor::post_receives() {
  const auto& acts = ir_->workers[static_cast<size_t>(ctx_.rank())];
  while (next_recv_ < recv_positions_.size()) {
    const Action& a = acts[recv_positions_[next_recv_]];
    StageRuntime& r = rt(a.stage);
    if (a.op == Op::recv_act ? r.free_slots.empty() : r.free_grad_in.empty()) return;
    post_receive(a);
    ++next_recv_;
  }
}

// Where a message's words travel: the buffer itself (fp32), or its packed bf16 copy
// (`used` = the boundary's message is bf16, see Boundary).
static float* wire_of(bool used, std::vector<Buffer>& wire, size_t i, float* buf) { return used ? wire[i].data() : buf; }

void Executor::post_receive(const Action& a) {
  StageRuntime& r = rt(a.stage);
  if (a.op == Op::recv_act) {
    const int s = r.free_slots.front();
    r.free_slots.pop_front();
    StageRuntime::SlotState& ss = r.slot_state[static_cast<size_t>(s)];
    ss.mb = a.mb;
    r.slot_of_mb[a.mb] = s;
    float* dst = wire_of(r.in.act_bf16, r.wire_act_in, static_cast<size_t>(s), r.slots[static_cast<size_t>(s)].input);
    tr_->irecv(dst, static_cast<size_t>(r.in.words(mb_size_, false)), a.peer, tag(kTagAct, a.stage - 1, a.mb), ctx_.p2p(), &ss.recv);
    return;
  }
  const int g = r.free_grad_in.front();
  r.free_grad_in.pop_front();
  r.grad_of_mb[a.mb] = g;
  float* dst = wire_of(r.out.grad_bf16, r.wire_grad_in, static_cast<size_t>(g), r.grad_in[static_cast<size_t>(g)].data());
  tr_->irecv(dst, static_cast<size_t>(r.out.words(mb_size_, true)), a.peer, tag(kTagGrad, a.stage, a.mb), ctx_.p2p(),
             &r.grad_in_req[static_cast<size_t>(g)]);
}

// Start sending n floats of `src`, packed into `wire` first when it is given (bf16);
// returns the bytes on the wire.
int64_t Executor::isend_wire(const float* src, Buffer* wire, int64_t n, int peer, int t, MPI_Request* req) {
  const size_t words = static_cast<size_t>(wire ? (n + 1) / 2 : n);
  if (wire) be_.pack_bf16(static_cast<size_t>(n), src, wire->data());
  tr_->isend(wire ? wire->data() : src, words, peer, t, ctx_.p2p(), req);
  return static_cast<int64_t>(words) * 4;
}

// A receive has completed: into `dst` itself, or into `wire` (bf16) then unpacked to n floats.
void Executor::finish_wire_recv(Buffer* wire, float* dst, int64_t n) {
  tr_->finish_recv(wire ? wire->data() : dst);
  if (wire) be_.unpack_bf16(static_cast<size_t>(n), wire->data(), dst);
}

void Executor::progress() {
  if (ir_) post_receives();
  auto test = [](MPI_Request& q) {
    if (q == MPI_REQUEST_NULL) return;
    int done = 0;
    MPI_Test(&q, &done, MPI_STATUS_IGNORE);
  };
  for (StageRuntime* r : stages_) {
    for (auto& q : r->grad_out_req) test(q);
    test(r->allreduce_req);
  }
}

void Executor::poll_thunk(void* self) { static_cast<Executor*>(self)->progress(); }

/// RECV_ACT: waits for the unit's input activation in the slot posted for it.
void Executor::on_recv_act(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const int s = r.slot_of_mb.at(a.mb);
  ctx_.wait(&r.slot_state[static_cast<size_t>(s)].recv, [&] { return waiting_for(a); });
  finish_wire_recv(r.in.act_bf16 ? &r.wire_act_in[static_cast<size_t>(s)] : nullptr, r.slots[static_cast<size_t>(s)].input,
                   r.in.floats(mb_size_));
  st.bytes = r.in.words(mb_size_, false) * 4;
}

/// SEND_ACT: starts sending the unit's stage output from its slot (the slot is not reused
/// before the send completes).
void Executor::on_send_act(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const int s = r.slot_of_mb.at(a.mb);
  st.bytes = isend_wire(r.stage->output(r.slots[static_cast<size_t>(s)]), r.out.act_bf16 ? &r.wire_act_out[static_cast<size_t>(s)] : nullptr,
                        r.out.floats(mb_size_), a.peer, tag(kTagAct, a.stage, a.mb), &r.slot_state[static_cast<size_t>(s)].send);
  if (a.peer != ctx_.rank()) stats_.bytes_p2p += st.bytes;  // a V's turn stays on the rank
}

/// RECV_GRAD: waits for the gradient of the unit's stage output in the buffer posted for it.
void Executor::on_recv_grad(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const int g = r.grad_of_mb.at(a.mb);
  ctx_.wait(&r.grad_in_req[static_cast<size_t>(g)], [&] { return waiting_for(a); });
  finish_wire_recv(r.out.grad_bf16 ? &r.wire_grad_in[static_cast<size_t>(g)] : nullptr, r.grad_in[static_cast<size_t>(g)].data(),
                   r.out.floats(mb_size_));
  st.bytes = r.out.words(mb_size_, true) * 4;
}

/// SEND_GRAD: starts sending the input gradient the preceding B or I wrote.
void Executor::on_send_grad(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  PT_CHECK(r.pending_grad_out >= 0, "SEND_GRAD without a backward");
  const size_t b = static_cast<size_t>(r.pending_grad_out);
  st.bytes = isend_wire(r.grad_out[b].data(), r.in.grad_bf16 ? &r.wire_grad_out[b] : nullptr, r.in.floats(mb_size_), a.peer,
                        tag(kTagGrad, a.stage - 1, a.mb), &r.grad_out_req[b]);
  r.pending_grad_out = -1;
  if (a.peer != ctx_.rank()) stats_.bytes_p2p += st.bytes;
}

// Outstanding sends complete before the buffers can serve another IR.
void Executor::drain_sends(const char* when) {
  for (StageRuntime* r : stages_) {
    for (auto& q : r->grad_out_req) ctx_.wait(&q, [&] { return std::string(when) + " SEND_GRAD completion"; });
    for (auto& ss : r->slot_state) ctx_.wait(&ss.send, [&] { return std::string(when) + " SEND_ACT completion"; });
  }
}

}  // namespace pt
