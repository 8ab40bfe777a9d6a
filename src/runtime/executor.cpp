// The executor: runs one worker's action list with real kernels and nonblocking MPI.
// Receives are posted ahead of need into pooled buffers (slots for activations, gradient
// buffers), sends never block compute, MPI is polled between layers, the replica gradient
// allreduce is nonblocking and overlaps the remaining work, and every action is timed.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "pipetrain/error.hpp"
#include "pipetrain/fault.hpp"
#include "pipetrain/runtime.hpp"
#include "pipetrain/stability.hpp"

namespace pt {

enum TagKind { kTagAct = 0, kTagGrad = 1, kTagEval = 2 };

struct Executor::SlotState {
  int64_t mb = -1;
  bool forwarded = false;  // its FORWARD ran (a slot can also be held by a receive posted ahead)
  MPI_Request recv = MPI_REQUEST_NULL;
  MPI_Request send = MPI_REQUEST_NULL;
  double loss = 0;
};

Executor::Executor(ParallelContext& ctx, Stage& stage, WeightStore& weights, Optimizer& opt, const Dataset& train,
                   const Dataset& test, const ExecutorConfig& cfg)
    : ctx_(ctx), stage_(stage), weights_(weights), opt_(opt), train_(train), test_(test), cfg_(cfg),
      be_(stage.backend()), tr_(make_transport(stage.backend(), cfg.nccl_allreduce)) {
  grads_ = Buffer(be_, static_cast<size_t>(stage.num_params() + 1));
  const int64_t mb = std::max(stage.train_mb(), stage.eval_mb());
  host_x_.resize(static_cast<size_t>(mb * stage.in_shape().numel()));
  host_labels_.resize(static_cast<size_t>(mb));
  idx_.resize(static_cast<size_t>(mb));
  timeline_.reserve(static_cast<size_t>(std::max<int64_t>(cfg.trace_limit, 0)));
  stats_.optimizer_bytes = 0;
  for (Buffer* b : opt.state()) stats_.optimizer_bytes += static_cast<int64_t>(b->bytes());
}

Executor::~Executor() {
  for (auto* p : slot_labels_)
    if (p) be_.release_int(p);
  if (eval_labels_) be_.release_int(eval_labels_);
}

int Executor::tag(int kind, int64_t mb) const { return static_cast<int>((mb % ctx_.tag_modulus()) * 4 + kind); }

void Executor::ensure_pools(const Schedule& ir) {
  const int need_slots = std::max(1, max_in_flight(ir, ctx_.rank(), ctx_.stage()));
  const bool has_next = !ctx_.last_stage(), has_prev = !ctx_.first_stage();
  const size_t in_floats = static_cast<size_t>(stage_.train_mb() * stage_.in_shape().numel());
  const size_t out_floats = static_cast<size_t>(stage_.train_mb() * stage_.out_shape().numel());
  while (static_cast<int>(slot_mem_.size()) < need_slots) {
    slot_mem_.emplace_back(be_, static_cast<size_t>(stage_.slot_floats()));
    slot_labels_.push_back(stage_.has_loss() ? be_.alloc_int(static_cast<size_t>(stage_.train_mb())) : nullptr);
    slots_.push_back(stage_.carve(slot_mem_.back().data(), slot_labels_.back()));
    slot_state_.emplace_back();
    free_slots_.push_back(static_cast<int>(slots_.size()) - 1);
    if (has_next) {
      grad_in_.emplace_back(be_, out_floats);
      grad_in_req_.push_back(MPI_REQUEST_NULL);
      grad_in_mb_.push_back(-1);
      free_grad_in_.push_back(static_cast<int>(grad_in_.size()) - 1);
    }
    if (has_prev) {
      grad_out_.emplace_back(be_, in_floats);
      grad_out_req_.push_back(MPI_REQUEST_NULL);
      grad_out_mb_.push_back(-1);
    }
  }
  stats_.max_in_flight = std::max(stats_.max_in_flight, need_slots);
  stats_.activation_bytes = static_cast<int64_t>(slot_mem_.size()) * stage_.slot_floats() * 4;
  stats_.buffer_bytes = static_cast<int64_t>((grad_in_.size() * out_floats + grad_out_.size() * in_floats) * 4) +
                        static_cast<int64_t>(grads_.bytes());
}

std::string Executor::waiting_for(const Action& a) const {
  return std::string(op_name(a.op)) + " mb " + std::to_string(a.mb) + (a.peer >= 0 ? " from rank " + std::to_string(a.peer) : "") +
         " (rank " + std::to_string(ctx_.rank()) + ", stage " + std::to_string(ctx_.stage()) + ")";
}

void Executor::post_receives() {
  const auto& acts = ir_->workers[static_cast<size_t>(ctx_.rank())];
  while (next_recv_ < recv_positions_.size()) {
    const Action& a = acts[recv_positions_[next_recv_]];
    if (a.op == Op::recv_act) {
      if (free_slots_.empty()) return;
      const int s = free_slots_.front();
      free_slots_.pop_front();
      SlotState& st = slot_state_[static_cast<size_t>(s)];
      st.mb = a.mb;
      slot_of_mb_[a.mb] = s;
      const int count = static_cast<int>(mb_size_ * stage_.in_shape().numel());
      tr_->irecv(slots_[static_cast<size_t>(s)].input, static_cast<size_t>(count), a.peer, tag(kTagAct, a.mb), ctx_.p2p(), &st.recv);
    } else {
      if (free_grad_in_.empty()) return;
      const int g = free_grad_in_.front();
      free_grad_in_.pop_front();
      grad_of_mb_[a.mb] = g;
      grad_in_mb_[static_cast<size_t>(g)] = a.mb;
      const int count = static_cast<int>(mb_size_ * stage_.out_shape().numel());
      tr_->irecv(grad_in_[static_cast<size_t>(g)].data(), static_cast<size_t>(count), a.peer, tag(kTagGrad, a.mb), ctx_.p2p(),
                 &grad_in_req_[static_cast<size_t>(g)]);
    }
    ++next_recv_;
  }
}

void Executor::progress() {
  if (ir_) post_receives();
  for (auto& r : grad_out_req_)
    if (r != MPI_REQUEST_NULL) {
      int done = 0;
      MPI_Test(&r, &done, MPI_STATUS_IGNORE);
    }
  if (allreduce_req_ != MPI_REQUEST_NULL) {
    int done = 0;
    MPI_Test(&allreduce_req_, &done, MPI_STATUS_IGNORE);
  }
}

void Executor::poll_thunk(void* self) { static_cast<Executor*>(self)->progress(); }

void Executor::check_finite_grads(int64_t mb, const char* when) {
  if (be_.all_finite(static_cast<size_t>(stage_.num_params()), grads_.data())) return;
  if (cfg_.skip_nonfinite) {
    group_nonfinite_ = true;
    return;
  }
  // Name the first layer whose gradient is not finite.
  std::string layer = "?";
  for (int l = stage_.first(); l < stage_.last(); ++l) {
    const int64_t n = stage_.model().layer(l).num_params();
    if (n && !be_.all_finite(static_cast<size_t>(n), grads_.data() + stage_.param_offset(l))) {
      layer = std::to_string(l) + " '" + stage_.model().layer(l).name() + "'";
      break;
    }
  }
  fail(Exit::numerical, "non-finite gradient on stage " + std::to_string(ctx_.stage()) + " (rank " + std::to_string(ctx_.rank()) +
                            "), layer " + layer + ", microbatch " + std::to_string(mb) + " of step " +
                            std::to_string(weights_.latest_id() + ir_->version_stride(ctx_.stage())) + " " + when +
                            " (train.nonfinite = \"abort\")" + nonfinite_cause(ir_->name(), ir_->layout.stages(), opt_.config()));
}

bool Executor::train(const Schedule& ir, const std::vector<int64_t>& perm, int64_t sample_base, TrainControl& control,
                     const WorkerState* resume) {
  ir_ = &ir;
  perm_ = &perm;
  sample_base_ = sample_base;
  mb_size_ = cfg_.batch_size / ir.microbatches;
  PT_CHECK(mb_size_ == stage_.train_mb(), "IR microbatch " << mb_size_ << " != stage slot size " << stage_.train_mb());
  ensure_pools(ir);
  const size_t from = resume ? static_cast<size_t>(resume->position) : 0;
  weights_.prepare(ir, ctx_.rank(), ctx_.stage(), from);
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  recv_positions_.clear();
  for (size_t i = from; i < acts.size(); ++i)
    if (acts[i].op == Op::recv_act || acts[i].op == Op::recv_grad) recv_positions_.push_back(i);
  next_recv_ = 0;
  slot_of_mb_.clear();
  grad_of_mb_.clear();
  if (resume) restore(ir, *resume);
  const int64_t in_numel = stage_.in_shape().numel(), out_numel = stage_.out_shape().numel();
  const size_t nparams = static_cast<size_t>(stage_.num_params());
  const int64_t stride = ir.version_stride(ctx_.stage());
  int pending_grad_out = -1;
  PollHook poll{&Executor::poll_thunk, this};
  const double t_begin = now_s();
  bool stopped = false;

  for (size_t i = from; i < acts.size() && !stopped; ++i) {
    post_receives();
    const Action& a = acts[i];
    const double t0 = now_s();
    int64_t bytes = 0;
    switch (a.op) {
      case Op::recv_act: {
        SlotState& st = slot_state_[static_cast<size_t>(slot_of_mb_.at(a.mb))];
        ctx_.wait(&st.recv, [&] { return waiting_for(a); });
        tr_->finish_recv(slots_[static_cast<size_t>(slot_of_mb_.at(a.mb))].input);
        bytes = mb_size_ * in_numel * 4;
        break;
      }
      case Op::forward: {
        int s;
        if (ctx_.first_stage()) {
          PT_CHECK(!free_slots_.empty(), "no free activation slot for mb " << a.mb);
          s = free_slots_.front();
          free_slots_.pop_front();
          slot_state_[static_cast<size_t>(s)].mb = a.mb;
          slot_of_mb_[a.mb] = s;
        } else {
          s = slot_of_mb_.at(a.mb);
        }
        Stage::Slot& slot = slots_[static_cast<size_t>(s)];
        for (int64_t j = 0; j < mb_size_; ++j) idx_[static_cast<size_t>(j)] = perm[static_cast<size_t>(a.mb * mb_size_ + j)];
        if (ctx_.first_stage()) {
          float* dst = be_.device() == Device::cpu ? slot.input : host_x_.data();
          train_.get(idx_.data(), mb_size_, dst, nullptr);
          if (dst != slot.input) be_.from_host(slot.input, dst, static_cast<size_t>(mb_size_ * in_numel));
        }
        if (stage_.has_loss()) {
          train_.get_labels(idx_.data(), mb_size_, host_labels_.data());
          be_.labels_from_host(slot.labels, host_labels_.data(), static_cast<size_t>(mb_size_));
        }
        LayerCtx lc{be_, cfg_.seed, sample_base + a.mb * mb_size_, true, slot.labels, 1.0f / static_cast<float>(cfg_.batch_size)};
        stage_.forward(slot, weights_.read(a.version), lc, mb_size_, poll);
        slot_state_[static_cast<size_t>(s)].forwarded = true;
        if (stage_.has_loss()) slot_state_[static_cast<size_t>(s)].loss = be_.sum(static_cast<size_t>(mb_size_), stage_.output(slot));
        if (cfg_.debug_versions) fwd_version_of_[a.mb] = weights_.base() + a.version;
        weights_.done_reading(a.version);
        break;
      }
      case Op::send_act: {
        const int s = slot_of_mb_.at(a.mb);
        bytes = mb_size_ * out_numel * 4;
        tr_->isend(stage_.output(slots_[static_cast<size_t>(s)]), static_cast<size_t>(mb_size_ * out_numel), a.peer,
                   tag(kTagAct, a.mb), ctx_.p2p(), &slot_state_[static_cast<size_t>(s)].send);
        stats_.bytes_p2p += bytes;
        break;
      }
      case Op::recv_grad: {
        const int g = grad_of_mb_.at(a.mb);
        ctx_.wait(&grad_in_req_[static_cast<size_t>(g)], [&] { return waiting_for(a); });
        tr_->finish_recv(grad_in_[static_cast<size_t>(g)].data());
        bytes = mb_size_ * out_numel * 4;
        break;
      }
      case Op::backward: {
        const int s = slot_of_mb_.at(a.mb);
        Stage::Slot& slot = slots_[static_cast<size_t>(s)];
        const float* dy = nullptr;
        int g = -1;
        if (!ctx_.last_stage()) {
          g = grad_of_mb_.at(a.mb);
          dy = grad_in_[static_cast<size_t>(g)].data();
        }
        float* dx = nullptr;
        if (!ctx_.first_stage()) {
          // outgoing gradient buffers rotate; reuse waits for that buffer's earlier send
          MPI_Request& r = grad_out_req_[static_cast<size_t>(grad_out_next_)];
          ctx_.wait(&r, [&] { return "SEND_GRAD buffer reuse before " + waiting_for(a); });
          dx = grad_out_[static_cast<size_t>(grad_out_next_)].data();
          pending_grad_out = grad_out_next_;
          grad_out_mb_[static_cast<size_t>(grad_out_next_)] = a.mb;
          grad_out_next_ = (grad_out_next_ + 1) % static_cast<int>(grad_out_.size());
        }
        LayerCtx lc{be_, cfg_.seed, sample_base + a.mb * mb_size_, true, slot.labels, 1.0f / static_cast<float>(cfg_.batch_size)};
        stage_.backward(slot, weights_.read(a.version), grads_.data(), dy, dx, lc, mb_size_, poll);
        if (cfg_.debug_versions)
          version_log_.push_back({a.mb, fwd_version_of_[a.mb], weights_.base() + a.version});
        weights_.done_reading(a.version);
        group_loss_ += slot_state_[static_cast<size_t>(s)].loss;
        if (fault_matches("nan", ctx_.rank(), ctx_.stage(), weights_.latest_id() + stride)) {
          const float nan = NAN;
          be_.from_host(grads_.data(), &nan, 1);  // test-only: poison this update's gradient
        }
        check_finite_grads(a.mb, "after its backward");
        if (g >= 0) {
          grad_of_mb_.erase(a.mb);
          free_grad_in_.push_back(g);
        }
        // the slot is free once its activation send has completed
        SlotState& st = slot_state_[static_cast<size_t>(s)];
        ctx_.wait(&st.send, [&] { return "SEND_ACT mb " + std::to_string(a.mb) + " completion (rank " + std::to_string(ctx_.rank()) + ")"; });
        st.mb = -1;
        st.forwarded = false;
        slot_of_mb_.erase(a.mb);
        free_slots_.push_back(s);
        stats_.samples += ctx_.first_stage() ? mb_size_ : 0;
        break;
      }
      case Op::send_grad: {
        PT_CHECK(pending_grad_out >= 0, "SEND_GRAD without a backward");
        bytes = mb_size_ * in_numel * 4;
        tr_->isend(grad_out_[static_cast<size_t>(pending_grad_out)].data(), static_cast<size_t>(mb_size_ * in_numel), a.peer,
                   tag(kTagGrad, a.mb), ctx_.p2p(), &grad_out_req_[static_cast<size_t>(pending_grad_out)]);
        pending_grad_out = -1;
        stats_.bytes_p2p += bytes;
        break;
      }
      case Op::allreduce: {
        float loss = static_cast<float>(group_loss_);
        be_.from_host(grads_.data() + nparams, &loss, 1);
        bytes = static_cast<int64_t>((nparams + 1) * 4);
        tr_->iallreduce(grads_.data(), nparams + 1, ctx_.stage_comm(), &allreduce_req_);
        stats_.bytes_allreduce += bytes;
        // what a ring allreduce puts on the network from this rank: 2 (r-1)/r of the payload
        stats_.bytes_allreduce_network += 2 * (ctx_.stage_replicas() - 1) * bytes / ctx_.stage_replicas();
        break;
      }
      case Op::optimizer_step: {
        double loss_sum = group_loss_;
        if (ctx_.stage_replicas() > 1) {
          ctx_.wait(&allreduce_req_, [&] { return "ALLREDUCE of update " + std::to_string(a.mb) + " among the replicas of stage " + std::to_string(ctx_.stage()); });
          tr_->finish_allreduce(grads_.data());
          float l = 0;
          be_.to_host(&l, grads_.data() + nparams, 1);
          loss_sum = l;
        }
        bool skip = false;
        if (cfg_.skip_nonfinite) skip = group_nonfinite_ || !be_.all_finite(nparams, grads_.data());
        UpdateReport rep;
        rep.lr = opt_.current_lr();
        float* w = weights_.begin_update(a.version);
        if (!skip) opt_.step(w, grads_.data(), 1.0f / static_cast<float>(stride));
        else opt_.set_updates(opt_.updates() + 1), ++stats_.skipped_updates;
        be_.fill(grads_.data(), 0.0f, nparams + 1);
        rep.minibatches = weights_.latest_id();
        rep.loss_sum = loss_sum;
        rep.samples = stride * cfg_.batch_size;
        rep.skipped = skip;
        group_loss_ = 0;
        group_nonfinite_ = false;
        control.on_update(rep);
        fault_at_step(ctx_.rank(), ctx_.stage(), rep.minibatches);
        const CutAction cut_action = control.at_boundary(rep.minibatches);
        if (cut_action != CutAction::none) {
          // this rank's cut is right here; messages in flight across it are saved by their senders
          const Cut cut = consistent_cut(ir, rep.minibatches - weights_.base());
          PT_CHECK(cut.position[static_cast<size_t>(ctx_.rank())] == i + 1, "cut position mismatch");
          WorkerState st = capture(ir, i + 1, cut.crossing[static_cast<size_t>(ctx_.rank())]);
          control.save(st);
          if (cut_action == CutAction::checkpoint_and_stop) {
            quiesce(ir, cut);
            stopped = true;
          }
        }
        break;
      }
    }
    const double t1 = now_s();
    if (a.op == Op::forward || a.op == Op::backward || a.op == Op::optimizer_step) stats_.compute_s += t1 - t0;
    if (static_cast<int64_t>(timeline_.size()) < cfg_.trace_limit) timeline_.push_back({t0, t1, a.op, a.mb, bytes});
  }
  // drain outstanding sends before the buffers can be reused by another IR
  for (auto& r : grad_out_req_) ctx_.wait(&r, [&] { return std::string("final SEND_GRAD completion"); });
  for (auto& st : slot_state_) ctx_.wait(&st.send, [&] { return std::string("final SEND_ACT completion"); });
  stats_.wall_s += now_s() - t_begin;
  stats_.max_versions = std::max(stats_.max_versions, weights_.max_held());
  stats_.weight_bytes = static_cast<int64_t>(weights_.pool_size() * weights_.size() * 4);
  ir_ = nullptr;
  return !stopped;
}

WorkerState Executor::capture(const Schedule& ir, size_t position, const std::vector<size_t>& crossing) {
  WorkerState st;
  st.position = static_cast<int64_t>(position);
  st.latest = weights_.latest_id();
  const size_t n = static_cast<size_t>(stage_.num_params());
  for (auto& [id, ptr] : weights_.live()) {
    std::vector<float> w(n);
    be_.to_host(w.data(), ptr, n);
    st.versions.emplace_back(id, std::move(w));
  }
  for (Buffer* b : opt_.state()) {
    std::vector<float> v(b->size());
    be_.to_host(v.data(), b->data(), v.size());
    st.optimizer.push_back(std::move(v));
  }
  st.optimizer_updates = opt_.updates();
  for (auto& [mb, s] : slot_of_mb_) {
    if (!slot_state_[static_cast<size_t>(s)].forwarded) continue;  // only posted ahead: not state
    WorkerState::Unit u;
    u.mb = static_cast<int32_t>(mb);
    u.loss = slot_state_[static_cast<size_t>(s)].loss;
    auto fv = fwd_version_of_.find(mb);
    u.fwd_version = fv != fwd_version_of_.end() ? fv->second : -1;
    u.slot.resize(static_cast<size_t>(stage_.slot_floats()));
    be_.to_host(u.slot.data(), slot_mem_[static_cast<size_t>(s)].data(), u.slot.size());
    st.units.push_back(std::move(u));
  }
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  for (size_t idx : crossing) {
    const Action& a = acts[idx];
    WorkerState::Message m;
    m.action = static_cast<int64_t>(idx);
    const float* src = nullptr;
    size_t count = 0;
    if (a.op == Op::send_act) {
      src = stage_.output(slots_[static_cast<size_t>(slot_of_mb_.at(a.mb))]);
      count = static_cast<size_t>(mb_size_ * stage_.out_shape().numel());
    } else {
      for (size_t b = 0; b < grad_out_.size(); ++b)
        if (grad_out_mb_[b] == a.mb) src = grad_out_[b].data();
      count = static_cast<size_t>(mb_size_ * stage_.in_shape().numel());
    }
    PT_CHECK(src, "no buffer holds the crossing " << op_name(a.op) << " of mb " << a.mb);
    m.payload.resize(count);
    be_.to_host(m.payload.data(), src, count);
    st.crossing.push_back(std::move(m));
  }
  return st;
}

void Executor::restore(const Schedule& ir, const WorkerState& st) {
  weights_.restore(st.versions, st.latest, st.epoch_start);
  auto state = opt_.state();
  PT_CHECK(state.size() == st.optimizer.size(), "optimizer state: checkpoint has " << st.optimizer.size() << " buffers, "
                                                                                   << "optimizer " << state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    PT_CHECK(st.optimizer[i].size() == state[i]->size(), "optimizer buffer size mismatch");
    be_.from_host(state[i]->data(), st.optimizer[i].data(), st.optimizer[i].size());
  }
  opt_.set_updates(st.optimizer_updates);
  for (const WorkerState::Unit& u : st.units) {
    PT_CHECK(!free_slots_.empty(), "no free slot to restore mb " << u.mb);
    const int s = free_slots_.front();
    free_slots_.pop_front();
    PT_CHECK(u.slot.size() == static_cast<size_t>(stage_.slot_floats()), "restored slot size mismatch");
    be_.from_host(slot_mem_[static_cast<size_t>(s)].data(), u.slot.data(), u.slot.size());
    slot_state_[static_cast<size_t>(s)].mb = u.mb;
    slot_state_[static_cast<size_t>(s)].loss = u.loss;
    slot_state_[static_cast<size_t>(s)].forwarded = true;
    slot_of_mb_[u.mb] = s;
    if (u.fwd_version >= 0) fwd_version_of_[u.mb] = u.fwd_version;
    if (stage_.has_loss()) {
      for (int64_t j = 0; j < mb_size_; ++j) idx_[static_cast<size_t>(j)] = (*perm_)[static_cast<size_t>(u.mb * mb_size_ + j)];
      train_.get_labels(idx_.data(), mb_size_, host_labels_.data());
      be_.labels_from_host(slot_labels_[static_cast<size_t>(s)], host_labels_.data(), static_cast<size_t>(mb_size_));
    }
  }
  // send again what was in flight across the cut
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  for (const WorkerState::Message& m : st.crossing) {
    const Action& a = acts[static_cast<size_t>(m.action)];
    if (a.op == Op::send_act) {
      const int s = slot_of_mb_.at(a.mb);
      tr_->isend(stage_.output(slots_[static_cast<size_t>(s)]), m.payload.size(), a.peer, tag(kTagAct, a.mb), ctx_.p2p(),
                 &slot_state_[static_cast<size_t>(s)].send);
    } else {
      const int b = grad_out_next_;
      grad_out_next_ = (grad_out_next_ + 1) % static_cast<int>(grad_out_.size());
      be_.from_host(grad_out_[static_cast<size_t>(b)].data(), m.payload.data(), m.payload.size());
      grad_out_mb_[static_cast<size_t>(b)] = a.mb;
      tr_->isend(grad_out_[static_cast<size_t>(b)].data(), m.payload.size(), a.peer, tag(kTagGrad, a.mb), ctx_.p2p(),
                 &grad_out_req_[static_cast<size_t>(b)]);
    }
  }
}

void Executor::quiesce(const Schedule& ir, const Cut& cut) {
  // Receive every message that crossed the cut toward this rank (into the buffer already
  // posted for it, or a scratch buffer), so every send completes; cancel the rest.
  const int me = ctx_.rank();
  std::vector<std::pair<int, const Action*>> incoming;  // (sender, its send action)
  for (size_t w = 0; w < ir.workers.size(); ++w)
    for (size_t idx : cut.crossing[w]) {
      const Action& a = ir.workers[w][idx];
      if (a.peer == me) incoming.emplace_back(static_cast<int>(w), &a);
    }
  std::vector<Buffer> scratch;
  std::vector<MPI_Request> reqs;
  for (auto& [src, a] : incoming) {
    const bool grad = a->op == Op::send_grad;
    auto posted = grad ? grad_of_mb_.find(a->mb) : slot_of_mb_.find(a->mb);
    const bool already = grad ? posted != grad_of_mb_.end() : (posted != slot_of_mb_.end() &&
                                                                slot_state_[static_cast<size_t>(posted->second)].recv != MPI_REQUEST_NULL);
    if (already) {
      MPI_Request* r = grad ? &grad_in_req_[static_cast<size_t>(posted->second)] : &slot_state_[static_cast<size_t>(posted->second)].recv;
      ctx_.wait(r, [&] { return std::string("a message crossing the checkpoint cut"); });
      continue;
    }
    const size_t n = static_cast<size_t>(mb_size_ * (grad ? stage_.out_shape().numel() : stage_.in_shape().numel()));
    scratch.emplace_back(be_, n);
    reqs.push_back(MPI_REQUEST_NULL);
    tr_->irecv(scratch.back().data(), n, src, tag(grad ? kTagGrad : kTagAct, a->mb), ctx_.p2p(), &reqs.back());
  }
  for (auto& r : reqs) ctx_.wait(&r, [&] { return std::string("a message crossing the checkpoint cut"); });
  // our own crossing sends complete now that every peer drained them
  for (auto& r : grad_out_req_) ctx_.wait(&r, [&] { return std::string("SEND_GRAD completion at the checkpoint cut"); });
  for (auto& st : slot_state_) ctx_.wait(&st.send, [&] { return std::string("SEND_ACT completion at the checkpoint cut"); });
  // receives posted ahead for actions after the cut will never be matched: cancel them
  auto cancel = [](MPI_Request* r) {
    if (*r == MPI_REQUEST_NULL) return;
    MPI_Cancel(r);
    MPI_Wait(r, MPI_STATUS_IGNORE);
  };
  for (auto& st : slot_state_) cancel(&st.recv);
  for (auto& r : grad_in_req_) cancel(&r);
}

Executor::EvalResult Executor::evaluate(const Schedule& ir) {
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  const int64_t N = test_.size(), emb = cfg_.eval_mb;
  const int64_t in_numel = stage_.in_shape().numel(), out_numel = stage_.out_shape().numel();
  // two receive and two send buffers, allocated on the first evaluation and kept
  if (!eval_in_[0].data()) {
    for (int b = 0; b < 2; ++b) {
      eval_in_[b] = Buffer(be_, static_cast<size_t>(emb * in_numel));
      eval_out_[b] = Buffer(be_, static_cast<size_t>(emb * out_numel));
    }
    if (stage_.has_loss()) eval_labels_ = be_.alloc_int(static_cast<size_t>(emb));
  }
  Buffer* in_buf = eval_in_;
  Buffer* out_buf = eval_out_;
  int32_t* labels = eval_labels_;
  MPI_Request in_req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL}, out_req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  auto count_of = [&](int64_t m) { return std::min(emb, N - m * emb); };
  // receive positions in order; post up to two ahead
  std::vector<size_t> recvs;
  for (size_t i = 0; i < acts.size(); ++i)
    if (acts[i].op == Op::recv_act) recvs.push_back(i);
  // a buffer is re-posted only after the forward that read it has finished
  size_t next_post = 0, next_wait = 0, consumed = 0;
  auto post = [&]() {
    while (next_post < recvs.size() && next_post < consumed + 2) {
      const Action& a = acts[recvs[next_post]];
      const int b = static_cast<int>(next_post % 2);
      tr_->irecv(in_buf[b].data(), static_cast<size_t>(count_of(a.mb) * in_numel), a.peer, tag(kTagEval, a.mb), ctx_.p2p(),
                 &in_req[b]);
      ++next_post;
    }
  };
  EvalResult res;
  const float* input = nullptr;
  const float* output = nullptr;
  int send_next = 0;
  PollHook poll{nullptr, nullptr};
  const float* params = weights_.latest();
  for (size_t i = 0; i < acts.size(); ++i) {
    post();
    const Action& a = acts[i];
    const int64_t n = count_of(a.mb);
    if (a.op == Op::recv_act) {
      const int b = static_cast<int>(next_wait % 2);
      ctx_.wait(&in_req[b], [&] { return "evaluation " + waiting_for(a); });
      tr_->finish_recv(in_buf[b].data());
      input = in_buf[b].data();
      ++next_wait;
    } else if (a.op == Op::forward) {
      for (int64_t j = 0; j < n; ++j) idx_[static_cast<size_t>(j)] = a.mb * emb + j;
      if (ctx_.first_stage()) {
        test_.get(idx_.data(), n, host_x_.data(), nullptr);
        be_.from_host(in_buf[0].data(), host_x_.data(), static_cast<size_t>(n * in_numel));
        input = in_buf[0].data();
      }
      LayerCtx lc{be_, cfg_.seed, 0, false, nullptr, 1.0f};
      output = stage_.infer(input, params, lc, n, poll);
      if (!ctx_.first_stage()) ++consumed;
      if (stage_.has_loss()) {
        test_.get_labels(idx_.data(), n, host_labels_.data());
        be_.labels_from_host(labels, host_labels_.data(), static_cast<size_t>(n));
        double l = 0;
        int64_t c = 0;
        stage_.eval_loss(output, labels, n, &l, &c);
        res.loss_sum += l;
        res.correct += c;
        res.samples += n;
      }
    } else if (a.op == Op::send_act) {
      const int b = send_next;
      send_next ^= 1;
      ctx_.wait(&out_req[b], [&] { return std::string("evaluation send buffer reuse"); });
      be_.copy(out_buf[b].data(), output, static_cast<size_t>(n * out_numel));
      tr_->isend(out_buf[b].data(), static_cast<size_t>(n * out_numel), a.peer, tag(kTagEval, a.mb), ctx_.p2p(), &out_req[b]);
    }
  }
  for (auto& r : out_req) ctx_.wait(&r, [&] { return std::string("evaluation send completion"); });
  // sum over the last stage's replicas onto its replica 0 (the reporter)
  if (ctx_.last_stage() && ctx_.stage_replicas() > 1) {
    double v[3] = {res.loss_sum, static_cast<double>(res.correct), static_cast<double>(res.samples)};
    ctx_.allreduce_sum(v, 3, ctx_.stage_comm(), "evaluation totals");
    res.loss_sum = v[0];
    res.correct = static_cast<int64_t>(v[1]);
    res.samples = static_cast<int64_t>(v[2]);
  }
  return res;
}

}  // namespace pt
