// Resume: pick the newest committed checkpoint that every rank can verify (falling back to
// older ones with the reason printed), refuse one made for another model, and build this
// rank's starting state: exact on the same layout and schedule, re-sliced otherwise when
// the checkpoint holds no microbatches in flight.
#include <mpi.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "pipetrain/error.hpp"
#include "resume.hpp"

namespace pt {
namespace {

// Ranks of the old layout whose files this rank needs.
std::vector<int> needed_ranks(const CheckpointMeta& meta, bool exact, const ParallelContext& ctx, const Stage& stage) {
  std::vector<int> first = {0};
  for (int v : meta.split) first.push_back(v);
  std::vector<int> rank0;
  int r = 0;
  for (size_t s = 0; s < meta.replicas.size(); ++s) {
    rank0.push_back(r);
    r += meta.replicas[s];
  }
  if (exact) {
    std::vector<int> out = {ctx.rank()};
    if (ctx.replica() != 0) out.push_back(rank0[static_cast<size_t>(ctx.stage())]);
    return out;
  }
  std::vector<int> out;
  for (size_t s = 0; s < rank0.size(); ++s) {
    const int f = first[s], e = s + 1 < first.size() ? first[s + 1] : 1 << 30;
    if (f < stage.last() && e > stage.first()) out.push_back(rank0[s]);
  }
  out.push_back(0);  // rank 0's file carries the elapsed time
  return out;
}

bool all_ranks(const ParallelContext& ctx, bool mine) {
  int v = mine ? 1 : 0, all = 0;
  MPI_Request req;
  MPI_Iallreduce(&v, &all, 1, MPI_INT, MPI_MIN, ctx.world(), &req);
  ctx.wait(&req, [] { return std::string("agreement on the checkpoint to resume from"); });
  return all != 0;
}

}  // namespace

ResumePoint choose_resume(const std::string& path, const Deck& deck, const TrainSetup& setup, const ParallelContext& ctx,
                          const Stage& stage, size_t optimizer_buffers, int64_t total_steps) {
  const std::vector<CheckpointRef> candidates = list_checkpoints(path);
  if (candidates.empty())
    fail(Exit::no_checkpoint, "--resume " + path + ": no committed checkpoint there (a step folder with a manifest.json)", true);
  const std::vector<int> split(setup.layout.first.begin() + 1, setup.layout.first.end() - 1);
  if (ctx.rank() == 0)  // folders a crash (or a lost manifest) left without a manifest are never candidates
    for (const std::string& u : uncommitted_checkpoints(path))
      if (checkpoint_step_of(u) > candidates.front().step)
        std::fprintf(stderr, "pipetrain: ignoring %s: no manifest.json (never committed, or its manifest was lost)\n", u.c_str());
  std::string tried;
  for (const CheckpointRef& c : candidates) {
    CheckpointMeta meta;
    std::string why;
    bool shared = false;  // the manifest's problem: every rank sees the same, rank 0 says it
    try {
      meta = read_meta(c.step_dir);
    } catch (const Error& e) {
      why = e.what();
      shared = true;
    }
    // The same on every rank: the manifest, compared with the deck.
    if (why.empty()) {
      const std::string diff = model_difference(meta.model_text, deck.model_text());
      if (!diff.empty())
        fail(Exit::bad_input, c.step_dir + " was made for a different model:\n" + diff +
                                  "resume with the deck that made it, or start a new run", true);
      if (meta.batch_size != deck.train.batch_size || meta.seed != deck.run.seed)
        fail(Exit::bad_input, c.step_dir + ": train.batch_size " + std::to_string(meta.batch_size) + " and run.seed " +
                                  std::to_string(meta.seed) + " in the checkpoint, " + std::to_string(deck.train.batch_size) +
                                  " and " + std::to_string(deck.run.seed) + " in the deck: the data order would differ", true);
    }
    const bool exact = why.empty() && meta.ranks == ctx.size() && meta.split == split && meta.replicas == setup.layout.replicas &&
                       meta.schedule == setup.def->name && meta.microbatches == setup.microbatches;
    if (why.empty() && !exact && !meta.epoch_complete && !setup.def->flush)
      fail(Exit::bad_input, c.step_dir + ": resuming a " + meta.schedule + " run in the middle of epoch " +
                                std::to_string(meta.epoch + 1) + " with " + setup.def->name + " on another layout (split " +
                                nlohmann::json(split).dump() + ", replicas " + setup.layout.replication() +
                                ") would start that schedule from a state it cannot have; use the checkpoint's layout (split " +
                                nlohmann::json(meta.split).dump() + ", replicas " + nlohmann::json(meta.replicas).dump() +
                                ", schedule " + meta.schedule + ") or a flush schedule", true);
    // Every rank verifies the files it needs; all must succeed.
    if (why.empty())
      for (int r : needed_ranks(meta, exact, ctx, stage)) {
        std::string e = verify_checkpoint(c.step_dir, r);
        if (!e.empty()) {
          why = e;
          break;
        }
      }
    const bool ok = all_ranks(ctx, why.empty());
    if (!ok) {
      if (!why.empty() && (!shared || ctx.rank() == 0)) {
        if (why.back() != '\n') why += "\n";
        if (shared) std::fprintf(stderr, "pipetrain: checkpoint %s is not usable: %s", c.step_dir.c_str(), why.c_str());
        else std::fprintf(stderr, "rank %d: checkpoint %s is not usable:\n%s", ctx.rank(), c.step_dir.c_str(), why.c_str());
        std::fflush(stderr);
      }
      if (ctx.rank() == 0) std::fprintf(stderr, "pipetrain: skipping %s; trying an older checkpoint\n", c.step_dir.c_str());
      tried += "  " + c.step_dir + (shared ? ": " + why : std::string(" (failed verification, see above)\n"));
      continue;
    }
    ResumePoint rp;
    rp.valid = true;
    rp.step_dir = c.step_dir;
    rp.meta = meta;
    if (exact) {
      rp.state = load_worker_state(c.step_dir, ctx.rank());
      if (meta.epoch_complete) {  // the next epoch starts from the latest version alone
        std::vector<std::pair<int64_t, std::vector<float>>> latest;
        for (auto& v : rp.state.versions)
          if (v.first == rp.state.latest) latest.push_back(v);
        rp.state.versions = latest;
        rp.state.units.clear();
        rp.state.crossing.clear();
        rp.state.position = 0;
      }
    } else {
      rp.resliced = true;
      rp.state = load_resliced_state(c.step_dir, meta, stage.first(), stage.last(), static_cast<size_t>(stage.num_params()),
                                     optimizer_buffers);
      if (!meta.epoch_complete) {
        // the same step of the same epoch in this layout's IR: a flush schedule has nothing in flight there
        Schedule ir = make_schedule(*setup.def, setup.layout, meta.epoch_steps, setup.microbatches);
        const Cut cut = consistent_cut(ir, meta.step - meta.epoch_start);
        PT_CHECK(cut.crossing[static_cast<size_t>(ctx.rank())].empty(), "flush schedule cut with messages in flight");
        rp.state.position = static_cast<int64_t>(cut.position[static_cast<size_t>(ctx.rank())]);
      }
    }
    int64_t segment_steps = meta.epoch_steps;
    if (!meta.epoch_complete && setup.def->flush && meta.epoch_start + meta.epoch_steps > total_steps) {
      // This run ends before the checkpoint's segment does. A flush schedule's cut lies at a
      // minibatch boundary: if no rank holds a microbatch or a message in flight there, the
      // segment is re-built to end at this run's last step (the IR an uninterrupted run to that
      // step runs, so the result is bitwise the same) and resumed at the same step in it.
      // Otherwise (the pipedream family, 2bw) the trainer refuses: the cut can only continue
      // its own segment.
      const bool drained = all_ranks(ctx, rp.state.units.empty() && rp.state.crossing.empty());
      if (drained && total_steps < meta.step)
        fail(Exit::bad_input, c.step_dir + ": the checkpoint is at step " + std::to_string(meta.step) +
                                  ", past this run's last step " + std::to_string(total_steps) +
                                  " (train.max_steps / train.epochs); resume with at least " + std::to_string(meta.step) + " steps",
             true);
      if (drained) {
        segment_steps = total_steps - meta.epoch_start;
        Schedule ir = make_schedule(*setup.def, setup.layout, segment_steps, setup.microbatches);
        const Cut cut = consistent_cut(ir, meta.step - meta.epoch_start);
        PT_CHECK(cut.crossing[static_cast<size_t>(ctx.rank())].empty(), "flush schedule cut with messages in flight");
        rp.state.position = static_cast<int64_t>(cut.position[static_cast<size_t>(ctx.rank())]);
        rp.segment_shortened = true;
        if (ctx.rank() == 0)
          std::printf("resume: nothing is in flight at the cut of %s (%s, step %lld), so its segment, which ran to step %lld, "
                      "ends at this run's last step %lld instead\n",
                      c.step_dir.c_str(), meta.schedule.c_str(), static_cast<long long>(meta.step),
                      static_cast<long long>(meta.epoch_start + meta.epoch_steps), static_cast<long long>(total_steps));
      }
    }
    if (meta.epoch_complete) {
      rp.state.epoch = meta.epoch + 1;
      rp.state.epoch_start = meta.step;
      rp.state.epoch_steps = 0;
      rp.state.position = 0;
    } else {
      rp.state.epoch = meta.epoch;
      rp.state.epoch_start = meta.epoch_start;
      rp.state.epoch_steps = segment_steps;
    }
    return rp;
  }
  fail(Exit::no_checkpoint, "--resume " + path + ": no committed checkpoint passed verification; tried (newest first):\n" + tried,
       true);
}

}  // namespace pt
