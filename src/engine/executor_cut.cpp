// The executor at a checkpoint cut: capture every held stage's state (weight versions,
// optimizer, units in flight with their whole slots, payloads of crossing sends), restore
// it on resume (sending the crossing messages again), and quiesce before stopping.
#include "executor_internal.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

std::vector<float> host_copy(Backend& be, const float* src, size_t n) {
  std::vector<float> v(n);
  be.to_host(v.data(), src, n);
  return v;
}

}  // namespace

std::vector<WorkerState> Executor::capture(const Schedule& ir, size_t position, const std::vector<size_t>& crossing) {
  std::vector<WorkerState> out;
  for (StageRuntime* r : stages_) {
    WorkerState st;
    st.stage = r->id;
    st.position = static_cast<int64_t>(position);
    st.latest = r->weights->latest_id();
    st.versions = r->weights->host_versions();  // bf16: stashes unpacked, exactly their bf16 values
    for (Buffer* b : r->opt->state()) st.optimizer.push_back(host_copy(be_, b->data(), b->size()));
    st.optimizer_updates = r->opt->updates();
    st.state = host_copy(be_, r->state.data(), r->state.size());
    for (auto& [mb, s] : r->slot_of_mb) {
      const StageRuntime::SlotState& ss = r->slot_state[static_cast<size_t>(s)];
      if (!ss.forwarded) continue;  // only posted ahead: not state
      WorkerState::Unit u;
      u.mb = static_cast<int32_t>(mb);
      u.loss = ss.loss;
      auto fv = r->fwd_version_of.find(mb);
      u.fwd_version = fv != r->fwd_version_of.end() ? fv->second : -1;
      u.slot = host_copy(be_, r->slot_mem[static_cast<size_t>(s)].data(), static_cast<size_t>(r->stage->slot_floats()));
      st.units.push_back(std::move(u));
    }
    out.push_back(std::move(st));
  }
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  for (size_t idx : crossing) {  // the payload is still in the sender's buffers
    const Action& a = acts[idx];
    StageRuntime& r = rt(a.stage);
    const float* src = nullptr;
    size_t count = 0;
    if (a.op == Op::send_act) {
      src = r.stage->output(r.slots[static_cast<size_t>(r.slot_of_mb.at(a.mb))]);
      count = static_cast<size_t>(r.out.floats(mb_size_));
    } else {
      for (size_t b = 0; b < r.grad_out.size(); ++b)
        if (r.grad_out_mb[b] == a.mb) src = r.grad_out[b].data();
      count = static_cast<size_t>(r.in.floats(mb_size_));
    }
    PT_CHECK(src, "no buffer holds the crossing " << op_name(a.op) << " of mb " << a.mb);
    for (WorkerState& st : out)
      if (st.stage == a.stage) st.crossing.push_back({static_cast<int64_t>(idx), host_copy(be_, src, count)});
  }
  return out;
}

void Executor::restore(const Schedule& ir, const std::vector<WorkerState>& states) {
  for (const WorkerState& st : states) {
    StageRuntime& r = rt(st.stage);
    r.weights->restore(st.versions, st.latest, st.epoch_start);
    auto state = r.opt->state();
    PT_CHECK(state.size() == st.optimizer.size(), "optimizer state: checkpoint has " << st.optimizer.size() << " buffers, "
                                                                                     << "optimizer " << state.size());
    for (size_t i = 0; i < state.size(); ++i) {
      PT_CHECK(st.optimizer[i].size() == state[i]->size(), "optimizer buffer size mismatch");
      be_.from_host(state[i]->data(), st.optimizer[i].data(), st.optimizer[i].size());
    }
    r.opt->set_updates(st.optimizer_updates);
    if (!st.state.empty()) {
      PT_CHECK(st.state.size() == r.state.size(), "running state: checkpoint has " << st.state.size() << " floats, stage " << r.state.size());
      be_.from_host(r.state.data(), st.state.data(), st.state.size());
    }
    restore_units(r, st);
  }
  for (const WorkerState& st : states)
    for (const WorkerState::Message& m : st.crossing) resend_crossing(ir, m);
}

// Units in flight come back into free slots, whole (activations and kept gradients); the
// last stage reads their labels again.
void Executor::restore_units(StageRuntime& r, const WorkerState& st) {
  for (const WorkerState::Unit& u : st.units) {
    PT_CHECK(!r.free_slots.empty(), "no free slot to restore mb " << u.mb);
    const int s = r.free_slots.front();
    r.free_slots.pop_front();
    PT_CHECK(u.slot.size() == static_cast<size_t>(r.stage->slot_floats()), "restored slot size mismatch");
    be_.from_host(r.slot_mem[static_cast<size_t>(s)].data(), u.slot.data(), u.slot.size());
    StageRuntime::SlotState& ss = r.slot_state[static_cast<size_t>(s)];
    ss.mb = u.mb, ss.loss = u.loss, ss.forwarded = true;
    r.slot_of_mb[u.mb] = s;
    if (u.fwd_version >= 0) r.fwd_version_of[u.mb] = u.fwd_version;
    if (!r.last) continue;
    for (int64_t j = 0; j < mb_size_; ++j) idx_[static_cast<size_t>(j)] = (*perm_)[static_cast<size_t>(u.mb * mb_size_ + j)];
    train_.get_labels(idx_.data(), mb_size_, host_labels_.data());
    be_.labels_from_host(r.slot_labels[static_cast<size_t>(s)], host_labels_.data(), static_cast<size_t>(mb_size_ * r.labels_per_sample));
  }
}

// Send again what was in flight across the cut.
void Executor::resend_crossing(const Schedule& ir, const WorkerState::Message& m) {
  const Action& a = ir.workers[static_cast<size_t>(ctx_.rank())][static_cast<size_t>(m.action)];
  StageRuntime& r = rt(a.stage);
  const int64_t n = static_cast<int64_t>(m.payload.size());
  if (a.op == Op::send_act) {
    const size_t s = static_cast<size_t>(r.slot_of_mb.at(a.mb));
    isend_wire(r.stage->output(r.slots[s]), r.out.act_bf16 ? &r.wire_act_out[s] : nullptr, n, a.peer, tag(kTagAct, a.stage, a.mb),
               &r.slot_state[s].send);
    return;
  }
  const size_t b = static_cast<size_t>(r.grad_out_next);
  r.grad_out_next = (r.grad_out_next + 1) % static_cast<int>(r.grad_out.size());
  be_.from_host(r.grad_out[b].data(), m.payload.data(), m.payload.size());
  r.grad_out_mb[b] = a.mb;
  isend_wire(r.grad_out[b].data(), r.in.grad_bf16 ? &r.wire_grad_out[b] : nullptr, n, a.peer, tag(kTagGrad, a.stage - 1, a.mb),
             &r.grad_out_req[b]);
}

void Executor::quiesce(const Schedule& ir, const Cut& cut) {
  // Receive every message that crossed the cut toward this rank (into the buffer already
  // posted for it, or a scratch buffer), so every send completes; cancel the rest.
  const int me = ctx_.rank();
  std::vector<Buffer> scratch;
  std::vector<MPI_Request> reqs;
  for (size_t w = 0; w < ir.workers.size(); ++w)
    for (size_t idx : cut.crossing[w]) {
      const Action& a = ir.workers[w][idx];
      if (a.peer != me) continue;
      const bool grad = a.op == Op::send_grad;
      StageRuntime& r = rt(grad ? a.stage - 1 : a.stage + 1);  // the receiving stage
      auto posted = grad ? r.grad_of_mb.find(a.mb) : r.slot_of_mb.find(a.mb);
      MPI_Request* q = nullptr;
      if (grad && posted != r.grad_of_mb.end()) q = &r.grad_in_req[static_cast<size_t>(posted->second)];
      if (!grad && posted != r.slot_of_mb.end() && r.slot_state[static_cast<size_t>(posted->second)].recv != MPI_REQUEST_NULL)
        q = &r.slot_state[static_cast<size_t>(posted->second)].recv;
      if (q) {
        ctx_.wait(q, [&] { return std::string("a message crossing the checkpoint cut"); });
        continue;
      }
      const size_t n = static_cast<size_t>(grad ? r.out.words(mb_size_, true) : r.in.words(mb_size_, false));  // what is on the wire
      scratch.emplace_back(be_, n);
      reqs.push_back(MPI_REQUEST_NULL);
      tr_->irecv(scratch.back().data(), n, static_cast<int>(w), tag(grad ? kTagGrad : kTagAct, grad ? a.stage - 1 : a.stage, a.mb),
                 ctx_.p2p(), &reqs.back());
    }
  for (auto& q : reqs) ctx_.wait(&q, [&] { return std::string("a message crossing the checkpoint cut"); });
  drain_sends("at the checkpoint cut:");  // our own crossing sends complete now that every peer drained them
  auto cancel = [](MPI_Request* q) {  // receives posted ahead for actions after the cut are never matched
    if (*q == MPI_REQUEST_NULL) return;
    MPI_Cancel(q);
    MPI_Wait(q, MPI_STATUS_IGNORE);
  };
  for (StageRuntime* r : stages_) {
    for (auto& ss : r->slot_state) cancel(&ss.recv);
    for (auto& q : r->grad_in_req) cancel(&q);
  }
}

}  // namespace pt
