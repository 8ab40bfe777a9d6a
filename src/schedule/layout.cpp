// Layout: stages (layer slices), their placement on rank groups, replicas per group, rank
// numbering (group-major), and the located checks of a deck's [parallel] section.
#include <numeric>
#include <sstream>

#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {

const char* placement_name(Placement p) { return enum_name(p); }

Placement placement_from_name(const std::string& n) {
  if (const auto p = enum_from_name<Placement>(n)) return *p;
  std::string known;
  for (const std::string& k : enum_names<Placement>()) known += (known.empty() ? "" : ", ") + k;
  fail(Exit::bad_input, "unknown placement '" + n + "'; known: " + known, true);
}

bool placement_fits(Placement p, int K, int groups) {
  if (groups <= 0 || K % groups != 0) return false;
  switch (p) {
    case Placement::contiguous: return K == groups;
    case Placement::v: return K == 2 * groups;
    case Placement::looped: return true;
  }
  return false;
}

int Layout::group_of(int stage) const {
  const int p = groups();
  switch (placement) {
    case Placement::contiguous: return stage;
    case Placement::looped: return stage % p;
    case Placement::v: return stage < p ? stage : 2 * p - 1 - stage;
  }
  return stage;
}

int Layout::ranks() const { return std::accumulate(replicas.begin(), replicas.end(), 0); }

int Layout::rank_of(int stage, int replica) const {
  const int g = group_of(stage);
  int r = 0;
  for (int i = 0; i < g; ++i) r += replicas[static_cast<size_t>(i)];
  return r + replica;
}

int Layout::group_of_rank(int rank) const {
  for (int g = 0; g < groups(); ++g) {
    if (rank < replicas[static_cast<size_t>(g)]) return g;
    rank -= replicas[static_cast<size_t>(g)];
  }
  return -1;
}

int Layout::replica_of(int rank) const {
  const int g = group_of_rank(rank);
  int r = rank;
  for (int i = 0; i < g; ++i) r -= replicas[static_cast<size_t>(i)];
  return r;
}

std::vector<int> Layout::stages_of_rank(int rank) const {
  const int g = group_of_rank(rank);
  std::vector<int> out;
  for (int s = 0; s < stages(); ++s)
    if (group_of(s) == g) out.push_back(s);
  return out;
}

int Layout::stage_of(int rank) const {
  const std::vector<int> st = stages_of_rank(rank);
  PT_CHECK(st.size() == 1, "rank " << rank << " hosts " << st.size() << " stages; use stages_of_rank");
  return st[0];
}

int Layout::in_flight_depth(int s) const {
  int w = 0;
  for (int t = s; t < stages(); ++t) w += replicas_of(t);
  const int r = replicas_of(s);
  return (w + r - 1) / r;
}

std::string Layout::replication() const {
  std::string s;
  for (size_t i = 0; i < replicas.size(); ++i) s += (i ? "-" : "") + std::to_string(replicas[i]);
  return s;
}

std::string Layout::str() const {
  std::ostringstream o;
  o << stages() << (stages() == 1 ? " stage" : " stages") << ": layers ";
  for (int s = 0; s < stages(); ++s) o << (s ? " | " : "") << first_layer(s) << "-" << end_layer(s) - 1;
  o << ", replicas " << replication() << " (" << ranks() << (ranks() == 1 ? " rank)" : " ranks)");
  if (placement != Placement::contiguous) o << ", placement " << placement_name(placement) << " (" << chunks() << " stages per rank)";
  return o.str();
}

std::string Layout::problem(const std::vector<int>& first_layers, int layers, const std::vector<int>& replicas, Placement placement) {
  const int K = static_cast<int>(first_layers.size()), p = static_cast<int>(replicas.size());
  const std::string on = std::to_string(K) + " stages on " + std::to_string(p) + " rank groups";
  if (!placement_fits(placement, K, p)) {
    if (p == 0 || K % p != 0) return on + " (not a whole number of stages per group)";
    return on + " with the " + placement_name(placement) + " placement (" +
           (placement == Placement::v ? "2 stages" : "one stage") + " per group)";
  }
  for (int r : replicas)
    if (r < 1) return "a rank group of " + std::to_string(r) + " replicas";
  for (int s = 0; s < K; ++s)
    if (first_layers[static_cast<size_t>(s)] >= (s + 1 < K ? first_layers[static_cast<size_t>(s) + 1] : layers) ||
        first_layers[static_cast<size_t>(s)] < 0)
      return "stage " + std::to_string(s) + " of layers " + std::to_string(first_layers[static_cast<size_t>(s)]) + ".. is empty (" +
             std::to_string(layers) + " layers)";
  return "";
}

Layout Layout::make(const std::vector<int>& first_layers, int layers, const std::vector<int>& replicas, Placement placement) {
  Layout l;
  l.first = first_layers;
  l.first.push_back(layers);
  l.replicas = replicas;
  l.placement = placement;
  const int K = l.stages(), p = l.groups();
  PT_CHECK(placement_fits(placement, K, p),
           "layout: " << K << " stages do not fit the " << placement_name(placement) << " placement on " << p << " rank groups");
  for (size_t s = 0; s + 1 < l.first.size(); ++s)
    PT_CHECK(l.first[s] < l.first[s + 1], "layout: stage " << s << " is empty");
  return l;
}

namespace {

std::string int_list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

// Rank groups: one count per entry of parallel.replicas; without it one group per stage
// (contiguous; one group of every rank for a single stage) or one per rank (looped, V).
int group_count(const Deck& d, Placement pl, int K, int ranks) {
  if (!d.parallel.replicas.empty()) return static_cast<int>(d.parallel.replicas.size());
  if (pl == Placement::contiguous) return K;
  return ranks;
}

// Replicas per group from the deck, checked against the job's rank count.
std::vector<int> group_replicas(const Deck& d, int groups, int ranks, const std::vector<int>& first) {
  std::vector<int> reps;
  if (!d.parallel.replicas.empty()) {
    for (auto v : d.parallel.replicas) reps.push_back(static_cast<int>(v));
    const int sum = std::accumulate(reps.begin(), reps.end(), 0);
    if (sum != ranks)
      fail(Exit::bad_input,
           d.where("parallel.replicas") + ": key 'parallel.replicas': " + int_list(reps) + " places " + std::to_string(sum) +
               " ranks (their sum), but the job has " + std::to_string(ranks) + " (mpirun -np " + std::to_string(ranks) + ")",
           true);
    return reps;
  }
  if (groups == 1) return {ranks};  // one stage: every rank a replica (data parallel)
  if (ranks == groups) return std::vector<int>(static_cast<size_t>(groups), 1);
  fail(Exit::bad_input,
       d.where("parallel.split") + ": key 'parallel.split': " + int_list(std::vector<int>(first.begin() + 1, first.end())) +
           " makes " + std::to_string(static_cast<int>(first.size())) + " stages" +
           (groups == static_cast<int>(first.size()) ? "" : " on " + std::to_string(groups) + " rank groups") +
           ", but the job has " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") +
           "; set parallel.replicas (one count per " + (groups == static_cast<int>(first.size()) ? "stage" : "rank group") +
           ", summing to " + std::to_string(ranks) + ") or run on " + std::to_string(groups) + " ranks",
       true);
}

}  // namespace

Layout Layout::from_deck(const Deck& d, int layers, int ranks, const ScheduleDef& def) {
  std::vector<int> first = {0};
  for (auto v : d.parallel.split) first.push_back(static_cast<int>(v));
  const int K = static_cast<int>(first.size());
  const Placement pl = d.parallel.placement.value_or(def.placement);
  if (pl != def.placement)
    fail(Exit::bad_input, d.where("parallel.placement") + ": key 'parallel.placement': schedule " + def.name +
                              " runs on the " + placement_name(def.placement) + " placement, not " + placement_name(pl) +
                              " (leave it \"auto\")", true);
  const int groups = group_count(d, pl, K, ranks);
  if (!placement_fits(pl, K, groups))
    fail(Exit::bad_input,
         d.where("parallel.split") + ": key 'parallel.split': " + std::to_string(K) + " stages do not fit the " +
             placement_name(pl) + " placement on " + std::to_string(groups) + " rank groups (" +
             (pl == Placement::v ? "V needs exactly 2 stages per group: list the first layer of all 2p stages" :
              pl == Placement::looped ? "looped needs v stages per group for v >= 1: p x v stages" : "one stage per group") +
             ")", true);
  std::vector<int> reps = group_replicas(d, groups, ranks, first);
  if (const std::string why = def.stage_count_problem(K); !why.empty())
    fail(Exit::bad_input, d.where("parallel.schedule") + ": key 'parallel.schedule': " + why, true);
  return make(first, layers, reps, pl);
}

}  // namespace pt
