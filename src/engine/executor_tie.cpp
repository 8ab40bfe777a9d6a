// Tied parameters (lm_head's `tie` to the embedding): each holder keeps its own copy and
// accumulates its own gradient; before either holder's update the two gradients are summed
// once, embedding's + head's, and both copies take the same step, so they stay bitwise equal
// and a tied run equals one process. Holders on different ranks exchange their gradients
// (replica q with replica q); holders on one rank (one stage, or a V's first and last stage)
// add them in place.
#include "executor_internal.hpp"
#include "pipetrain/error.hpp"

namespace pt {

void Executor::find_ties() {
  const Layout& L = ctx_.layout();
  if (stages_.empty()) return;
  const Model& m = stages_.front()->stage->model();
  auto stage_of_layer = [&](int l) {
    for (int s = 0; s < L.stages(); ++s)
      if (l >= L.first_layer(s) && l < L.end_layer(s)) return s;
    return -1;
  };
  for (int h = 0; h < m.size(); ++h) {
    const Layer& head = m.layer(h);
    const std::vector<ParamTensor> hp = head.params();
    for (size_t t = 0; t < hp.size(); ++t) {
      if (head.tied_to(static_cast<int>(t)).empty()) continue;
      const int e = head.spec().tie_layer;
      const ParamTensor ep = m.layer(e).params().front();  // the embedding's token matrix
      const int se = stage_of_layer(e), sh = stage_of_layer(h);
      if (!ctx_.holds(se) && !ctx_.holds(sh)) continue;
      if (L.replicas_of(se) != L.replicas_of(sh))
        fail(Exit::bad_input, "layer '" + head.name() + "' ties its weight to '" + m.layer(e).name() + "', but their stages " +
                                  std::to_string(se) + " and " + std::to_string(sh) + " have " + std::to_string(L.replicas_of(se)) +
                                  " and " + std::to_string(L.replicas_of(sh)) + " replicas; tied stages need the same replica count",
             true);
      const int64_t eoff = (ctx_.holds(se) ? rt(se).stage->param_offset(e) : 0) + ep.offset;
      const int64_t hoff = (ctx_.holds(sh) ? rt(sh).stage->param_offset(h) : 0) + hp[t].offset;
      ties_.push_back({se, sh, eoff, hoff, ep.size});
    }
  }
}

void Executor::apply_ties(const Action& a) {
  for (Tie& t : ties_) {
    if (a.stage != t.emb_stage && a.stage != t.head_stage) continue;
    const bool local = ctx_.holds(t.emb_stage) && ctx_.holds(t.head_stage);
    if (local && t.done_group == a.mb) continue;  // the sum is already in both copies
    const size_t n = static_cast<size_t>(t.size);
    std::vector<float> emb(n), head(n);
    if (local) {
      be_.to_host(emb.data(), rt(t.emb_stage).grads.data() + t.emb_offset, n);
      be_.to_host(head.data(), rt(t.head_stage).grads.data() + t.head_offset, n);
    } else {
      const bool is_emb = a.stage == t.emb_stage;
      std::vector<float>& mine = is_emb ? emb : head;
      std::vector<float>& theirs = is_emb ? head : emb;
      be_.to_host(mine.data(), rt(a.stage).grads.data() + (is_emb ? t.emb_offset : t.head_offset), n);
      const int partner = ctx_.layout().rank_of(is_emb ? t.head_stage : t.emb_stage, ctx_.replica());
      Request q[2];
      tr_->isend_host(mine.data(), n, partner, kTagTie + a.mb % 4096, ctx_.world(), &q[0]);
      tr_->irecv_host(theirs.data(), n, partner, kTagTie + a.mb % 4096, ctx_.world(), &q[1]);
      for (auto& r : q) wait(&r, [&] { return "the tied gradient of update " + std::to_string(a.mb) + " from rank " + std::to_string(partner); });
    }
    for (size_t i = 0; i < n; ++i) emb[i] = emb[i] + head[i];  // embedding's + head's, the same on both holders
    if (ctx_.holds(t.emb_stage)) be_.from_host(rt(t.emb_stage).grads.data() + t.emb_offset, emb.data(), n);
    if (ctx_.holds(t.head_stage)) be_.from_host(rt(t.head_stage).grads.data() + t.head_offset, emb.data(), n);
    t.done_group = a.mb;
  }
}

}  // namespace pt
