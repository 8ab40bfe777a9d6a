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

void Executor::post_receive(const Action& a) {
  StageRuntime& r = rt(a.stage);
  if (a.op == Op::recv_act) {
    const int s = r.free_slots.front();
    r.free_slots.pop_front();
    StageRuntime::SlotState& ss = r.slot_state[static_cast<size_t>(s)];
    ss.mb = a.mb;
    r.slot_of_mb[a.mb] = s;
    tr_->irecv(r.slots[static_cast<size_t>(s)].input, static_cast<size_t>(r.in.floats(mb_size_)), a.peer,
               tag(kTagAct, a.stage - 1, a.mb), ctx_.p2p(), &ss.recv);
    return;
  }
  const int g = r.free_grad_in.front();
  r.free_grad_in.pop_front();
  r.grad_of_mb[a.mb] = g;
  tr_->irecv(r.grad_in[static_cast<size_t>(g)].data(), static_cast<size_t>(r.out.floats(mb_size_)), a.peer,
             tag(kTagGrad, a.stage, a.mb), ctx_.p2p(), &r.grad_in_req[static_cast<size_t>(g)]);
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
  tr_->finish_recv(r.slots[static_cast<size_t>(s)].input);
  st.bytes = r.in.floats(mb_size_) * 4;
}

/// SEND_ACT: starts sending the unit's stage output from its slot (the slot is not reused
/// before the send completes).
void Executor::on_send_act(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const int s = r.slot_of_mb.at(a.mb);
  st.bytes = r.out.floats(mb_size_) * 4;
  tr_->isend(r.stage->output(r.slots[static_cast<size_t>(s)]), static_cast<size_t>(r.out.floats(mb_size_)), a.peer,
             tag(kTagAct, a.stage, a.mb), ctx_.p2p(), &r.slot_state[static_cast<size_t>(s)].send);
  if (a.peer != ctx_.rank()) stats_.bytes_p2p += st.bytes;  // a V's turn stays on the rank
}

/// RECV_GRAD: waits for the gradient of the unit's stage output in the buffer posted for it.
void Executor::on_recv_grad(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const int g = r.grad_of_mb.at(a.mb);
  ctx_.wait(&r.grad_in_req[static_cast<size_t>(g)], [&] { return waiting_for(a); });
  tr_->finish_recv(r.grad_in[static_cast<size_t>(g)].data());
  st.bytes = r.out.floats(mb_size_) * 4;
}

/// SEND_GRAD: starts sending the input gradient the preceding B or I wrote.
void Executor::on_send_grad(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  PT_CHECK(r.pending_grad_out >= 0, "SEND_GRAD without a backward");
  const size_t b = static_cast<size_t>(r.pending_grad_out);
  st.bytes = r.in.floats(mb_size_) * 4;
  tr_->isend(r.grad_out[b].data(), static_cast<size_t>(r.in.floats(mb_size_)), a.peer, tag(kTagGrad, a.stage - 1, a.mb), ctx_.p2p(),
             &r.grad_out_req[b]);
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
