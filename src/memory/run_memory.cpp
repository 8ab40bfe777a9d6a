// A run's memory (memory_model.hpp): the deck's model, layout and schedule through the memory
// model, the budget a rank may use, the evaluation microbatch that fits (train.eval_batch_size
// = 0), and the fit check's message.
#include <algorithm>
#include <cstdio>

#include "pipetrain/backend.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/memory_info.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/optim.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

ModelMemoryInputs model_inputs(const Deck& deck, int64_t label_count, int64_t eval_mb, bool kernels = true) {
  ModelMemoryInputs m;
  m.bf16 = deck.train.precision == Precision::bf16;
  m.optimizer_states = static_cast<int>(deck.train.optimizer->state_names(optim_config(deck.train)).size());
  m.labels_per_sample = label_count;
  m.eval_mb = eval_mb;
  if (kernels && deck.run.device != Device::cuda) m.kernels = make_host_backend();
  return m;
}

// The rank terms of a deck's run (the base is added per rank).
MemoryShared shared_terms(const Deck& deck, const Model& model, int64_t data_bytes, int64_t label_count, bool resuming) {
  MemoryShared sh;
  sh.dataset = data_bytes;
  sh.label_count = label_count;
  const bool every = deck.checkpoint.every_steps > 0 || deck.checkpoint.every_seconds > 0;
  sh.checkpoints = deck.checkpoint.at_end || every || resuming;
  sh.mid_segment = every || resuming;
  sh.resuming = resuming;
  sh.model_params = model.num_params(0, model.size());
  if (model.shard().parts > 1 && model.shard().rank == 0) {  // weights.h5's whole tensors (run_outputs.cpp)
    const Model whole(deck, model.input_shape(), model.classes());
    int64_t gather = 0;
    for (int l = 0; l < model.size(); ++l)
      if (model.layer(l).spec().tensor_parts > 1) gather = std::max(gather, model.layer(l).num_params() * model.shard().parts);
    sh.tensor_whole = whole.num_params(0, whole.size()) + gather;
  }
  return sh;
}

// The evaluation buffers of the whole model as one stage with evaluation microbatch e.
int64_t evaluation_bytes(const Deck& deck, const Model& model, int64_t label_count, int64_t e) {
  const auto src = model_footprints(model, model_inputs(deck, label_count, e, false));
  return stage_memory(src->stage(0, model.size(), 1, false, Recompute::none), 1, 1)[MemCategory::evaluation];
}


}  // namespace

std::vector<RankMemory> run_memory(const Deck& deck, const TrainSetup& setup, const RunMemoryInputs& in, int64_t eval_mb) {
  const Layout& L = setup.layout;
  const int64_t spe = setup.steps_per_epoch(deck, in.train_samples), total = setup.total_steps(deck, in.train_samples);
  const int64_t longest = std::max<int64_t>(1, TrainSetup::segment_steps(0, spe, total, deck.train.eval_every));
  const Schedule ir = make_schedule(*setup.def, L, memory_ir_steps(*setup.def, L, setup.microbatches, longest), setup.microbatches);
  MemoryShared sh = shared_terms(deck, *setup.model, in.data_bytes, in.label_count, in.resuming);
  const std::vector<int> reporter = L.stages_of_rank(L.rank_of(L.stages() - 1, 0));
  for (int s = 0; s < L.stages(); ++s)  // the reporter receives the others' weights one stage at a time
    if (std::find(reporter.begin(), reporter.end(), s) == reporter.end())
      sh.largest_stage_params = std::max(sh.largest_stage_params, setup.model->num_params(L.first_layer(s), L.end_layer(s)));
  const MemoryModel mm(model_footprints(*setup.model, model_inputs(deck, in.label_count, eval_mb)), L, ir, setup.mb_size, sh,
                       setup.recompute);
  std::vector<RankMemory> out = mm.ranks();
  for (RankMemory& m : out) {
    const size_t r = static_cast<size_t>(m.rank);
    const int64_t base = in.base.empty() ? 0 : in.base[std::min(r, in.base.size() - 1)];
    m[MemCategory::runtime] += base;
  }
  return out;
}

DeckMemory deck_memory(const Deck& deck, const Model& model, int64_t budget, int64_t base) {
  const DataInfo info = data_info(deck);
  DeckMemory d;
  d.eval_mb = resolve_eval_batch(deck, model, info.test_samples, info.label_count, budget);
  d.source = model_footprints(model, model_inputs(deck, info.label_count, d.eval_mb));
  d.shared = shared_terms(deck, model, info.held_bytes, info.label_count, false);
  d.shared.base = base;
  return d;
}

MemoryBudget memory_budget(const Deck& deck, int ranks_on_node) {
  MemoryBudget b;
  b.ranks_on_node = std::max(1, ranks_on_node);
  b.resident = std::max<int64_t>(0, resident_bytes());
  if (deck.cluster.memory > 0) {
    b.from_deck = true;
    b.bytes = static_cast<int64_t>(deck.cluster.memory);
    return b;
  }
  b.available = node_available_bytes();
  b.bytes = b.available < 0 ? 0 : b.available / b.ranks_on_node + b.resident;  // 0: the OS does not say (no check)
  return b;
}

std::string MemoryBudget::source(const Deck& deck) const {
  if (from_deck) return "cluster.memory (" + deck.where("cluster.memory") + ")";
  return "the node's available memory " + bytes_text(static_cast<double>(available)) + " (MemAvailable, or the cgroup limit) / " +
         std::to_string(ranks_on_node) + " rank" + (ranks_on_node == 1 ? "" : "s") + " on the node + the " +
         bytes_text(static_cast<double>(resident)) + " the rank held then (cluster.memory sets it instead)";
}

int64_t resolve_eval_batch(const Deck& deck, const Model& model, int64_t test_samples, int64_t label_count, int64_t budget) {
  const int64_t test = std::max<int64_t>(1, test_samples);
  if (deck.train.eval_batch_size > 0) return std::min(deck.train.eval_batch_size, test);
  const int64_t hi_cap = std::min(test, kEvalAutoMax);
  if (budget <= 0) return hi_cap;  // no budget known: the cap alone
  const double share = kEvalBudgetShare * static_cast<double>(budget);
  int64_t lo = 1, hi = hi_cap;  // the largest e in [1, hi_cap] with evaluation bytes <= share (at least 1)
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (static_cast<double>(evaluation_bytes(deck, model, label_count, mid)) <= share) lo = mid;
    else hi = mid - 1;
  }
  return lo;
}

std::string fit_problem(const Deck& deck, const TrainSetup& setup, const std::vector<RankMemory>& est,
                        const std::vector<MemoryBudget>& budgets, int64_t eval_mb) {
  for (const RankMemory& m : est) {
    const MemoryBudget& b = budgets[std::min(static_cast<size_t>(m.rank), budgets.size() - 1)];
    if (b.bytes <= 0 || m.total() <= b.bytes) continue;
    const MemCategory big = m.largest();
    std::string s = "rank " + std::to_string(m.rank) + " does not fit in memory: its estimate is " + bytes_text(static_cast<double>(m.total())) +
                    " (largest: " + memory_category_name(big) + " " + bytes_text(static_cast<double>(m[big])) + ", " +
                    memory_category_words(big) + ") against a budget of " + bytes_text(static_cast<double>(b.bytes)) + " from " +
                    b.source(deck) + ". Nothing was allocated. Remedies: more microbatches (parallel.microbatches = " +
                    std::to_string(setup.microbatches) + ": more make each unit's activations smaller), recomputation "
                    "(parallel.recompute = \"selective\" or \"full\": keep less per unit), more stages (more ranks, or a "
                    "parallel.split that gives this rank fewer layers), a smaller evaluation microbatch "
                    "(train.eval_batch_size = " + std::to_string(eval_mb) + " now; 0 sizes it to fit). "
                    "`pipetrain check " + deck.path + " --ranks " + std::to_string(setup.layout.ranks()) +
                    "` prints every rank's estimate by category";
    return s;
  }
  return "";
}

}  // namespace pt
