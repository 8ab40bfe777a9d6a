// The cluster model: hierarchical levels (innermost first, aligned blocks of ranks) or the
// measured network, with point-to-point and ring-allreduce costs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "pipetrain/error.hpp"
#include "pipetrain/sim.hpp"

namespace pt {

int ClusterModel::level_of(int a, int b) const {
  if (a == b) return -1;
  if (a > b) std::swap(a, b);
  for (size_t k = 0; k < levels.size(); ++k) {
    const int64_t size = std::max<int64_t>(1, levels[k].ranks);
    if (a / size == b / size) return static_cast<int>(k);
  }
  return static_cast<int>(levels.size()) - 1;
}

double ClusterModel::p2p_seconds(int level, double bytes) const {
  if (level < 0 || levels.empty()) return 0.0;
  const Level& l = levels[static_cast<size_t>(std::min<int>(level, static_cast<int>(levels.size()) - 1))];
  return l.latency + bytes / l.bandwidth;
}

namespace {

double ring_factor(int r) { return r <= 1 ? 0.0 : 2.0 * (r - 1) / r; }

// Measured allreduce time for `bytes`: log-log interpolation in the table, linear in bytes
// beyond its ends.
double table_seconds(const std::vector<NetworkPoint>& t, double bytes) {
  if (t.empty()) return 0.0;
  if (bytes <= t.front().bytes) return t.front().seconds;  // latency-bound below the table
  if (bytes >= t.back().bytes) return t.back().seconds * bytes / t.back().bytes;
  for (size_t i = 1; i < t.size(); ++i)
    if (bytes <= t[i].bytes) {
      const double x0 = std::log(t[i - 1].bytes), x1 = std::log(t[i].bytes);
      const double y0 = std::log(std::max(1e-12, t[i - 1].seconds)), y1 = std::log(std::max(1e-12, t[i].seconds));
      const double w = (std::log(bytes) - x0) / (x1 - x0);
      return std::exp(y0 + w * (y1 - y0));
    }
  return t.back().seconds;
}

}  // namespace

double ClusterModel::allreduce_seconds(int level, int r, double bytes) const {
  if (r <= 1 || levels.empty()) return 0.0;
  if (measured && !network.allreduce.empty() && network.allreduce_ranks >= 2)
    return table_seconds(network.allreduce, bytes) * ring_factor(r) / ring_factor(network.allreduce_ranks);
  const Level& l = levels[static_cast<size_t>(std::clamp<int>(level, 0, static_cast<int>(levels.size()) - 1))];
  return ring_factor(r) * bytes / l.bandwidth + 2.0 * (r - 1) * l.latency;
}

std::string ClusterModel::describe() const {
  std::string s;
  char b[160];
  if (measured) {
    std::snprintf(b, sizeof b, "measured network: p2p %.3g GB/s, latency %.3g us, allreduce table of %zu sizes on %d ranks",
                  network.bandwidth / 1e9, network.latency * 1e6, network.allreduce.size(), network.allreduce_ranks);
    return b;
  }
  for (size_t k = 0; k < levels.size(); ++k) {
    const bool outer = k + 1 == levels.size();
    if (outer && levels[k].ranks >= (int64_t{1} << 40))
      std::snprintf(b, sizeof b, "%slevel %zu: all ranks, %.3g GB/s, latency %.3g us", k ? "; " : "", k,
                    levels[k].bandwidth / 1e9, levels[k].latency * 1e6);
    else
      std::snprintf(b, sizeof b, "%slevel %zu: %lld ranks per component%s, %.3g GB/s, latency %.3g us", k ? "; " : "", k,
                    static_cast<long long>(levels[k].ranks), outer ? " (and beyond)" : "", levels[k].bandwidth / 1e9,
                    levels[k].latency * 1e6);
    s += b;
  }
  return s;
}

ClusterModel ClusterModel::single(double bandwidth, double latency) {
  ClusterModel c;
  c.levels.push_back({int64_t{1} << 40, bandwidth, latency});
  return c;
}

ClusterModel ClusterModel::from_levels(const std::vector<ClusterLevel>& lv) {
  if (lv.empty()) fail(Exit::bad_input, "cluster: no levels given", true);
  ClusterModel c;
  for (size_t k = 0; k < lv.size(); ++k) {
    if (lv[k].bandwidth <= 0) fail(Exit::bad_input, "cluster level " + std::to_string(k) + ": bandwidth must be > 0", true);
    if (lv[k].ranks < 1) fail(Exit::bad_input, "cluster level " + std::to_string(k) + ": ranks must be >= 1", true);
    if (k > 0 && lv[k].ranks < lv[k - 1].ranks)
      fail(Exit::bad_input, "cluster level " + std::to_string(k) + ": " + std::to_string(lv[k].ranks) +
                                " ranks per component is fewer than the inner level's " + std::to_string(lv[k - 1].ranks) +
                                " (levels are innermost first; ranks counts every rank in one component)",
           true);
    c.levels.push_back({lv[k].ranks, lv[k].bandwidth, lv[k].latency});
  }
  return c;
}

ClusterModel ClusterModel::from_network(const NetworkModel& net) {
  ClusterModel c = single(net.bandwidth > 0 ? net.bandwidth : 1e12, net.latency);
  c.measured = true;
  c.network = net;
  return c;
}

ClusterModel ClusterModel::from_deck(const Deck& deck, const Profile& profile) {
  if (!deck.cluster.levels.empty()) return from_levels(deck.cluster.levels);
  if (profile.network.measured) return from_network(profile.network);
  fail(Exit::bad_input,
       deck.path + ": no network model: add [[cluster.levels]] (ranks, bandwidth, latency) to the deck, pass --bandwidth, "
                   "or use a profile measured under mpirun -np >= 2",
       true);
}

}  // namespace pt
