// Layout: stages (layer slices) and replicas, rank placement, and its checks.
#include <numeric>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/schedule.hpp"

namespace pt {

int Layout::ranks() const { return std::accumulate(replicas.begin(), replicas.end(), 0); }

int Layout::rank_of(int stage, int replica) const {
  int r = 0;
  for (int s = 0; s < stage; ++s) r += replicas[static_cast<size_t>(s)];
  return r + replica;
}

int Layout::stage_of(int rank) const {
  for (int s = 0; s < stages(); ++s) {
    if (rank < replicas[static_cast<size_t>(s)]) return s;
    rank -= replicas[static_cast<size_t>(s)];
  }
  return -1;
}

int Layout::replica_of(int rank) const { return rank - rank_of(stage_of(rank), 0); }

int Layout::in_flight_depth(int s) const {
  int w = 0;
  for (int t = s; t < stages(); ++t) w += replicas[static_cast<size_t>(t)];
  const int r = replicas[static_cast<size_t>(s)];
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
  return o.str();
}

Layout Layout::make(const std::vector<int>& first_layers, int layers, const std::vector<int>& replicas) {
  Layout l;
  l.first = first_layers;
  l.first.push_back(layers);
  l.replicas = replicas;
  PT_CHECK(l.first.size() == l.replicas.size() + 1, "layout: " << l.first.size() - 1 << " stages vs "
                                                                << l.replicas.size() << " replica counts");
  for (size_t s = 0; s + 1 < l.first.size(); ++s)
    PT_CHECK(l.first[s] < l.first[s + 1], "layout: stage " << s << " is empty");
  return l;
}

Layout Layout::from_deck(const Deck& d, int layers, int ranks) {
  std::vector<int> first = {0};
  for (auto v : d.parallel.split) first.push_back(static_cast<int>(v));
  const int K = static_cast<int>(first.size());
  std::vector<int> reps;
  auto list = [](const std::vector<int>& v) {
    std::string s = "[";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
    return s + "]";
  };
  if (!d.parallel.replicas.empty()) {
    for (auto v : d.parallel.replicas) reps.push_back(static_cast<int>(v));
    int sum = std::accumulate(reps.begin(), reps.end(), 0);
    if (sum != ranks)
      fail(Exit::bad_input,
           d.where("parallel.replicas") + ": key 'parallel.replicas': " + list(reps) + " places " + std::to_string(sum) +
               " ranks (their sum), but the job has " + std::to_string(ranks) + " (mpirun -np " + std::to_string(ranks) + ")",
           true);
  } else if (K == 1) {
    reps = {ranks};  // one stage: every rank a replica (data parallel)
  } else if (ranks == K) {
    reps.assign(static_cast<size_t>(K), 1);
  } else {
    fail(Exit::bad_input,
         d.where("parallel.split") + ": key 'parallel.split': " + list(std::vector<int>(first.begin() + 1, first.end())) + " makes " +
             std::to_string(K) + " stages, but the job has " + std::to_string(ranks) +
             (ranks == 1 ? " rank" : " ranks") + "; set parallel.replicas (one count per stage, summing to " +
             std::to_string(ranks) + ") or run on " + std::to_string(K) + " ranks",
         true);
  }
  if (d.parallel.schedule == "bsp" && K != 1)
    fail(Exit::bad_input, d.where("parallel.schedule") + ": key 'parallel.schedule': bsp needs one stage, got " + std::to_string(K), true);
  return make(first, layers, reps);
}

}  // namespace pt
