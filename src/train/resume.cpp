// Resume: pick the newest committed checkpoint that every rank can verify (falling back to
// older ones with the reason printed), refuse one made for another model, and build this
// rank's starting state: exact on the same layout and schedule, re-sliced otherwise when
// the checkpoint holds no microbatches in flight.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "pipetrain/error.hpp"
#include "resume.hpp"

namespace pt {
namespace {

// Ranks of the old layout whose files this rank needs: its own and, for each stage it
// holds, replica 0's (exact); else replica 0 of every old stage overlapping its layers.
std::vector<int> needed_ranks(const CheckpointMeta& meta, bool exact, const ParallelContext& ctx,
                              const std::vector<const StageRuntime*>& stages) {
  const Layout old = checkpoint_layout(meta, 1 << 30);
  std::vector<int> out = {exact ? ctx.rank() : 0};  // rank 0's file carries the elapsed time
  for (const StageRuntime* r : stages)
    for (int s = 0; s < old.stages(); ++s) {
      const bool overlaps = old.first_layer(s) < r->stage->last() && old.end_layer(s) > r->stage->first();
      if ((exact && s == r->id) || (!exact && overlaps)) out.push_back(old.rank_of(s, 0));
    }
  return out;
}

bool all_ranks(const ParallelContext& ctx, bool mine) {
  int v = mine ? 1 : 0, all = 0;
  MPI_Request req;
  MPI_Iallreduce(&v, &all, 1, MPI_INT, MPI_MIN, ctx.job(), &req);  // every tensor rank too
  ctx.wait(&req, [] { return std::string("agreement on the checkpoint to resume from"); });
  return all != 0;
}

std::string list_text(const std::vector<int>& v) { return nlohmann::json(v).dump(); }

// Problems every rank sees the same way: another model, another data order, or an async
// mid-epoch cut on another layout. Collective errors.
void check_against_deck(const std::string& dir, const CheckpointMeta& meta, const Deck& deck, const TrainSetup& setup, bool exact) {
  const std::string diff = model_difference(meta.model_text, deck.model_text());
  if (!diff.empty())
    fail(Exit::bad_input, dir + " was made for a different model:\n" + diff + "resume with the deck that made it, or start a new run", true);
  if (meta.batch_size != deck.train.batch_size || meta.seed != deck.run.seed)
    fail(Exit::bad_input, dir + ": train.batch_size " + std::to_string(meta.batch_size) + " and run.seed " + std::to_string(meta.seed) +
                              " in the checkpoint, " + std::to_string(deck.train.batch_size) + " and " + std::to_string(deck.run.seed) +
                              " in the deck: the data order would differ", true);
  if (!exact && !meta.epoch_complete && !setup.def->flush)
    fail(Exit::bad_input, dir + ": resuming a " + meta.schedule + " run in the middle of epoch " + std::to_string(meta.epoch + 1) +
                              " with " + setup.def->name + " on another layout (split " +
                              list_text(std::vector<int>(setup.layout.first.begin() + 1, setup.layout.first.end() - 1)) +
                              ", replicas " + setup.layout.replication() +
                              ") would start that schedule from a state it cannot have; use the checkpoint's layout (split " +
                              list_text(meta.split) + ", replicas " + list_text(meta.replicas) + ", schedule " + meta.schedule +
                              ") or a flush schedule", true);
}

bool same_layout(const CheckpointMeta& meta, const ParallelContext& ctx, const TrainSetup& setup) {
  const std::vector<int> split(setup.layout.first.begin() + 1, setup.layout.first.end() - 1);
  return meta.ranks == ctx.size() && meta.tensor_parts == setup.model->shard().parts && meta.split == split &&
         meta.replicas == setup.layout.replicas &&
         enum_from_name<Placement>(meta.placement) == setup.layout.placement && meta.schedule == setup.def->name &&
         meta.microbatches == setup.microbatches;
}

// The rank's action index of the cut at meta.step in a segment of `steps` steps (a flush
// schedule has nothing in flight there).
int64_t position_in(const TrainSetup& setup, const ParallelContext& ctx, const CheckpointMeta& meta, int64_t steps) {
  const Schedule ir = setup.schedule(steps);
  const Cut cut = consistent_cut(ir, meta.step - meta.epoch_start);
  PT_CHECK(cut.crossing[static_cast<size_t>(ctx.rank())].empty(), "flush schedule cut with messages in flight");
  return static_cast<int64_t>(cut.position[static_cast<size_t>(ctx.rank())]);
}

// The step folders this rank reads and their manifests: at the checkpoint's parallel.tensor
// its own part's; under another one every part's (resharded: reshard set).
struct Parts {
  std::vector<std::string> dirs;
  std::vector<CheckpointMeta> metas;
  bool reshard = false;
};
// Part 0 of the checkpoint is step_dir with manifest meta0; "" or why a part is unusable.
std::string read_parts(const std::string& step_dir, const CheckpointMeta& meta0, TensorShard mine, Parts& out) {
  out.reshard = meta0.tensor_parts != mine.parts;
  std::vector<int> want;
  if (out.reshard)
    for (int k = 0; k < meta0.tensor_parts; ++k) want.push_back(k);
  else
    want.push_back(mine.rank);
  for (int k : want) {
    const std::string d = tensor_part_dir(step_dir, k);
    try {
      CheckpointMeta m = k == 0 ? meta0 : read_meta(d);
      if (m.tensor_rank != k || m.tensor_parts != meta0.tensor_parts || m.step != meta0.step)
        return d + ": holds tensor part " + std::to_string(m.tensor_rank) + " of " + std::to_string(m.tensor_parts) +
               " at step " + std::to_string(m.step) + ", not part " + std::to_string(k) + " of " +
               std::to_string(meta0.tensor_parts) + " at step " + std::to_string(meta0.step);
      out.dirs.push_back(d), out.metas.push_back(std::move(m));
    } catch (const Error& e) {
      return e.what();
    }
  }
  return "";
}

std::vector<WorkerState> load_states(const Parts& parts, bool exact, const Deck& deck, const TrainSetup& setup,
                                     const ParallelContext& ctx, const std::vector<const StageRuntime*>& stages) {
  const std::string& dir = parts.dirs.front();
  const CheckpointMeta& meta = parts.metas.front();
  std::vector<WorkerState> out;
  if (exact) {
    out = load_worker_state(dir, ctx.rank());
    for (WorkerState& st : out)
      if (meta.epoch_complete) {  // the next epoch starts from the latest version alone
        std::vector<std::pair<int64_t, std::vector<float>>> latest;
        for (auto& v : st.versions)
          if (v.first == st.latest) latest.push_back(v);
        st.versions = latest;
        st.units.clear(), st.crossing.clear(), st.position = 0;
      } else if (setup.def->flush) {  // the cut's place in this run's IR (with or without GRAD_NORM)
        st.position = position_in(setup, ctx, meta, meta.epoch_steps);
      }
    return out;
  }
  for (const StageRuntime* r : stages) {
    const size_t nopt = r->opt->state_names().size();
    WorkerState st = parts.reshard ? load_resharded_state(parts.dirs, parts.metas, deck, *setup.model, r->stage->first(),
                                                          r->stage->last(), nopt)
                                   : load_resliced_state(dir, meta, r->stage->first(), r->stage->last(),
                                                         static_cast<size_t>(r->stage->num_params()), nopt,
                                                         static_cast<size_t>(r->stage->num_state()));
    st.stage = r->id;
    if (!meta.epoch_complete) st.position = position_in(setup, ctx, meta, meta.epoch_steps);
    out.push_back(std::move(st));
  }
  return out;
}

// This run ends before the checkpoint's segment does. A flush schedule's cut lies at a
// minibatch boundary: if no rank holds a microbatch or a message in flight there, the
// segment is re-built to end at this run's last step (the IR an uninterrupted run to that
// step runs, so the result is bitwise the same) and resumed at the same step in it.
// Otherwise (the pipedream family, 2bw) the trainer refuses: the cut can only continue its
// own segment. Returns the segment's steps.
int64_t fit_segment(ResumePoint& rp, const TrainSetup& setup, const ParallelContext& ctx, int64_t total_steps) {
  const CheckpointMeta& meta = rp.meta;
  if (meta.epoch_complete || !setup.def->flush || meta.epoch_start + meta.epoch_steps <= total_steps) return meta.epoch_steps;
  bool mine = true;
  for (const WorkerState& st : rp.states) mine = mine && st.units.empty() && st.crossing.empty();
  if (!all_ranks(ctx, mine)) return meta.epoch_steps;
  if (total_steps < meta.step)
    fail(Exit::bad_input, rp.step_dir + ": the checkpoint is at step " + std::to_string(meta.step) + ", past this run's last step " +
                              std::to_string(total_steps) + " (train.max_steps / train.epochs); resume with at least " +
                              std::to_string(meta.step) + " steps", true);
  const int64_t steps = total_steps - meta.epoch_start;
  const int64_t pos = position_in(setup, ctx, meta, steps);
  for (WorkerState& st : rp.states) st.position = pos;
  rp.segment_shortened = true;
  if (ctx.rank() == 0)
    std::printf("resume: nothing is in flight at the cut of %s (%s, step %lld), so its segment, which ran to step %lld, "
                "ends at this run's last step %lld instead\n", rp.step_dir.c_str(), meta.schedule.c_str(),
                static_cast<long long>(meta.step), static_cast<long long>(meta.epoch_start + meta.epoch_steps),
                static_cast<long long>(total_steps));
  return steps;
}

// Every rank verifies the files it needs; "" when all of this rank's pass.
std::string verify_needed(const std::string& dir, const CheckpointMeta& meta, bool exact, const ParallelContext& ctx,
                          const std::vector<const StageRuntime*>& stages) {
  for (int r : needed_ranks(meta, exact, ctx, stages))
    if (std::string e = verify_checkpoint(dir, r); !e.empty()) return e;
  return "";
}

void report_unusable(const ParallelContext& ctx, const std::string& dir, std::string why, bool shared, std::string& tried) {
  if (!why.empty() && (!shared || ctx.rank() == 0)) {
    if (why.back() != '\n') why += "\n";
    if (shared) std::fprintf(stderr, "pipetrain: checkpoint %s is not usable: %s", dir.c_str(), why.c_str());
    else std::fprintf(stderr, "rank %d: checkpoint %s is not usable:\n%s", ctx.rank(), dir.c_str(), why.c_str());
    std::fflush(stderr);
  }
  if (ctx.rank() == 0) std::fprintf(stderr, "pipetrain: skipping %s; trying an older checkpoint\n", dir.c_str());
  tried += "  " + dir + (shared ? ": " + why : std::string(" (failed verification, see above)\n"));
}

// Why this stage cannot take the units `st` holds in flight at the cut ({0, ""}: it can),
// with the key that differs: 2 train.precision (the slots hold bf16 activations in half the
// floats under bf16: recorded since the checkpoints say it; before, only the slots' sizes
// tell, and a stage whose slot has the same size in both precisions cannot be told), else
// 1 parallel.recompute (Stage::unit_from: only from a whole slot into a fully recomputing
// stage's input and output).
std::pair<int, std::string> units_refused(const WorkerState& st, const Stage& stage) {
  const std::string head = "stage " + std::to_string(st.stage) + " has " + std::to_string(st.units.size()) +
                           " units in flight captured under ";
  if (st.precision && *st.precision != stage.precision())
    return {2, head + "train.precision = \"" + enum_name(*st.precision) + "\", which this run (\"" +
                   enum_name(stage.precision()) + "\") lays out in other dtypes"};
  const int64_t want = stage.unit_floats_under(st.recompute);
  for (const WorkerState::Unit& u : st.units)
    if (!st.precision && static_cast<int64_t>(u.slot.size()) != want)
      return {2, head + "an unrecorded train.precision, in slots of " + std::to_string(u.slot.size()) +
                     " floats where this run (\"" + enum_name(stage.precision()) + "\") lays out " + std::to_string(want)};
  if (!stage.can_restore_units(st.recompute))
    return {1, head + "recompute = \"" + enum_name(st.recompute) + "\", which this run (\"" + enum_name(stage.recompute()) +
                   "\") cannot rebuild without rerunning their forwards"};
  return {0, ""};
}

// Units in flight at the cut come back as this run lays out their slots; otherwise a
// located error on every rank, naming the key that differs (a precision before a recompute
// setting; nothing in flight: anything goes) and, where the rank that prints it saw it, why.
void check_units(const ResumePoint& rp, const Deck& deck, const ParallelContext& ctx,
                 const std::vector<const StageRuntime*>& stages) {
  std::pair<int, std::string> mine{0, ""};
  for (const WorkerState& st : rp.states)
    for (const StageRuntime* r : stages)
      if (r->id == st.stage && !st.units.empty()) mine = std::max(mine, units_refused(st, *r->stage),
                                                                  [](const auto& a, const auto& b) { return a.first < b.first; });
  int any = 0;
  MPI_Allreduce(&mine.first, &any, 1, MPI_INT, MPI_MAX, ctx.world());
  if (!any) return;
  const std::string key = any == 2 ? "train.precision" : "parallel.recompute";
  fail(Exit::bad_input, deck.where(key) + ": key '" + key + "': " + rp.step_dir + " was taken under another " +
                            (any == 2 ? "precision" : "recompute setting") + " with units in flight across its cut" +
                            (mine.first == any ? " (" + mine.second + ")" : "") + "; resume it with the setting it was taken under" +
                            (any == 2 ? "" : " (a full stage also takes units captured under none or selective)") +
                            ", or from a checkpoint of a flush schedule",
       true);
}

}  // namespace

ResumePoint choose_resume(const std::string& path, const Deck& deck, const TrainSetup& setup, const ParallelContext& ctx,
                          const std::vector<const StageRuntime*>& stages, int64_t total_steps) {
  const std::vector<CheckpointRef> candidates = list_checkpoints(path);
  if (candidates.empty())
    fail(Exit::no_checkpoint, "--resume " + path + ": no committed checkpoint there (a step folder with a manifest.json)", true);
  if (ctx.rank() == 0)  // folders a crash (or a lost manifest) left without a manifest are never candidates
    for (const std::string& u : uncommitted_checkpoints(path))
      if (checkpoint_step_of(u) > candidates.front().step)
        std::fprintf(stderr, "pipetrain: ignoring %s: no manifest.json (never committed, or its manifest was lost)\n", u.c_str());
  std::string tried;
  for (const CheckpointRef& c : candidates) {
    ResumePoint rp;
    std::string why;
    bool shared = false;  // the manifest's problem: every rank sees the same, rank 0 says it
    try {
      rp.meta = read_meta(c.step_dir);
    } catch (const Error& e) {
      why = e.what(), shared = true;
    }
    Parts parts;
    if (why.empty()) why = read_parts(c.step_dir, rp.meta, setup.model->shard(), parts);
    const bool exact = why.empty() && same_layout(rp.meta, ctx, setup);
    if (why.empty()) check_against_deck(c.step_dir, rp.meta, deck, setup, exact);
    for (size_t k = 0; why.empty() && k < parts.dirs.size(); ++k)
      why = verify_needed(parts.dirs[k], parts.metas[k], exact, ctx, stages);
    if (!all_ranks(ctx, why.empty())) {
      report_unusable(ctx, c.step_dir, why, shared, tried);
      continue;
    }
    rp.valid = true, rp.step_dir = c.step_dir, rp.resliced = !exact, rp.resharded = parts.reshard;
    rp.meta = parts.metas.front();
    rp.states = load_states(parts, exact, deck, setup, ctx, stages);
    check_units(rp, deck, ctx, stages);
    const int64_t segment = fit_segment(rp, setup, ctx, total_steps);
    for (WorkerState& st : rp.states) {
      st.epoch = rp.meta.epoch_complete ? rp.meta.epoch + 1 : rp.meta.epoch;
      st.epoch_start = rp.meta.epoch_complete ? rp.meta.step : rp.meta.epoch_start;
      st.epoch_steps = rp.meta.epoch_complete ? 0 : segment;
      if (rp.meta.epoch_complete) st.position = 0;
    }
    return rp;
  }
  fail(Exit::no_checkpoint, "--resume " + path + ": no committed checkpoint passed verification; tried (newest first):\n" + tried,
       true);
}

}  // namespace pt
