// parallel.split = "auto": profile (or read parallel.profile), plan for this job's ranks,
// and return the deck with the chosen split, replicas, schedule and microbatches filled in.
// A schedule or microbatch count set explicitly in the deck constrains the plan. On one rank
// there is nothing to plan: every deck runs as one stage (resolve_one_rank below).
#include <mpi.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>

#include "pipetrain/checkpoint.hpp"
#include "pipetrain/data.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/memory_info.hpp"
#include "pipetrain/memory_model.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "pipetrain/train.hpp"

namespace pt {

namespace {

// What the deck takes from a plan, as rank 0 chose it, on every rank. Every rank searches,
// but the memory estimates hold measured heap (the convolution primitives' own, OneDnn::
// conv_pass_bytes' held), which can differ by a grain between processes: so that no two
// ranks can take different plans at a memory cap's edge, rank 0's choice is everyone's.
struct PlanChoice {
  bool ok = false;
  std::string error, schedule;
  std::vector<int> split, replicas;
  int microbatches = 1, tensor = 1;
  Recompute recompute = Recompute::none;
};
PlanChoice rank0_choice(const Plan& plan, int rank) {
  PlanChoice c;
  std::vector<int> v;  // ok, microbatches, tensor, recompute, split size, split, replicas
  if (rank == 0) {
    const std::vector<int> sp = plan.ok ? plan.split() : std::vector<int>{}, re = plan.ok ? plan.replicas() : std::vector<int>{};
    v = {plan.ok ? 1 : 0, plan.microbatches, plan.tensor, static_cast<int>(plan.recompute), static_cast<int>(sp.size())};
    v.insert(v.end(), sp.begin(), sp.end());
    v.insert(v.end(), re.begin(), re.end());
  }
  int n = static_cast<int>(v.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  v.resize(static_cast<size_t>(n));
  MPI_Bcast(v.data(), n, MPI_INT, 0, MPI_COMM_WORLD);
  c.ok = v[0] != 0, c.microbatches = v[1], c.tensor = v[2], c.recompute = static_cast<Recompute>(v[3]);
  c.split.assign(v.begin() + 5, v.begin() + 5 + v[4]);
  c.replicas.assign(v.begin() + 5 + v[4], v.end());
  c.error = broadcast_string(plan.error, 0, MPI_COMM_WORLD), c.schedule = broadcast_string(plan.schedule, 0, MPI_COMM_WORLD);
  return c;
}

// The deck (or --set) gives `key`, rather than its default.
bool set_by_deck(const Deck& deck, const char* key) { return deck.where(key).find("(default") == std::string::npos; }

std::string split_str(const Deck& deck) {
  if (deck.parallel.split_auto) return "\"auto\"";
  std::string t = "[";
  for (size_t i = 0; i < deck.parallel.split.size(); ++i) t += (i ? ", " : "") + std::to_string(deck.parallel.split[i]);
  return t + "]";
}

// A flush schedule with several stages per rank (looped: interleaved-1f1b; V: zb-v) on one
// rank: its one rank group holds every stage, so an explicit split is kept (the same update
// rule: bitwise equal to one stage). A V holds exactly 2 stages per rank group, so on one
// rank any other stage count ("auto" and [] included) is a located error here, naming the
// split that fits. (The looped placement holds "auto"'s one stage: v = 1, the caller's path.)
Deck one_rank_group(const Deck& deck, const ScheduleDef& def, int rank) {
  const size_t K = deck.parallel.split_auto ? 1 : deck.parallel.split.size() + 1;
  if (!placement_fits(def.placement, static_cast<int>(K), 1))
    fail(Exit::bad_input,
         deck.where("parallel.split") + ": key 'parallel.split': " +
             (deck.parallel.split_auto ? std::string("\"auto\" (nothing is planned on one rank) makes 1 stage")
                                       : split_str(deck) + " makes " + std::to_string(K) + (K == 1 ? " stage" : " stages")) +
             ", but " + def.name +
             " places exactly 2 stages on each rank (a V: rank r holds stages r and 2p-1-r), and the job has 1 rank; set "
             "parallel.split = [k] (2 stages, 0 < k < " + std::to_string(deck.model.layers.size()) +
             "), or run under mpirun -np p with 2p stages",
         true);
  if (rank == 0) {
    std::printf("parallel.split = %s on one rank: %s holds its %zu stages there (%s placement, one rank group)\n",
                split_str(deck).c_str(), def.name.c_str(), K, placement_name(def.placement));
    std::fflush(stdout);
  }
  return deck;
}

// parallel.recompute of the one stage a split collapses to: its one value, or the list's
// value when every stage has the same; different values per stage are a located error.
PerStage<Recompute> one_stage_recompute(const Deck& deck) {
  const std::vector<Recompute>& v = deck.parallel.recompute.values;
  for (Recompute r : v)
    if (r != v.front())
      fail(Exit::bad_input, deck.where("parallel.recompute") + ": key 'parallel.recompute': " +
                                key_value_text(KeyTraits<PerStage<Recompute>>::to_value(deck.parallel.recompute)) +
                                " differs between stages, but on one rank the split " + split_str(deck) +
                                " runs as one stage (parallel.split set at " + deck.where("parallel.split") +
                                "); give one value", true);
  return PerStage<Recompute>(v.front());
}

// One process (`pipetrain train DECK`, or `mpirun -np 1`): there is nothing to plan and no
// second rank for a second stage. "auto" and an explicit split whose schedule's update rule
// does not depend on the stage count (the registry's flush schedules and 2bw: the same
// numbers as the pipeline, to rounding) become one stage holding every layer; the schedule
// and microbatches the deck gives are kept. Flush schedules with several stages per rank
// keep an explicit split (one_rank_group above). The pipedream family reads weights
// K - s - 1 updates old on stage s, so its explicit multi-stage split cannot be collapsed:
// that is a located error (exit 2).
Deck resolve_one_rank(const Deck& deck, int rank) {
  const bool multi = !deck.parallel.split_auto && !deck.parallel.split.empty();
  const std::string sched = deck.parallel.schedule;
  const ScheduleDef& def = schedule_def(sched);
  if (def.flush && def.placement != Placement::contiguous && (multi || def.placement == Placement::v))
    return one_rank_group(deck, def, rank);
  if (!deck.parallel.split_auto && !multi) return deck;  // one stage already
  const bool same_rule = def.flush || def.versions.staleness >= 0;  // a lag fixed whatever the stage count (2bw)
  const std::string split_text = split_str(deck);
  if (multi && !same_rule)
    fail(Exit::bad_input,
         deck.where("parallel.split") + ": key 'parallel.split': " + split_text + " makes " +
             std::to_string(deck.parallel.split.size() + 1) + " stages, but the job has 1 rank, and " + sched +
             "'s update rule depends on the stage count (stage s reads weights K-s-1 updates old), so it cannot run as one "
             "stage; run under mpirun -np " + std::to_string(deck.parallel.split.size() + 1) +
             ", or set parallel.split = \"auto\" or [] for one stage",
         true);
  Deck d = deck;
  d.parallel.split_auto = false;
  d.parallel.split.clear();
  d.parallel.replicas.clear();
  d.parallel.recompute = one_stage_recompute(deck);
  const std::string why = multi ? "one rank: the split " + split_text + " runs as one stage (" + deck.where("parallel.split") + ")"
                                : "one rank: nothing to plan for parallel.split = \"auto\" (" + deck.where("parallel.split") + ")";
  for (const char* k : {"parallel.split", "parallel.replicas"}) d.locations[k] = why;
  if (rank == 0) {
    if (multi)
      std::printf("parallel.split = %s on one rank: its %zu stages run as one stage (layers 0-%zu), schedule %s, %lld "
                  "microbatch%s: the same update rule, equal to the pipeline's numbers to rounding; mpirun -np %zu runs "
                  "the pipeline\n",
                  split_text.c_str(), deck.parallel.split.size() + 1, deck.model.layers.size() - 1, sched.c_str(),
                  static_cast<long long>(deck.parallel.microbatches), deck.parallel.microbatches == 1 ? "" : "es",
                  deck.parallel.split.size() + 1);
    else
      std::printf("parallel.split = \"auto\" on one rank: nothing to plan (no profiling); one stage (layers 0-%zu), "
                  "schedule %s, %lld microbatch%s\n",
                  deck.model.layers.size() - 1, sched.c_str(), static_cast<long long>(deck.parallel.microbatches),
                  deck.parallel.microbatches == 1 ? "" : "es");
    std::fflush(stdout);
  }
  return d;
}

// "auto" on resume: the layout of the newest committed checkpoint under `resume` when it was
// taken on world_size ranks (and with the deck's schedule, where one is set), else false (plan
// anew; the resume then decides whether that checkpoint can be re-sliced onto the plan).
bool checkpoint_layout(const Deck& deck, int world_size, const std::string& resume, int rank, Deck& d) {
  if (resume.empty()) return false;
  const std::vector<CheckpointRef> refs = list_checkpoints(resume);
  if (refs.empty()) return false;
  CheckpointMeta m;
  try {
    m = read_meta(refs.front().step_dir);
  } catch (const Error&) {
    return false;  // the resume reports the unreadable manifest and tries older ones
  }
  const bool schedule_given = set_by_deck(deck, "parallel.schedule");
  const bool tensor_given = deck.parallel.tensor > 0;
  if (m.ranks * m.tensor_parts != world_size || (schedule_given && m.schedule != deck.parallel.schedule) ||
      (tensor_given && m.tensor_parts != deck.parallel.tensor))
    return false;
  d = deck;
  d.parallel.split_auto = false;
  d.parallel.split = std::vector<int64_t>(m.split.begin(), m.split.end());
  // replicas per rank group; several stages per group (looped, V) have uniform replicas, which
  // the rank count derives
  d.parallel.replicas.clear();
  if (enum_from_name<Placement>(m.placement) == Placement::contiguous) d.parallel.replicas = std::vector<int64_t>(m.replicas.begin(), m.replicas.end());
  d.parallel.schedule = m.schedule;
  d.parallel.microbatches = m.microbatches;
  d.parallel.placement = placement_from_name(m.placement);
  if (d.parallel.tensor == 0) d.parallel.tensor = m.tensor_parts, d.locations["parallel.tensor"] = "the checkpoint";
  for (const char* k : {"parallel.split", "parallel.replicas", "parallel.schedule", "parallel.microbatches", "parallel.placement"})
    d.locations[k] = "the layout of checkpoint " + refs.front().step_dir + " (parallel.split = \"auto\", --resume)";
  if (rank == 0) {
    std::printf("parallel.split = \"auto\": resuming on the layout of %s: %s, split %s, replicas %s, %d microbatch%s\n",
                refs.front().step_dir.c_str(), m.schedule.c_str(), nlohmann::json(m.split).dump().c_str(),
                nlohmann::json(m.replicas).dump().c_str(), m.microbatches, m.microbatches == 1 ? "" : "es");
    std::fflush(stdout);
  }
  return true;
}

}  // namespace

namespace {

// parallel.tensor's candidates: the deck's t, or with 0 (auto) 1 and every power of two that
// divides the ranks and that every split layer accepts (heads, MLP width: the model builds).
std::vector<int> tensor_degrees(const Deck& deck, const DataInfo& info, int world_size) {
  if (deck.parallel.tensor > 0) return {static_cast<int>(deck.parallel.tensor)};
  std::vector<int> out = {1};
  for (int t = 2; t <= world_size; t *= 2) {
    if (world_size % t != 0) continue;
    try {
      const Model m(deck, info.shape, info.classes, TensorShard{t, 0});
    } catch (const Error&) {
      continue;  // the heads or the MLP do not split t ways
    }
    out.push_back(t);
  }
  return out;
}

// The profile the planner reads for `model` (one part under a tensor split): the deck's
// parallel.profile when it was measured at that t, else measured now on every rank.
Profile auto_profile(const Deck& deck, const Model& model, int world_size, int rank) {
  const int t = model.shard().parts;
  if (!deck.parallel.profile.empty()) {
    Profile prof = Profile::load(deck.parallel.profile);
    if (static_cast<int>(prof.layers.size()) != model.size())
      fail(Exit::bad_input, deck.where("parallel.profile") + ": key 'parallel.profile': " + deck.parallel.profile + " has " +
                                std::to_string(prof.layers.size()) + " layers, the deck's model " + std::to_string(model.size()),
           true);
    if (prof.tensor == t) return prof;
    if (t == 1 || deck.parallel.tensor > 0)
      fail(Exit::bad_input, deck.where("parallel.profile") + ": key 'parallel.profile': " + deck.parallel.profile +
                                " was measured at parallel.tensor = " + std::to_string(prof.tensor) + ", the plan needs " +
                                std::to_string(t), true);
  }
  const int64_t mb = deck.train.batch_size / deck.parallel.microbatches;
  if (rank == 0) {
    const std::string part = t > 1 ? ", as part 0 of parallel.tensor = " + std::to_string(t) : "";
    std::printf("parallel.split = \"auto\": profiling %d layers at microbatch %lld%s%s\n", model.size(),
                static_cast<long long>(mb), world_size > 1 ? " and the network between ranks" : "", part.c_str());
    std::fflush(stdout);
  }
  Profile p = measure_profile(deck, model, mb, 5, MPI_COMM_WORLD);
  p.tensor = t;
  return p;
}

}  // namespace

std::vector<Recompute> planner_recompute_modes(const Deck& deck) {
  if (set_by_deck(deck, "parallel.recompute")) return {deck.parallel.recompute.values.front()};
  return {Recompute::none, Recompute::selective, Recompute::full};
}

Deck resolve_auto_split(const Deck& given, int world_size, std::string* plan_json, const std::string& resume) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  Deck deck = given;
  if (deck.parallel.tensor == 0 && !deck.parallel.split_auto)
    fail(Exit::bad_input, deck.where("parallel.tensor") + ": key 'parallel.tensor': 0 (the planner's choice) needs "
                              "parallel.split = \"auto\"", true);
  if (deck.parallel.tensor == 0 && world_size == 1) deck.parallel.tensor = 1;
  if (world_size == 1) return resolve_one_rank(deck, rank);
  if (!deck.parallel.split_auto) return deck;
  if (Deck d; checkpoint_layout(deck, world_size, resume, rank, d)) return d;
  const DataInfo info = data_info(deck);
  const bool schedule_given = set_by_deck(deck, "parallel.schedule");
  const bool microbatches_given = set_by_deck(deck, "parallel.microbatches");
  PlanOptions o;
  // the memory model with values every rank agrees on: the least budget, the largest base
  const int64_t budget = deck.cluster.memory > 0 ? static_cast<int64_t>(deck.cluster.memory)
                                                 : agreed(memory_budget(deck, ranks_on_node(MPI_COMM_WORLD)).bytes, MPI_MIN);
  o.memory_cap = static_cast<double>(budget);
  const int64_t base = agreed(startup_resident_bytes(), MPI_MAX);
  o.veto = [&deck](const ScheduleDef& def, const Layout& layout) { return tie_conflict(deck, def, layout); };
  if (schedule_given) o.schedules = {deck.parallel.schedule};
  if (microbatches_given) o.microbatches = {static_cast<int>(deck.parallel.microbatches)};
  o.recompute_modes = planner_recompute_modes(deck);
  std::vector<TensorCandidate> cands;
  std::vector<std::unique_ptr<Model>> models;  // the memory sources read them until the plan is made
  for (int t : tensor_degrees(deck, info, world_size)) {
    models.push_back(std::make_unique<Model>(deck, info.shape, info.classes, TensorShard{t, 0}));
    const Model& model = *models.back();
    TensorCandidate c;
    c.t = t;
    c.profile = auto_profile(deck, model, world_size, rank);
    const DeckMemory mem = deck_memory(deck, model, budget, base);
    c.memory = mem.source, c.memory_shared = mem.shared;
    cands.push_back(std::move(c));
  }
  const ClusterModel net = ClusterModel::from_deck(deck, cands.front().profile);
  const Plan plan = choose_tensor_plan(cands, net, world_size, deck.train.batch_size, o);
  const PlanChoice c = rank0_choice(plan, rank);
  if (!c.ok)
    fail(Exit::bad_input, deck.where("parallel.split") + ": key 'parallel.split': \"auto\" found no plan for " +
                              std::to_string(world_size) + " ranks: " + c.error, true);
  Deck d = deck;
  d.parallel.split_auto = false;
  d.parallel.split.assign(c.split.begin(), c.split.end());
  d.parallel.replicas.assign(c.replicas.begin(), c.replicas.end());
  d.parallel.schedule = c.schedule;
  d.parallel.microbatches = c.microbatches;
  d.parallel.recompute = PerStage<Recompute>(c.recompute);
  d.parallel.tensor = c.tensor;
  for (const char* k : {"parallel.split", "parallel.replicas", "parallel.schedule", "parallel.microbatches", "parallel.recompute",
                        "parallel.tensor"})
    d.locations[k] = "the plan of parallel.split = \"auto\" (" + deck.where("parallel.split") + ")";
  if (rank == 0) {
    std::printf("%s", plan.table().c_str());
    std::printf("plan: %s, split %s, replicas %s, %d microbatch%s, recompute %s, tensor %d; predicted %.3g ms per sample\n",
                plan.schedule.c_str(), nlohmann::json(plan.split()).dump().c_str(), plan.layout.replication().c_str(),
                plan.microbatches, plan.microbatches == 1 ? "" : "es", enum_name(plan.recompute), plan.tensor,
                plan.sim.time_per_sample * 1e3);
    if (!plan.choice_note.empty()) std::printf("plan: %s\n", plan.choice_note.c_str());
    std::fflush(stdout);
  }
  if (plan_json) *plan_json = broadcast_string(plan.to_json(), 0, MPI_COMM_WORLD);  // the plan that runs: rank 0's
  return d;
}

}  // namespace pt
