// Helpers shared by the unit tests: fixture paths, tolerances, rank queries.
#pragma once
#include <mpi.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace pt::test {

inline int world_size() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}
inline int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

// Directory of the committed fixtures (tests/fixtures), overridable with PT_FIXTURES.
inline std::string fixtures_dir() {
  const char* e = std::getenv("PT_FIXTURES");
  return e ? e : "tests/fixtures";
}

// The published PipeDream graph.txt profiles (../shared/data/pipedream-profiles), overridable
// with PT_PIPEDREAM_PROFILES; tests that need them skip when the folder is absent.
inline std::string pipedream_profiles_dir() {
  const char* e = std::getenv("PT_PIPEDREAM_PROFILES");
  return e ? e : "../shared/data/pipedream-profiles";
}

// The whole file into *text; false when it cannot be opened.
inline bool read_text_if(const std::string& path, std::string* text) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  *text = ss.str();
  return true;
}

// max |a - b| / (atol + rtol |b|) <= 1 elementwise; returns the worst ratio.
inline double worst_ratio(const std::vector<float>& a, const std::vector<float>& b, double atol, double rtol) {
  double worst = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i)
    worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])) / (atol + rtol * std::fabs(double(b[i]))));
  return a.size() == b.size() ? worst : INFINITY;
}

// count values uniform in [-scale/2, scale/2) from a fixed linear congruential stream: test
// data that is the same on every machine
inline std::vector<float> lcg_uniform(size_t count, uint32_t seed, float scale) {
  std::vector<float> v(count);
  uint32_t s = seed;
  for (auto& x : v) {
    s = s * 1664525u + 1013904223u;
    x = scale * (static_cast<float>(s >> 8) / 16777216.0f - 0.5f);
  }
  return v;
}

}  // namespace pt::test
