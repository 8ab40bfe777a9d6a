// WeightStore in bf16 against fp32 (engine.hpp, docs/PRECISION.md "Weights in bf16"): driven
// through the stage-0 actions of stashing schedules in lockstep with an fp32 store, every
// read of the bf16 store is round_bf16 of the fp32 store's version bitwise, the master equals
// the fp32 latest, held versions agree, checkpoint copies are the master and the stashes' bf16
// values, a store restored from them mid-IR reads the same, the bf16 array a read hands out
// (ParamView) always holds the compute copy's values (a bf16 GEMM reading it equals one reading
// a copy) under a version no earlier read had, and the bytes are master + compute copy + its
// bf16 array + packed stashes. The same holds when the compute copy is rounded range by range
// during the update (updated_range, the optimizer's RangeHook), whose copy a read then uses,
// and with operand-only ranges (set_operand_only), whose fp32 values a read leaves NaN.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <vector>

#include "pipetrain/backend.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/engine.hpp"
#include "pipetrain/model.hpp"
#include "pipetrain/stage.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

std::vector<float> rounded(Backend& be, const float* x, size_t n) {
  std::vector<float> y(n);
  be.round_bf16(n, x, y.data());
  return y;
}

bool same_bits(const float* a, const float* b, size_t n) { return std::memcmp(a, b, n * sizeof(float)) == 0; }

// A bf16 product reading w's bf16 array equals one reading a copy of the compute buffer's
// values, converted where it is used: an array of another version would differ. What a backend
// keys on stays true: an array version seen before comes with the same address and values.
using Seen = std::map<uint64_t, std::pair<const float*, std::vector<float>>>;
// (want: the version's bf16 values, which the compute copy holds outside operand-only ranges)
void expect_array_holds(Backend& be, ParamView w, const std::vector<float>& want, Seen* seen) {
  const size_t n = want.size();
  const int64_t K = static_cast<int64_t>(n), M = 3;
  std::vector<float> x(static_cast<size_t>(M * K)), copy(want), y(M), y_copy(M);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::cos(1.3f * static_cast<float>(i));
  const CView a = w.operand(DType::bf16);
  ASSERT_TRUE(a.bf16() && a.version != 0) << "a bf16 store's read has no bf16 array";
  auto it = seen->find(a.version);
  if (it == seen->end()) {
    (*seen)[a.version] = {a.data, copy};
  } else {
    ASSERT_EQ(it->second.first, a.data) << "array version " << a.version << " moved";
    ASSERT_TRUE(same_bits(it->second.second.data(), copy.data(), n)) << "array version " << a.version << " changed values";
  }
  be.gemm(false, false, M, 1, K, 1.0f, x.data(), K, a, 1, 0.0f, y.data(), 1, Precision::bf16);
  be.gemm(false, false, M, 1, K, 1.0f, x.data(), K, copy.data(), 1, 0.0f, y_copy.data(), 1, Precision::bf16);
  ASSERT_TRUE(same_bits(y.data(), y_copy.data(), static_cast<size_t>(M))) << "the bf16 array is not the compute copy";
}

using Ranges = std::vector<std::pair<int64_t, int64_t>>;
// A bf16 read's fp32 values: the version's bf16 values (want), NaN in the operand-only ranges
::testing::AssertionResult compute_values(const float* got, const std::vector<float>& want, const Ranges& only) {
  std::vector<char> in(want.size(), 0);
  for (const auto& [lo, count] : only) std::fill(in.begin() + lo, in.begin() + lo + count, 1);
  for (size_t i = 0; i < want.size(); ++i)
    if (in[i] ? !std::isnan(got[i]) : !same_bits(got + i, want.data() + i, 1))
      return ::testing::AssertionFailure() << "value " << i << " is " << got[i] << ", want "
                                           << (in[i] ? "NaN (operand only)" : std::to_string(want[i]));
  return ::testing::AssertionSuccess();
}

// range > 0: each bf16 update is followed by updated_range over consecutive ranges of that
// many parameters (the optimizer's RangeHook), as the executor does. only: the bf16 stores'
// operand-only ranges (WeightStore::set_operand_only).
void drive(const std::string& sched, int K, int64_t steps, int M, size_t n, size_t range = 0, const Ranges& only = {}) {
  SCOPED_TRACE(sched + " n=" + std::to_string(n) + " range=" + std::to_string(range) + " operand-only ranges " +
               std::to_string(only.size()));
  auto be = make_host_backend();
  std::vector<int> first;
  for (int s = 0; s < K; ++s) first.push_back(s);
  const Schedule ir = make_schedule(sched, Layout::make(first, K, std::vector<int>(static_cast<size_t>(K), 1)), steps, M);
  WeightStore f32(*be, n), b16(*be, n, true);
  b16.set_operand_only(only);
  for (size_t i = 0; i < n; ++i) f32.latest()[i] = b16.latest()[i] = std::sin(0.7f * static_cast<float>(i) + 1.0f) * (1.0f + i / 3.0f);
  f32.prepare(ir, 0, 0), b16.prepare(ir, 0, 0);
  std::unique_ptr<WeightStore> restored;  // made from b16's checkpoint copies once a stash is held
  const auto& acts = ir.workers[0];
  int updates = 0, max_stashes = 0;
  Seen seen;  // both stores' arrays: versions are unique in the process
  for (size_t i = 0; i < acts.size(); ++i) {
    const Action& a = acts[i];
    if (a.stage != 0) continue;
    if (is_compute(a.op)) {
      const std::vector<float> want = rounded(*be, f32.read(a.version), n);
      ASSERT_TRUE(compute_values(b16.read(a.version), want, only)) << "action " << i;
      expect_array_holds(*be, b16.read(a.version), want, &seen);
      if (restored) {
        ASSERT_TRUE(compute_values(restored->read(a.version), want, only)) << "restored, action " << i;
        expect_array_holds(*be, restored->read(a.version), want, &seen);
      }
      ASSERT_TRUE(compute_values(b16.read(a.version), want, only)) << "a second read of the same version";
      f32.done_reading(a.version), b16.done_reading(a.version);
      if (restored) restored->done_reading(a.version);
    } else if (a.op == Op::optimizer_step) {
      std::vector<WeightStore*> stores = {&f32, &b16};
      if (restored) stores.push_back(restored.get());
      for (WeightStore* w : stores) {
        float* p = w->begin_update(a.version);
        for (size_t k = 0; k < n; ++k) p[k] += 0.01f * static_cast<float>((updates + 1) * (k + 1)) / 3.0f;
        for (size_t off = 0; range && off < n; off += range) w->updated_range(off, std::min(range, n - off));
      }
      ++updates;
      ASSERT_TRUE(same_bits(f32.latest(), b16.latest(), n));
      ASSERT_EQ(f32.held(), b16.held());
      max_stashes = std::max(max_stashes, b16.held() - 1);
      std::map<int64_t, std::vector<float>> fp;
      for (auto& [id, v] : f32.host_versions()) fp[id] = v;
      const auto copies = b16.host_versions();
      ASSERT_EQ(copies.size(), fp.size());
      for (const auto& [id, v] : copies) {
        ASSERT_TRUE(fp.count(id));
        const std::vector<float> want = id == b16.latest_id() ? fp[id] : rounded(*be, fp[id].data(), n);
        ASSERT_TRUE(same_bits(v.data(), want.data(), n)) << "checkpoint copy of version " << id;
      }
      if (!restored && b16.held() > 1) {  // resume here: prepare from the next action, then restore
        restored = std::make_unique<WeightStore>(*be, n, true);
        restored->set_operand_only(only);
        restored->prepare(ir, 0, 0, i + 1);
        restored->restore(copies, b16.latest_id(), b16.base());
        ASSERT_EQ(restored->held(), b16.held());
      }
    }
  }
  ASSERT_GT(updates, 0);
  ASSERT_GT(max_stashes, 0) << "the schedule never stashed";
  ASSERT_TRUE(restored);
  const int64_t pool = max_versions_held(ir, 0, 0), n4 = static_cast<int64_t>(n) * 4;
  EXPECT_EQ(f32.bytes(), pool * n4);
  EXPECT_EQ(b16.bytes(), 2 * n4 + pool * 4 * static_cast<int64_t>((n + 1) / 2));  // + bf16 array + stashes
}

// reserve (the trainer's setup) allocates what prepare would for the IR: prepare then adds no
// bytes, and a store prepared without it ends the same size.
TEST(WeightStore, ReserveAllocatesWhatPrepareWould) {
  auto be = make_host_backend();
  const Schedule ir = make_schedule("pipedream", Layout::make({0, 1, 2, 3}, 4, {1, 1, 1, 1}), 10, 1);
  for (const bool bf16 : {false, true}) {
    WeightStore reserved(*be, 1000, bf16), plain(*be, 1000, bf16);
    const int64_t at_start = reserved.bytes();
    reserved.reserve(ir, 0, 0);
    EXPECT_GT(reserved.bytes(), at_start) << "bf16 " << bf16 << ": pipedream's stage 0 holds several versions";
    const int64_t after_reserve = reserved.bytes();
    reserved.prepare(ir, 0, 0);
    plain.prepare(ir, 0, 0);
    EXPECT_EQ(reserved.bytes(), after_reserve) << "bf16 " << bf16 << ": prepare allocated after reserve";
    EXPECT_EQ(plain.bytes(), after_reserve) << "bf16 " << bf16;
  }
}

TEST(WeightStoreBf16, PipedreamStashesPackedCopies) {
  drive("pipedream", 3, 8, 1, 7);  // odd n: the last packed word holds one value
  drive("pipedream", 4, 10, 1, 1000);
}

TEST(WeightStoreBf16, OtherStashingSchedules) {
  drive("pipedream-vsync", 3, 8, 1, 9);
  drive("2bw", 3, 6, 4, 10);
}

// The compute copy rounded range by range during the update (WeightStore::updated_range):
// every read above still equals the fp32 version rounded, arrays stay unique, for stashing
// schedules and an odd last range.
TEST(WeightStoreBf16, RangesRoundedDuringTheUpdate) {
  drive("pipedream", 3, 8, 1, 7, 4);
  drive("pipedream", 4, 10, 1, 1000, 64);
  drive("2bw", 3, 6, 4, 10, 2);
}

// Operand-only ranges (the linear weights: ParamTensor::operand_only): every read's bf16 array
// is still the version's bf16 values there, and its fp32 values are NaN there and the bf16
// values elsewhere, when rounded whole, range by range (ranges crossing theirs), unpacked from
// a stash and restored; unsorted and touching ranges merge.
TEST(WeightStoreBf16, OperandOnlyRangesMakeOnlyTheArray) {
  drive("pipedream", 4, 10, 1, 1000, 0, {{500, 100}, {0, 300}, {300, 2}});
  drive("pipedream", 4, 10, 1, 1000, 64, {{2, 298}, {600, 400}});
  drive("2bw", 3, 6, 4, 11, 4, {{2, 4}});  // odd n: the last value stays outside
  drive("pipedream-vsync", 3, 8, 1, 9, 2, {{0, 8}});
}

TEST(WeightStoreBf16, OperandOnlyRangesRefused) {
  auto be = make_host_backend();
  WeightStore b(*be, 10, true);
  EXPECT_THROW(b.set_operand_only({{1, 4}}), Error);   // odd start
  EXPECT_THROW(b.set_operand_only({{2, 3}}), Error);   // odd count
  EXPECT_THROW(b.set_operand_only({{8, 4}}), Error);   // past the end
  WeightStore f(*be, 10);
  f.set_operand_only({{0, 4}});  // fp32: no compute copy, nothing changes
  for (int i = 0; i < 10; ++i) f.latest()[i] = static_cast<float>(i);
  EXPECT_EQ(static_cast<const float*>(f.read_latest())[2], 2.0f);
}

// A stage names its layers' operand-only tensors (the linear weights) in its flat parameters,
// trimmed to even ends; biases and other layers' tensors are not among them.
TEST(WeightStoreBf16, StageNamesTheLinearWeights) {
  const char* text =
      "[data]\nsource = \"synthetic\"\nshape = [5]\nclasses = 3\n[model]\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 7\n"        // weight [0, 35), bias [35, 42)
      "[[model.layers]]\ntype = \"relu\"\n"
      "[[model.layers]]\ntype = \"linear\"\nout = 3\n"        // weight [42, 63), bias [63, 66)
      "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";
  const Deck d = parse_deck_text(text, "operand_only.toml", {});
  const Model m(d, Shape::vec(5), 3);
  auto be = make_host_backend();
  const Stage all(*be, m, 0, 4, 2, 2, false, Recompute::none, Precision::bf16);
  EXPECT_EQ(all.operand_only_ranges(), (Ranges{{0, 34}, {42, 20}}));
  const Stage top(*be, m, 2, 4, 2, 2, false, Recompute::none, Precision::bf16);
  EXPECT_EQ(top.operand_only_ranges(), (Ranges{{0, 20}}));  // weight [0, 21)
}

// After the last range the copy holds the latest: a read rounds nothing more (a master changed
// behind the store's back is not seen until latest_changed), and ranges out of order are refused.
TEST(WeightStoreBf16, ReadAfterRangesUsesTheirCopy) {
  auto be = make_host_backend();
  const size_t n = 10;
  WeightStore b(*be, n, true);
  float* p = b.begin_update(0);
  for (size_t k = 0; k < n; ++k) p[k] = 1.0f + static_cast<float>(k) / 7.0f;
  const std::vector<float> want = rounded(*be, p, n);
  b.updated_range(0, 4), b.updated_range(4, 6);
  p[0] = 100.0f;  // not through the store
  EXPECT_TRUE(same_bits(b.read_latest(), want.data(), n));
  b.latest_changed();
  EXPECT_EQ(static_cast<const float*>(b.read_latest())[0], 100.0f);
  b.begin_update(1);
  EXPECT_THROW(b.updated_range(4, 6), Error);
}

TEST(WeightStoreBf16, Fp32StoreHasNoCopies) {
  auto be = make_host_backend();
  WeightStore w(*be, 10);
  EXPECT_FALSE(w.bf16());
  EXPECT_EQ(w.bytes(), 40);
  EXPECT_EQ(w.read_latest(), w.latest());
  WeightStore b(*be, 10, true);
  EXPECT_EQ(b.bytes(), 100);  // master + compute copy + its bf16 array
  for (int i = 0; i < 10; ++i) b.latest()[i] = 1.0f + std::ldexp(1.0f, -12) * i;
  const std::vector<float> want = rounded(*be, b.latest(), 10);
  EXPECT_TRUE(same_bits(b.read_latest(), want.data(), 10));
  EXPECT_NE(b.read_latest(), b.latest());
}

}  // namespace
}  // namespace pt
