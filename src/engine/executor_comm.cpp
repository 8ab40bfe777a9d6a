// The executor's messages: tags (kind, boundary, unit), receives posted ahead in IR order
// into buffers the pools hand out, progress between layers, and the four communication
// handlers. Every transfer goes through the Transport.
#include <algorithm>

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
    if (a.op == Op::recv_act ? !r.pools.can_claim() : !r.pools.can_claim_grad_in()) return;
    post_receive(a);
    ++next_recv_;
  }
}

void Executor::post_receive(const Action& a) {
  StageRuntime& r = rt(a.stage);
  if (a.op == Op::recv_act) {
    r.pools.claim(a.mb);
    const MessageBuffer m = r.pools.act_in(a.mb);
    const WirePart p = wire_part(static_cast<size_t>(r.in.words(mb_size_, false)));
    tr_->irecv(m.words() + p.off, p.len, a.peer, tag(kTagAct, a.stage - 1, a.mb), ctx_.p2p(), m.req);
    return;
  }
  const MessageBuffer m = r.pools.claim_grad_in(a.mb);
  const WirePart p = wire_part(static_cast<size_t>(r.out.words(mb_size_, true)));
  tr_->irecv(m.words() + p.off, p.len, a.peer, tag(kTagGrad, a.stage, a.mb), ctx_.p2p(), m.req);
}

Executor::WirePart Executor::wire_part(size_t words) const {
  const size_t t = cfg_.tensor ? static_cast<size_t>(cfg_.tensor->size()) : 1;
  if (t == 1) return {0, words, words};
  const size_t k = static_cast<size_t>(cfg_.tensor->rank()), c = (words + t - 1) / t;
  const size_t off = std::min(words, k * c);
  return {off, std::min(words, off + c) - off, c};
}

// Start sending n floats of m's buffer (this tensor rank's part of them), packed into its
// wire copy first where it has one (bf16); returns the bytes on the wire.
namespace {
// Words on the wire of n floats in m: packed two per word when it has a wire copy (bf16).
size_t wire_words(const MessageBuffer& m, int64_t n) { return static_cast<size_t>(m.wire ? (n + 1) / 2 : n); }
}  // namespace

int64_t Executor::isend_message(const MessageBuffer& m, int64_t n, int peer, int t) {
  const size_t words = wire_words(m, n);
  if (m.wire) be_.pack_bf16(static_cast<size_t>(n), m.data, m.wire->data());
  const WirePart p = wire_part(words);
  tr_->isend(m.words() + p.off, p.len, peer, t, ctx_.p2p(), m.req);
  return static_cast<int64_t>(p.len) * 4;
}

// A receive has completed: into m's buffer itself, or into its wire copy (bf16) then unpacked
// to n floats; under parallel.tensor the tensor group then gathers the other ranks' parts.
void Executor::finish_message(const MessageBuffer& m, int64_t n) {
  const size_t words = wire_words(m, n);
  const WirePart p = wire_part(words);
  tr_->finish_recv(m.words() + p.off);
  if (m.wire) be_.unpack_bf16(static_cast<size_t>(n), m.wire->data(), m.data);
  if (p.chunk < words)
    cfg_.tensor->allgather(be_, m.data, n, static_cast<int64_t>(m.wire ? 2 * p.chunk : p.chunk));
}

void Executor::progress() {
  if (ir_) post_receives();
  auto test = [this](Request& q) {
    if (q.pending()) tr_->test(&q);
  };
  for (StageRuntime* r : stages_) {
    r->pools.each_request(StagePools::Requests::grad_sends, test);
    test(r->group.allreduce);
  }
}

void Executor::poll_thunk(void* self) { static_cast<Executor*>(self)->progress(); }

/// RECV_ACT: waits for the unit's input activation in the slot posted for it.
void Executor::on_recv_act(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const MessageBuffer m = r.pools.act_in(a.mb);
  wait(m.req, [&] { return waiting_for(a); });
  finish_message(m, r.in.floats(mb_size_));
  st.bytes = r.in.words(mb_size_, false) * 4;
}

/// SEND_ACT: starts sending the unit's stage output from its slot (the slot is not reused
/// before the send completes).
void Executor::on_send_act(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  st.bytes = isend_message(r.pools.act_out(a.mb), r.out.floats(mb_size_), a.peer, tag(kTagAct, a.stage, a.mb));
  if (a.peer != ctx_.rank()) stats_.bytes_p2p += st.bytes;  // a V's turn stays on the rank
}

/// RECV_GRAD: waits for the gradient of the unit's stage output in the buffer posted for it.
void Executor::on_recv_grad(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  const MessageBuffer m = r.pools.grad_in(a.mb);
  wait(m.req, [&] { return waiting_for(a); });
  finish_message(m, r.out.floats(mb_size_));
  st.bytes = r.out.words(mb_size_, true) * 4;
}

/// SEND_GRAD: starts sending the input gradient the preceding B or I wrote.
void Executor::on_send_grad(const Action& a, Step& st) {
  StageRuntime& r = rt(a.stage);
  st.bytes = isend_message(r.pools.grad_out_to_send(a.mb), r.in.floats(mb_size_), a.peer, tag(kTagGrad, a.stage - 1, a.mb));
  if (a.peer != ctx_.rank()) stats_.bytes_p2p += st.bytes;
}

// Outstanding sends complete before the buffers can serve another IR.
void Executor::drain_sends(const char* when) {
  for (StageRuntime* r : stages_) {
    r->pools.each_request(StagePools::Requests::grad_sends,
                          [&](Request& q) { wait(&q, [&] { return std::string(when) + " SEND_GRAD completion"; }); });
    r->pools.each_request(StagePools::Requests::act_sends,
                          [&](Request& q) { wait(&q, [&] { return std::string(when) + " SEND_ACT completion"; }); });
  }
}

}  // namespace pt
