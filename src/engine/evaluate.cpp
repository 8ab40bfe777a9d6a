// Evaluation: the forward-only IR over the test set through the same stages, on the latest
// weights (in bf16 their bf16 copy, what training computes with), with two input and two
// output buffers per held stage (receives posted ahead in IR order while a stage has a free
// input buffer). The last stage scores with its loss layer; replicas of the last stage sum
// their totals onto the reporter.
#include <algorithm>

#include "executor_internal.hpp"
#include "pipetrain/error.hpp"

namespace pt {
namespace {

// Per held stage: receives posted, waited and consumed (by the forward reading them), sends made.
struct EvalRing {
  int posted = 0, waited = 0, consumed = 0, sent = 0;
  Request in_req[2], out_req[2];
  const float* input = nullptr;
  const float* output = nullptr;
};

}  // namespace

Executor::EvalResult Executor::evaluate(const Schedule& ir) {
  const auto& acts = ir.workers[static_cast<size_t>(ctx_.rank())];
  const int64_t N = test_.size(), emb = cfg_.eval_mb;
  auto count_of = [&](int64_t m) { return std::min(emb, N - m * emb); };
  for (StageRuntime* r : stages_) r->eval_buffers(emb);
  std::map<int, EvalRing> rings;
  std::vector<size_t> recvs;
  for (size_t i = 0; i < acts.size(); ++i)
    if (acts[i].op == Op::recv_act) recvs.push_back(i);
  size_t next = 0;
  auto post = [&]() {  // a buffer is re-posted only after the forward that read it
    while (next < recvs.size()) {
      const Action& a = acts[recvs[next]];
      EvalRing& g = rings[a.stage];
      if (g.posted >= g.consumed + 2) return;
      StageRuntime& r = rt(a.stage);
      tr_->irecv(r.eval_buffers(emb).in[g.posted % 2].data(), static_cast<size_t>(r.in.floats(count_of(a.mb))), a.peer,
                 tag(kTagEval, a.stage - 1, a.mb), ctx_.p2p(), &g.in_req[g.posted % 2]);
      ++g.posted, ++next;
    }
  };
  EvalResult res;
  for (const Action& a : acts) {
    post();
    EvalRing& g = rings[a.stage];
    StageRuntime& r = rt(a.stage);
    StageRuntime::EvalBuffers& eb = r.eval_buffers(emb);
    const int64_t n = count_of(a.mb);
    if (a.op == Op::recv_act) {
      const int b = g.waited++ % 2;
      wait(&g.in_req[b], [&] { return "evaluation " + waiting_for(a); });
      tr_->finish_recv(eb.in[b].data());
      g.input = eb.in[b].data();
    } else if (a.op == Op::forward) {
      std::vector<const float*> io = {g.input, nullptr};
      const double t0 = now_s();
      eval_forward(a, n, io, res);
      stats_.eval_compute_s += now_s() - t0;
      if (r.first) stats_.eval_samples += n;
      g.output = io[1];
      if (!r.first) ++g.consumed;
    } else if (a.op == Op::send_act) {
      const int b = g.sent++ % 2;
      wait(&g.out_req[b], [&] { return std::string("evaluation send buffer reuse"); });
      be_.copy(eb.out[b].data(), g.output, static_cast<size_t>(r.out.floats(n)));
      tr_->isend(eb.out[b].data(), static_cast<size_t>(r.out.floats(n)), a.peer, tag(kTagEval, a.stage, a.mb), ctx_.p2p(),
                 &g.out_req[b]);
    }
  }
  for (auto& [s, g] : rings)
    for (auto& q : g.out_req) wait(&q, [&] { return std::string("evaluation send completion"); });
  if (ctx_.holds_last_stage() && ctx_.replicas() > 1) {  // sum over the last stage's replicas onto replica 0
    double v[4] = {res.loss_sum, static_cast<double>(res.correct), static_cast<double>(res.samples), static_cast<double>(res.labels)};
    ctx_.allreduce_sum(v, 4, ctx_.stage_comm(ctx_.layout().stages() - 1), "evaluation totals");
    res.loss_sum = v[0], res.correct = static_cast<int64_t>(v[1]), res.samples = static_cast<int64_t>(v[2]);
    res.labels = static_cast<int64_t>(v[3]);
  }
  return res;
}

// One evaluation FORWARD: io[0] is the stage input (stage 0 reads the test samples instead);
// io[1] receives the stage output (valid until the stage's next forward). The last stage
// scores the unit with its loss layer.
void Executor::eval_forward(const Action& a, int64_t n, std::vector<const float*>& io, EvalResult& res) {
  StageRuntime& r = rt(a.stage);
  const int64_t emb = cfg_.eval_mb;
  StageRuntime::EvalBuffers& eb = r.eval_buffers(emb);
  for (int64_t j = 0; j < n; ++j) idx_[static_cast<size_t>(j)] = a.mb * emb + j;
  if (r.first) {
    test_.get(idx_.data(), n, host_x_.data(), nullptr);
    be_.from_host(eb.in[0].data(), host_x_.data(), static_cast<size_t>(r.in.floats(n)));
    io[0] = eb.in[0].data();
  }
  LayerCtx lc{be_, cfg_.seed, 0, false, eb.labels, 1.0f};
  lc.state = r.state.data();
  lc.tensor = cfg_.tensor;
  const ParamView params = r.weights->read_latest();  // bf16: its bf16 copy, as training reads
  io[1] = r.stage->infer(io[0], params, lc, n, PollHook{});
  if (!r.last) return;
  test_.get_labels(idx_.data(), n, host_labels_.data());
  be_.labels_from_host(eb.labels, host_labels_.data(), static_cast<size_t>(n * r.labels_per_sample));
  double l = 0;
  int64_t c = 0, scored = 0;
  r.stage->eval_loss(io[1], params, lc, n, &l, &c, &scored);
  res.loss_sum += l;
  res.correct += c;
  res.samples += n;
  res.labels += scored;
}

}  // namespace pt
