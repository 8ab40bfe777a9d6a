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
    if (ctx_.replica() == 0) {  // the replica that writes them (rank_file.cpp)
      st.versions = r->weights->host_versions();  // bf16: stashes unpacked, exactly their bf16 values
      for (Buffer* b : r->opt->state()) st.optimizer.push_back(host_copy(be_, b->data(), b->size()));
    }
    st.optimizer_updates = r->opt->updates();
    st.state = host_copy(be_, r->state.data(), r->state.size());
    st.recompute = r->stage->recompute();
    st.precision = r->stage->precision();
    for (const StagePools::Unit& p : r->pools.forwarded_units()) {  // a unit only posted ahead is not state
      WorkerState::Unit u;
      u.mb = static_cast<int32_t>(p.mb);
      u.loss = p.loss;
      u.fwd_version = p.fwd_version;
      u.slot = r->pools.host_contents(p.mb);
      st.units.push_back(std::move(u));
    }
    out.push_back(std::move(st));
  }
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  for (size_t idx : crossing) {  // the payload is still in the sender's buffers
    const Action& a = acts[idx];
    StageRuntime& r = rt(a.stage);
    const bool act = a.op == Op::send_act;
    const float* src = act ? r.pools.output_of(a.mb) : r.pools.grad_out_of(a.mb);
    const size_t count = static_cast<size_t>(act ? r.out.floats(mb_size_) : r.in.floats(mb_size_));
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

// Units in flight come back into free slots, whole (activations and kept gradients; a slot
// captured under another recompute mode as this stage lays it out: Stage::unit_from); the
// last stage reads their labels again.
void Executor::restore_units(StageRuntime& r, const WorkerState& st) {
  for (const WorkerState::Unit& u : st.units) {
    const std::vector<float> contents = r.stage->unit_from(u.slot, st.recompute);
    PT_CHECK(!contents.empty(), "mb " << u.mb << " of stage " << r.id << " was captured under recompute = "
                                      << enum_name(st.recompute) << " and cannot be restored under "
                                      << enum_name(r.stage->recompute()) << " (resume checks this first)");
    Stage::Slot& slot = r.pools.restore({u.mb, u.fwd_version, u.loss}, contents);
    if (!r.last) continue;
    for (int64_t j = 0; j < mb_size_; ++j) idx_[static_cast<size_t>(j)] = (*perm_)[static_cast<size_t>(u.mb * mb_size_ + j)];
    train_.get_labels(idx_.data(), mb_size_, host_labels_.data());
    be_.labels_from_host(slot.labels, host_labels_.data(), static_cast<size_t>(mb_size_ * r.labels_per_sample));
  }
}

// Send again what was in flight across the cut.
void Executor::resend_crossing(const Schedule& ir, const WorkerState::Message& m) {
  const Action& a = ir.workers[static_cast<size_t>(ctx_.rank())][static_cast<size_t>(m.action)];
  StageRuntime& r = rt(a.stage);
  const int64_t n = static_cast<int64_t>(m.payload.size());
  if (a.op == Op::send_act) {  // the unit's slot came back whole
    isend_message(r.pools.act_out(a.mb), n, a.peer, tag(kTagAct, a.stage, a.mb));
    return;
  }
  be_.from_host(r.pools.claim_grad_out(a.mb), m.payload.data(), m.payload.size());
  isend_message(r.pools.grad_out_to_send(a.mb), n, a.peer, tag(kTagGrad, a.stage - 1, a.mb));
}

void Executor::quiesce(const Schedule& ir, const Cut& cut) {
  // Receive every message that crossed the cut toward this rank (into the buffer already
  // posted for it, or a scratch buffer), so every send completes; cancel the rest.
  const int me = ctx_.rank();
  std::vector<Buffer> scratch;
  std::vector<Request> reqs;
  for (size_t w = 0; w < ir.workers.size(); ++w)
    for (size_t idx : cut.crossing[w]) {
      const Action& a = ir.workers[w][idx];
      if (a.peer != me) continue;
      const bool grad = a.op == Op::send_grad;
      StageRuntime& r = rt(grad ? a.stage - 1 : a.stage + 1);  // the receiving stage
      Request* q = grad ? (r.pools.holds_grad_in(a.mb) ? r.pools.grad_in(a.mb).req : nullptr) : r.pools.posted_act_recv(a.mb);
      if (q) {
        wait(q, [&] { return std::string("a message crossing the checkpoint cut"); });
        continue;
      }
      const size_t n = static_cast<size_t>(grad ? r.out.words(mb_size_, true) : r.in.words(mb_size_, false));  // what is on the wire
      scratch.emplace_back(be_, n);
      reqs.emplace_back();
      tr_->irecv(scratch.back().data(), n, static_cast<int>(w), tag(grad ? kTagGrad : kTagAct, grad ? a.stage - 1 : a.stage, a.mb),
                 ctx_.p2p(), &reqs.back());
    }
  for (auto& q : reqs) wait(&q, [&] { return std::string("a message crossing the checkpoint cut"); });
  drain_sends("at the checkpoint cut:");  // our own crossing sends complete now that every peer drained them
  auto cancel = [this](Request& q) {  // receives posted ahead for actions after the cut are never matched
    if (q.pending()) tr_->cancel(&q);
  };
  for (StageRuntime* r : stages_) {
    r->pools.each_request(StagePools::Requests::act_recvs, cancel);
    r->pools.each_request(StagePools::Requests::grad_recvs, cancel);
  }
}

}  // namespace pt
