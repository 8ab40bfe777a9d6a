// bf16 activations and messages (train.precision = "bf16"): Backend::round_bf16 against an
// independent reference (the double value of the nearest bf16, ties to even), pack_bf16 then
// unpack_bf16 restores bf16 values exactly (odd counts, signs, infinities, subnormals, NaN),
// packing halves the words, and a Boundary sends bf16 exactly where the value is bf16:
// every gradient, and an activation a layer other than a view computed; the profiler counts
// message bytes the same way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/profile.hpp"
#include "pipetrain/engine.hpp"
#include "pipetrain/schedule_ir.hpp"

namespace pt {
namespace {

// Reference: enumerate the two bf16 neighbours of x and pick the nearer in double, ties to
// the one with an even last mantissa bit.
float reference_bf16(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  const uint32_t lo = u & 0xFFFF0000u, hi = lo + 0x10000u;
  float a, b;
  std::memcpy(&a, &lo, 4);
  std::memcpy(&b, &hi, 4);
  const double da = std::fabs(static_cast<double>(x) - a), db = std::fabs(static_cast<double>(b) - x);
  if (da < db) return a;
  if (db < da) return b;
  return ((lo >> 16) & 1u) ? b : a;
}

TEST(PrecisionWire, RoundMatchesNearestEvenReference) {
  auto be = make_host_backend();
  std::vector<float> x;
  for (int i = 0; i < 20000; ++i) x.push_back(std::ldexp(static_cast<float>((i * 2654435761u) % 1000003u) / 1000003.0f, (i % 40) - 20) * (i % 3 ? 1 : -1));
  x.push_back(1.0f + std::ldexp(1.0f, -8));      // a tie: stays 1
  x.push_back(1.0f + 3 * std::ldexp(1.0f, -8));  // a tie: rounds up to the even 1 + 2^-6
  x.push_back(std::numeric_limits<float>::denorm_min() * 3);
  std::vector<float> y(x.size());
  be->round_bf16(x.size(), x.data(), y.data());
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], reference_bf16(x[i])) << "x = " << x[i];
  EXPECT_EQ(y[y.size() - 3], 1.0f);
  EXPECT_EQ(y[y.size() - 2], 1.0f + std::ldexp(1.0f, -6));
  std::vector<float> z = x;
  be->round_bf16(z.size(), z.data(), z.data());  // in place
  EXPECT_EQ(0, std::memcmp(z.data(), y.data(), 4 * y.size()));
}

TEST(PrecisionWire, PackUnpackIsExactForBf16Values) {
  auto be = make_host_backend();
  for (size_t n : {1u, 2u, 7u, 1001u}) {
    std::vector<float> x(n);
    for (size_t i = 0; i < n; ++i) x[i] = std::sin(static_cast<float>(i) * 0.37f) * std::ldexp(1.0f, static_cast<int>(i % 30) - 15);
    if (n > 4) {
      x[1] = std::numeric_limits<float>::infinity();
      x[2] = -0.0f;
      x[3] = std::numeric_limits<float>::denorm_min() * 65536.0f;
      x[4] = std::numeric_limits<float>::quiet_NaN();
    }
    be->round_bf16(n, x.data(), x.data());
    std::vector<float> packed((n + 1) / 2, 0.0f), back(n, 7.0f);
    be->pack_bf16(n, x.data(), packed.data());
    be->unpack_bf16(n, packed.data(), back.data());
    for (size_t i = 0; i < n; ++i) {
      if (std::isnan(x[i])) {
        EXPECT_TRUE(std::isnan(back[i]));
        continue;
      }
      uint32_t a, b;
      std::memcpy(&a, &x[i], 4);
      std::memcpy(&b, &back[i], 4);
      ASSERT_EQ(a, b) << "n " << n << " i " << i;
    }
  }
}

// flatten | linear 5 | relu | linear 3 | loss on a [1, 4, 4] input
const char* const kWireDeck =
    "[data]\nsource = \"synthetic\"\nshape = [1, 4, 4]\nclasses = 3\n[model]\n"
    "[[model.layers]]\ntype = \"flatten\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 5\n"
    "[[model.layers]]\ntype = \"relu\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 3\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";

TEST(PrecisionWire, BoundaryIsBf16ExactlyWhereTheValueIs) {
  const Deck deck = parse_deck_text(kWireDeck, "wire.toml", {});
  const Model model(deck, Shape::chw(1, 4, 4), 3);
  const Layout L = Layout::make({0, 1, 3}, 5, {1, 1, 1});
  // stage 0 = flatten only: its output is the model input, fp32 on the wire
  const Boundary b01 = boundary_above(model, L, 0, true);
  EXPECT_FALSE(b01.act_bf16);
  EXPECT_TRUE(b01.grad_bf16);
  EXPECT_EQ(b01.words(2, false), 32);  // 2 samples x 16 floats
  EXPECT_EQ(b01.words(2, true), 16);   // gradients packed two per word
  const Boundary b12 = boundary_above(model, L, 1, true);
  EXPECT_TRUE(b12.act_bf16);
  EXPECT_EQ(b12.words(3, false), 8);  // 15 values -> 8 words
  EXPECT_EQ(boundary_below(model, L, 2, true).act_bf16, b12.act_bf16);
  const Boundary fp = boundary_above(model, L, 1, false);
  EXPECT_FALSE(fp.act_bf16 || fp.grad_bf16);
  EXPECT_EQ(fp.words(3, false), 15);
}


// The profiler costs messages in the run's precision: in bf16 a computed activation is 2
// bytes per value on the wire, the model input passed through a view stays 4; what a stage
// keeps for backward (fp32 slots) does not change.
TEST(PrecisionWire, ProfileCountsBf16MessageBytes) {
  const Deck deck = parse_deck_text(kWireDeck, "wire.toml", {});
  const Model model(deck, Shape::chw(1, 4, 4), 3);
  auto be = make_host_backend();
  const std::vector<LayerProfile> fp = measure_layers(*be, model, Precision::fp32, 4, 1, 1, nullptr);
  const std::vector<LayerProfile> bf = measure_layers(*be, model, Precision::bf16, 4, 1, 1, nullptr);
  ASSERT_EQ(fp.size(), bf.size());
  EXPECT_EQ(bf[0].output_bytes, fp[0].output_bytes);  // flatten of the input: fp32
  for (size_t l = 1; l + 1 < fp.size(); ++l) {
    EXPECT_EQ(bf[l].output_bytes * 2, fp[l].output_bytes) << "layer " << l;
    EXPECT_EQ(bf[l].stash_bytes, fp[l].stash_bytes) << "layer " << l;
  }
}

}  // namespace
}  // namespace pt
