// Counter-based RNG: keyed streams are deterministic, distinct and roughly uniform.
#include <gtest/gtest.h>

#include <set>

#include "pipetrain/data.hpp"
#include "pipetrain/rng.hpp"

namespace pt {

TEST(Rng, SameKeySameStream) {
  const uint64_t k = rng_key(7, Stream::dropout, 3, 11);
  for (uint64_t i = 0; i < 100; ++i) EXPECT_EQ(rng_bits(k, i), rng_bits(rng_key(7, Stream::dropout, 3, 11), i));
}

TEST(Rng, DifferentKeysDiffer) {
  std::set<uint64_t> seen;
  for (uint64_t layer = 0; layer < 50; ++layer)
    for (uint64_t sample = 0; sample < 50; ++sample) seen.insert(rng_bits(rng_key(1, Stream::dropout, layer, sample), 0));
  EXPECT_EQ(seen.size(), 2500u);
}

TEST(Rng, UniformMoments) {
  const uint64_t k = rng_key(3, Stream::init, 1);
  double s = 0, s2 = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double u = rng_uniform(k, static_cast<uint64_t>(i));
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    s += u;
    s2 += u * u;
  }
  EXPECT_NEAR(s / n, 0.5, 0.005);
  EXPECT_NEAR(s2 / n - (s / n) * (s / n), 1.0 / 12.0, 0.002);
}

TEST(Rng, EpochPermutationIsAPermutationAndDeterministic) {
  auto p = epoch_permutation(1000, 5, 2);
  auto q = epoch_permutation(1000, 5, 2);
  auto r = epoch_permutation(1000, 5, 3);
  EXPECT_EQ(p, q);
  EXPECT_NE(p, r);
  std::set<int64_t> s(p.begin(), p.end());
  EXPECT_EQ(s.size(), 1000u);
  EXPECT_EQ(*s.begin(), 0);
  EXPECT_EQ(*s.rbegin(), 999);
}

}  // namespace pt
