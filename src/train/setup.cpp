// TrainSetup: what a deck and a rank count determine (model, layout, schedule, units),
// the epoch arithmetic, and the formulas summary.json sets beside measured values.
#include <algorithm>

#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "pipetrain/train.hpp"

namespace pt {

TrainSetup TrainSetup::from_deck(const Deck& deck, int world_size, TensorShard shard) {
  if (deck.parallel.split_auto)
    fail(Exit::bad_input, deck.where("parallel.split") + ": key 'parallel.split': \"auto\" is planned when `pipetrain train` "
                              "starts; here give the split (see `pipetrain plan " + deck.path + " --ranks " +
                              std::to_string(world_size) + "`)", true);
  TrainSetup t;
  DataInfo info = data_info(deck);
  t.model = std::make_unique<Model>(deck, info.shape, info.classes, shard);
  t.def = &schedule_def(deck.parallel.schedule);
  t.layout = Layout::from_deck(deck, t.model->size(), world_size, *t.def);
  t.microbatches = t.def->units_per_minibatch(static_cast<int>(deck.parallel.microbatches));
  if (const std::string why = t.def->problem(t.layout, t.microbatches); !why.empty())
    fail(Exit::bad_input, deck.where("parallel.microbatches") + ": key 'parallel.microbatches' (schedule " + t.def->name +
                              ", " + t.layout.str() + "): " + why, true);
  t.mb_size = t.def->unit_size(deck.train.batch_size, static_cast<int>(deck.parallel.microbatches));
  t.grad_norm = deck.train.clip_grad_norm > 0;
  t.recompute = deck.parallel.recompute.for_stages(t.layout.stages());
  if (const std::string why = tie_conflict(deck, *t.def, t.layout); !why.empty())
    fail(Exit::bad_input, deck.where("parallel.schedule") + ": key 'parallel.schedule': " + why, true);
  if (deck.train.eval_every % t.boundary_stride() != 0)
    fail(Exit::bad_input, deck.where("train.eval_every") + ": key 'train.eval_every': " + std::to_string(deck.train.eval_every) +
                              " must be a multiple of " + std::to_string(t.boundary_stride()) + " (replicas " +
                              t.layout.replication() + " of " + deck.parallel.schedule + " update together every that many steps)",
         true);
  return t;
}

Schedule TrainSetup::schedule(int64_t steps) const { return make_schedule(*def, layout, steps, microbatches, grad_norm); }

std::string tie_conflict(const Deck& deck, const ScheduleDef& def, const Layout& layout) {
  if (def.flush) return "";
  const auto& layers = deck.model.layers;
  auto stage_of_layer = [&](size_t l) {
    int s = 0;
    while (s + 1 < layout.stages() && layout.first_layer(s + 1) <= static_cast<int>(l)) ++s;
    return s;
  };
  for (size_t l = 0; l < layers.size(); ++l) {
    if (layers[l].tie_name().empty()) continue;
    for (size_t k = 0; k < layers.size(); ++k)
      if (layers[k].name == layers[l].tie_name() && stage_of_layer(k) != stage_of_layer(l)) {
        std::string flush;
        for (const ScheduleDef* d : schedule_defs())
          if (d->flush) flush += (flush.empty() ? "" : ", ") + d->name;
        return def.name + " updates stages without a flush, so the copies of layer '" + layers[l].name + "' (stage " +
               std::to_string(stage_of_layer(l)) + ") tied to '" + layers[k].name + "' (stage " +
               std::to_string(stage_of_layer(k)) + ") would hold different weight versions; train tied layers in different " +
               "stages with a flush schedule (" + flush + "), keep them in one stage, or remove `tie` (docs/MODELS.md)";
      }
  }
  return "";
}

int64_t TrainSetup::version_stride(int stage) const { return def->version_stride(layout, stage); }

int64_t TrainSetup::boundary_stride() const { return def->boundary_stride(layout); }

int64_t TrainSetup::steps_per_epoch(const Deck& deck, int64_t N) const {
  const int64_t B = deck.train.batch_size;
  const int64_t lcm = boundary_stride();
  int64_t spe = N / B;
  spe -= spe % lcm;
  if (spe <= 0)
    fail(Exit::bad_input, deck.where("train.batch_size") + ": key 'train.batch_size': " + std::to_string(B) +
                              " leaves no full minibatch" + (lcm > 1 ? " group (replicas " + layout.replication() + ")" : std::string()) +
                              " in the " + std::to_string(N) + " training samples", true);
  return spe;
}

int64_t TrainSetup::total_steps(const Deck& deck, int64_t N) const {
  int64_t t = deck.train.epochs * steps_per_epoch(deck, N);
  if (deck.train.max_steps > 0) t = std::min(t, deck.train.max_steps);
  return t - t % boundary_stride();
}

int64_t TrainSetup::segment_steps(int64_t done, int64_t spe, int64_t total, int64_t eval_every) {
  if (done >= total) return 0;
  const int64_t in_epoch = done % spe;
  int64_t n = std::min(spe - in_epoch, total - done);
  if (eval_every > 0) n = std::min(n, eval_every - in_epoch % eval_every);
  return n;
}

int TrainSetup::versions_formula(int stage) const { return def->versions_formula(layout, stage); }

int TrainSetup::in_flight_formula(int stage) const { return def->in_flight_formula(layout, stage, microbatches); }

}  // namespace pt
