// `pipetrain schedule`: build the deck's schedule for N ranks, validate it, and print it as
// a rank x time grid (--format grid, the default), as each rank's compute list in the
// {stage}{F|B|I|W}{unit} notation (--format actions), or as JSON with the unit-cost replay's
// makespan, ideal, bubble and per-rank peak activations (--json); --list prints the
// registry. A deck with parallel.split = "auto" (planned only when `train` starts) is shown on
// an even cut of its layers into one stage per rank group (two under a looped or V placement).
#include <mpi.h>

#include <cstdio>
#include <nlohmann/json.hpp>

#include "pipetrain/commands.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"
#include "pipetrain/schedule_registry.hpp"
#include "pipetrain/train.hpp"

namespace pt {
namespace {

int list_schedules() {
  std::printf("%-18s %-10s %-6s %-10s %s\n", "schedule", "placement", "flush", "backward", "what it does");
  for (const ScheduleDef* d : schedule_defs())
    std::printf("%-18s %-10s %-6s %-10s %s\n", d->name.c_str(), placement_name(d->placement), d->flush ? "yes" : "no",
                d->split_backward ? "I + W" : "fused", d->doc.c_str());
  return 0;
}

// Busy time of the busiest rank under unit costs: the makespan with no bubble.
double ideal_time(const Schedule& s, const Replay& rp) {
  const CostModel c = unit_costs(s.layout);
  double best = 0;
  for (size_t w = 0; w < s.workers.size(); ++w) {
    double busy = 0;
    for (const Action& a : s.workers[w]) busy += c.compute(static_cast<int>(w), a);
    best = std::max(best, busy);
  }
  return rp.ok ? best : 0.0;
}

nlohmann::json peaks(const Schedule& s) {
  nlohmann::json p = nlohmann::json::array();
  for (int r = 0; r < s.layout.ranks(); ++r) p.push_back(peak_activations(s, r));
  return p;
}

nlohmann::json schedule_json(const Schedule& s, const TrainSetup& setup, const Deck& deck, int ranks) {
  const Replay rp = replay(s, unit_costs(s.layout));
  const double ideal = ideal_time(s, rp);
  nlohmann::json j = {{"schedule", s.name()}, {"ranks", ranks}, {"stages", s.layout.stages()},
                      {"placement", placement_name(s.layout.placement)}, {"chunks", s.layout.chunks()},
                      {"microbatches", s.microbatches}, {"steps", s.steps}, {"valid", validate(s).empty()},
                      {"makespan", rp.makespan}, {"ideal", ideal},
                      {"bubble_fraction", ideal > 0 ? (rp.makespan - ideal) / ideal : 0.0}, {"peak_activations", peaks(s)}};
  // the memory reference (1F1B) on one stage per rank group, for comparison (the zero-bubble
  // papers' memory claims)
  const ScheduleDef& ref = flagged_schedule(&ScheduleDef::memory_reference);
  if (s.def != &ref && s.layout.groups() > 0) {
    std::vector<int> first;
    for (int g = 0; g < s.layout.groups(); ++g) first.push_back(s.layout.first_layer(g * s.layout.chunks()));
    const Layout straight = Layout::make(first, setup.model->size(), s.layout.replicas);
    j["peak_activations_" + ref.name] = peaks(make_schedule(ref, straight, s.steps, s.microbatches));
  }
  return j;
}

// parallel.split = "auto": the schedule's shape needs only a stage count, so cut the layers
// evenly into ranks x (stages per rank group) stages, said on stderr (stdout may be JSON).
Deck even_split(const Deck& deck, int ranks, int rank) {
  if (!deck.parallel.split_auto) return deck;
  const int per = schedule_def(deck.parallel.schedule).placement == Placement::contiguous ? 1 : 2;
  const int K = ranks * per, L = static_cast<int>(deck.model.layers.size());
  if (K > L)
    fail(Exit::bad_input, deck.where("parallel.split") + ": key 'parallel.split': \"auto\" is shown on one stage per rank" +
                              (per > 1 ? std::string(" group, 2 per group for ") + deck.parallel.schedule : std::string()) +
                              ": " + std::to_string(K) + " stages, but the model has " + std::to_string(L) +
                              " layers; give parallel.split",
         true);
  Deck d = deck;
  d.parallel.split_auto = false;
  d.parallel.split.clear();
  for (int s = 1; s < K; ++s) d.parallel.split.push_back(static_cast<int64_t>(s) * L / K);
  d.locations["parallel.split"] = "an even cut for `pipetrain schedule` (" + deck.where("parallel.split") + ")";
  if (rank == 0)
    std::fprintf(stderr, "parallel.split = \"auto\" is planned when `pipetrain train` starts; shown here on an even cut into %d stages\n", K);
  return d;
}

}  // namespace

int cmd_schedule(const ScheduleArgs& a) {
  if (a.list) return list_schedules();
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const Deck deck = even_split(load_deck(a.deck, a.sets), a.ranks, rank);
  TrainSetup setup = TrainSetup::from_deck(deck, a.ranks);
  Schedule s = setup.schedule(a.steps);  // with GRAD_NORM under train.clip_grad_norm, as the run
  const std::string err = validate(s);
  if (rank != 0) return err.empty() ? 0 : 1;
  if (a.json) {
    std::printf("%s\n", schedule_json(s, setup, deck, a.ranks).dump(1).c_str());
  } else if (a.format == "actions") {
    std::printf("%s", s.actions().c_str());
  } else {
    std::printf("%s", s.grid().c_str());
    std::printf("\n%-6s %-8s %-8s %-12s %s\n", "rank", "stages", "replica", "activations", "actions");
    for (int r = 0; r < setup.layout.ranks(); ++r) {
      std::string st;
      for (int x : setup.layout.stages_of_rank(r)) st += (st.empty() ? "" : ",") + std::to_string(x);
      std::printf("%-6d %-8s %-8d %-12g %zu\n", r, st.c_str(), setup.layout.replica_of(r), peak_activations(s, r),
                  s.workers[static_cast<size_t>(r)].size());
    }
  }
  if (!a.trace.empty()) {
    Replay rp = replay(s, unit_costs(s.layout));
    std::vector<TraceEvent> ev;
    for (int r = 0; r < setup.layout.ranks(); ++r)
      for (auto& e : rp.events[static_cast<size_t>(r)]) {
        const Action& act = s.workers[static_cast<size_t>(r)][static_cast<size_t>(e.index)];
        ev.push_back({r, e.start * 1e-3, e.end * 1e-3, act.op, act.mb, 0, act.stage});
      }
    write_file_atomic(a.trace, chrome_trace_json(ev, setup.layout, "schedule " + s.name()));
    std::printf("wrote %s (1 time unit = 1 ms)\n", a.trace.c_str());
  }
  if (!err.empty()) {
    std::fprintf(stderr, "schedule INVALID: %s\n", err.c_str());
    return static_cast<int>(Exit::internal);
  }
  if (!a.json && a.format != "actions") std::printf("schedule valid: deadlock-free, every message matched, version rules hold\n");
  return 0;
}

}  // namespace pt
