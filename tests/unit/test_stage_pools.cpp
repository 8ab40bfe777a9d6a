// StagePools (stage_pools.hpp) driven directly, without an executor or MPI, on the middle
// stage of a three-stage MLP (it has every pool: activation slots, incoming and outgoing
// gradient buffers): sizes come from the IR's units in flight and never shrink; a unit's
// slot goes claim -> forward -> B, or I (kept) -> W, -> release, and free slots are reused
// in release order; incoming gradient buffers and the outgoing ring; restore after a cut;
// bf16 wire copies exactly where the boundary's message is bf16. Every misuse (a second
// claim, a forward before its receive, a release while its send is pending or while a W
// still needs it, a W without its kept gradients, a gradient buffer reused too early, an IR
// starting with something held) is an internal error naming the microbatch. Requests are
// completed by hand (Request::set_token): the pools only look at whether one is pending.
// Full recomputation: unit slots hold the stage's input and output only; recompute buffers
// (one plus the IR's most units between I and W) are bound with a copy of the unit's input
// during a FORWARD (its output copied back), during a B, and from an I until its W.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "pipetrain/engine.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/schedule_registry.hpp"

namespace pt {
namespace {

const char* kDeck =
    "[data]\nsource = \"synthetic\"\nshape = [6]\nclasses = 3\n[model]\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 5\n"
    "[[model.layers]]\ntype = \"relu\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 4\n"
    "[[model.layers]]\ntype = \"layernorm\"\n"
    "[[model.layers]]\ntype = \"linear\"\nout = 3\n"
    "[[model.layers]]\ntype = \"softmax_cross_entropy\"\n";

constexpr int64_t kMb = 2;  // samples per unit

// Stage `s` of three ({0,1}, {2,3}, {4,5}), split backward, its pools prepared for `sched`.
struct Pools {
  explicit Pools(const std::string& sched = "zb-h1", int s = 1, bool bf16 = false, int microbatches = 4,
                 Recompute recompute = Recompute::none)
      : deck(parse_deck_text(kDeck, "pools.toml", {})),
        model(deck, Shape::vec(6), 3),
        be(make_host_backend()),
        layout(Layout::make({0, 2, 4}, 6, {1, 1, 1})),
        stage(*be, model, layout.first_layer(s), layout.end_layer(s), kMb, kMb, true, recompute),
        in(boundary_below(model, layout, s, bf16)),
        out(boundary_above(model, layout, s, bf16)),
        pools(stage, in, out, s == 0, s == 2),
        ir(make_schedule(sched, layout, 2, microbatches)),
        id(s) {
    pools.prepare(ir, s, s, kMb, 1);
  }
  // a unit through its FORWARD (claimed, its receive completed)
  Stage::Slot& forward(int64_t mb, double loss = 0) {
    pools.claim(mb);
    Stage::Slot& slot = pools.forward_slot(mb);
    pools.compute_slot(mb);  // the unit's slot, or (full) a recompute buffer until forwarded
    pools.forwarded(mb, 100 + mb, loss);
    return slot;
  }
  Deck deck;
  Model model;
  std::unique_ptr<Backend> be;
  Layout layout;
  Stage stage;
  Boundary in, out;
  StagePools pools;
  Schedule ir;
  int id;
};

// f must fail with an internal error whose message contains `what`.
void expect_internal(const std::function<void()>& f, const std::string& what) {
  try {
    f();
  } catch (const Error& e) {
    EXPECT_EQ(static_cast<int>(e.code()), static_cast<int>(Exit::internal)) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << "message: " << e.what() << "\nexpected: " << what;
    return;
  }
  ADD_FAILURE() << "no error; expected one containing: " << what;
}

TEST(StagePools, SizedFromTheIrsUnitsInFlightNeverShrinking) {
  Pools p("zb-h1", 1, false, 4);
  const int need = max_in_flight(p.ir, 1, 1);
  EXPECT_GT(need, 1);
  EXPECT_EQ(p.pools.size(), need);
  EXPECT_EQ(p.pools.activation_bytes(), need * p.stage.slot_floats() * 4);
  // grad in (out.floats) + grad out (in.floats) per unit, fp32: no wire copies
  EXPECT_EQ(p.pools.buffer_bytes(), need * (p.out.floats(kMb) + p.in.floats(kMb)) * 4);
  const Schedule small = make_schedule("model-parallel", p.layout, 1, 1);
  ASSERT_LT(max_in_flight(small, 1, 1), need);
  p.pools.prepare(small, 1, 1, kMb, 1);
  EXPECT_EQ(p.pools.size(), need) << "the pools shrank";
  const Schedule big = make_schedule("gpipe", p.layout, 1, 8);
  ASSERT_GT(max_in_flight(big, 1, 1), need);
  p.pools.prepare(big, 1, 1, kMb, 1);
  EXPECT_EQ(p.pools.size(), max_in_flight(big, 1, 1));
  for (int m = 0; m < p.pools.size(); ++m) p.pools.claim(m);  // every slot, no allocation
  EXPECT_FALSE(p.pools.can_claim());
  expect_internal([&] { p.pools.claim(99); }, "no free activation slot for mb 99");
}

// reserve (the trainer's setup) grows the pools as prepare would for the IR, while a unit is
// held too, which keeps its slot; prepare for the same IR then grows nothing, and every slot
// reserve made is claimable.
TEST(StagePools, ReserveGrowsAsPrepareWouldAndPrepareThenGrowsNothing) {
  Pools p("zb-h1", 1, false, 4);
  const Schedule big = make_schedule("gpipe", p.layout, 1, 8);
  const int need = max_in_flight(big, 1, 1);
  ASSERT_GT(need, p.pools.size());
  const float* held = p.forward(0).input;
  p.pools.reserve(big, 1, 1, kMb, 1);
  EXPECT_EQ(p.pools.size(), need);
  EXPECT_EQ(p.pools.activation_bytes(), need * p.stage.slot_floats() * 4);
  EXPECT_EQ(p.pools.buffer_bytes(), need * (p.out.floats(kMb) + p.in.floats(kMb)) * 4);
  EXPECT_EQ(p.pools.backward_slot(0, StagePools::Half::fused).input, held) << "reserve moved a held unit";
  p.pools.release(0);
  p.pools.prepare(big, 1, 1, kMb, 1);
  EXPECT_EQ(p.pools.size(), need) << "prepare grew after reserve";
  std::set<const float*> bufs;
  for (int m = 0; m < need; ++m) bufs.insert(p.forward(m).input);
  EXPECT_EQ(static_cast<int>(bufs.size()), need);
  EXPECT_FALSE(p.pools.can_claim());
}

TEST(StagePools, SplitBackwardUnitKeepsItsSlotFromIUntilW) {
  Pools p;
  p.pools.claim(3);
  const MessageBuffer in = p.pools.act_in(3);
  EXPECT_EQ(in.wire, nullptr);  // fp32 boundary: the slot's input itself travels
  in.req->set_token(7);         // the RECV_ACT posted ahead is in flight
  expect_internal([&] { p.pools.forward_slot(3); }, "FORWARD of mb 3 before its activation arrived");
  in.req->set_token(0);  // it arrived
  Stage::Slot& slot = p.pools.forward_slot(3);
  EXPECT_EQ(slot.input, in.data);
  p.pools.forwarded(3, 42, 1.5);
  EXPECT_EQ(p.pools.unit(3).fwd_version, 42);
  EXPECT_EQ(p.pools.unit(3).loss, 1.5);
  const MessageBuffer o = p.pools.act_out(3);
  EXPECT_EQ(o.data, p.stage.output(slot));
  EXPECT_EQ(&p.pools.backward_slot(3, StagePools::Half::input), &slot);  // I: the slot is kept
  std::vector<int64_t> others;
  for (int64_t mb = 10; p.pools.can_claim(); ++mb) {  // every other slot: never the kept one
    EXPECT_NE(p.pools.claim(mb).input, slot.input) << "the slot kept for W was claimed again";
    others.push_back(mb);
  }
  EXPECT_EQ(static_cast<int>(others.size()), p.pools.size() - 1);
  expect_internal([&] { p.pools.release(3); }, "activation slot of mb 3 released while its BACKWARD_WEIGHT still needs it");
  expect_internal([&] { p.pools.backward_slot(3, StagePools::Half::input); }, "BACKWARD_INPUT of mb 3 on a slot that is not forwarded");
  EXPECT_EQ(&p.pools.weight_slot(3), &slot);
  o.req->set_token(9);  // its SEND_ACT still in flight
  expect_internal([&] { p.pools.release(3); }, "activation slot of mb 3 released while its SEND_ACT is pending");
  EXPECT_EQ(&p.pools.act_send_req(3), o.req);
  o.req->set_token(0);
  p.pools.release(3);
  expect_internal([&] { p.pools.unit(3); }, "of mb 3: the unit holds no activation slot");
}

TEST(StagePools, FusedBackwardFinishesTheUnit) {
  Pools p("1f1b");
  Stage::Slot& slot = p.forward(5, 2.0);
  expect_internal([&] { p.pools.release(5); }, "activation slot of mb 5 released before its backward ran");
  EXPECT_EQ(&p.pools.backward_slot(5, StagePools::Half::fused), &slot);
  expect_internal([&] { p.pools.weight_slot(5); }, "BACKWARD_WEIGHT of mb 5 without its kept output gradients");
  p.pools.release(5);
  EXPECT_TRUE(p.pools.forwarded_units().empty());
}

TEST(StagePools, WeightWithoutItsKeptGradientsFails) {
  Pools p;
  p.forward(1);
  expect_internal([&] { p.pools.weight_slot(1); }, "BACKWARD_WEIGHT of mb 1 without its kept output gradients");
  expect_internal([&] { p.pools.weight_slot(8); }, "BACKWARD_WEIGHT of mb 8 without its kept output gradients");
  // released after I (too early) and claimed again by its next unit: its W finds nothing kept
  p.pools.backward_slot(1, StagePools::Half::fused);
  p.pools.release(1);
  p.pools.claim(1);
  expect_internal([&] { p.pools.weight_slot(1); }, "BACKWARD_WEIGHT of mb 1 without its kept output gradients");
}

TEST(StagePools, OneSlotPerUnitOneForwardPerSlot) {
  Pools p;
  p.pools.claim(2);
  expect_internal([&] { p.pools.claim(2); }, "mb 2 claims a second activation slot");
  p.pools.forward_slot(2);
  p.pools.forwarded(2, 0, 0);
  expect_internal([&] { p.pools.forward_slot(2); }, "FORWARD of mb 2 a second time");
  expect_internal([&] { p.pools.act_in(2); }, "RECV_ACT of mb 2 into a slot already forwarded");
  expect_internal([&] { p.pools.forward_slot(4); }, "FORWARD of mb 4: the unit holds no activation slot");
  expect_internal([&] { p.pools.act_out(4); }, "SEND_ACT of mb 4: the unit holds no activation slot");
  p.pools.act_out(2).req->set_token(1);
  expect_internal([&] { p.pools.act_out(2); }, "SEND_ACT of mb 2 while its previous send is pending");
  p.pools.act_send_req(2).set_token(0);
}

TEST(StagePools, FreeSlotsAreReusedInReleaseOrder) {
  Pools p;
  const int n = p.pools.size();
  std::vector<float*> first_round;
  for (int m = 0; m < n; ++m) first_round.push_back(p.forward(m).input);
  for (int m = n - 1; m >= 0; --m) p.pools.backward_slot(m, StagePools::Half::fused), p.pools.release(m);
  for (int m = 0; m < n; ++m)  // released n-1 .. 0: claimed again in that order
    EXPECT_EQ(p.pools.claim(n + m).input, first_round[static_cast<size_t>(n - 1 - m)]) << "claim " << m;
}

TEST(StagePools, IncomingGradientBuffers) {
  Pools p;
  const int n = p.pools.size();
  const MessageBuffer g = p.pools.claim_grad_in(4);
  EXPECT_EQ(g.wire, nullptr);
  EXPECT_TRUE(p.pools.holds_grad_in(4));
  EXPECT_EQ(p.pools.grad_in(4).data, g.data);
  expect_internal([&] { p.pools.claim_grad_in(4); }, "mb 4 claims a second incoming gradient buffer");
  g.req->set_token(3);
  expect_internal([&] { p.pools.release_grad_in(4); }, "incoming gradient buffer of mb 4 released before its RECV_GRAD completed");
  g.req->set_token(0);
  p.pools.release_grad_in(4);
  EXPECT_FALSE(p.pools.holds_grad_in(4));
  expect_internal([&] { p.pools.grad_in(4); }, "mb 4 holds no incoming gradient buffer");
  expect_internal([&] { p.pools.release_grad_in(4); }, "mb 4 releases an incoming gradient buffer it does not hold");
  for (int m = 0; m < n; ++m) p.pools.claim_grad_in(10 + m);
  EXPECT_FALSE(p.pools.can_claim_grad_in());
  expect_internal([&] { p.pools.claim_grad_in(99); }, "no free incoming gradient buffer for mb 99");
}

TEST(StagePools, OutgoingGradientRing) {
  Pools p;
  const int n = p.pools.size();
  std::vector<float*> ring;
  for (int m = 0; m < n; ++m) {
    EXPECT_FALSE(p.pools.next_grad_out_req().pending());
    ring.push_back(p.pools.claim_grad_out(m));
    expect_internal([&] { p.pools.claim_grad_out(50); }, "the input gradient of mb " + std::to_string(m) + " was never sent");
    expect_internal([&] { p.pools.grad_out_to_send(m + 1); },
                    "SEND_GRAD of mb " + std::to_string(m + 1) + " but the last backward was of mb " + std::to_string(m));
    const MessageBuffer s = p.pools.grad_out_to_send(m);
    EXPECT_EQ(s.data, ring.back());
    s.req->set_token(20 + static_cast<uint64_t>(m));  // in flight
    EXPECT_EQ(p.pools.grad_out_of(m), ring.back());
  }
  expect_internal([&] { p.pools.grad_out_to_send(0); }, "SEND_GRAD without a backward (mb 0)");
  // the ring is back at its first buffer, whose send is still pending
  EXPECT_TRUE(p.pools.next_grad_out_req().pending());
  expect_internal([&] { p.pools.claim_grad_out(n); }, "outgoing gradient buffer 0 reused for mb " + std::to_string(n) + " while its send is pending");
  p.pools.each_request(StagePools::Requests::grad_sends, [](Request& q) { q.set_token(0); });
  EXPECT_EQ(p.pools.claim_grad_out(n), ring[0]);
  EXPECT_EQ(p.pools.grad_out_to_send(n).data, ring[0]);
  EXPECT_EQ(p.pools.grad_out_of(0), nullptr);  // buffer 0 holds mb n now
  p.pools.prepare(p.ir, 1, 1, kMb, 1);         // a new IR forgets the ring's units
  EXPECT_EQ(p.pools.grad_out_of(1), nullptr);
}

TEST(StagePools, RestoreAfterACut) {
  Pools p("1f1b");
  std::vector<float> contents(static_cast<size_t>(p.stage.slot_floats()));
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = 0.25f * static_cast<float>(i) - 3.0f;
  Stage::Slot& slot = p.pools.restore({6, 17, 2.5}, contents);
  EXPECT_EQ(p.pools.host_contents(6), contents);
  const std::vector<StagePools::Unit> units = p.pools.forwarded_units();
  ASSERT_EQ(units.size(), 1u);
  EXPECT_EQ(units[0].mb, 6);
  EXPECT_EQ(units[0].fwd_version, 17);
  EXPECT_EQ(units[0].loss, 2.5);
  EXPECT_EQ(p.pools.output_of(6), p.stage.output(slot));
  p.pools.act_out(6);  // a crossing send goes again from the restored slot
  expect_internal([&] { p.pools.restore({6, 0, 0}, contents); }, "mb 6 claims a second activation slot");
  expect_internal([&] { p.pools.restore({7, 0, 0}, std::vector<float>(3)); }, "restored slot of mb 7: 3 floats, the unit slot has");
  p.pools.claim(8);  // posted ahead only: not state
  EXPECT_EQ(p.pools.forwarded_units().size(), 1u);
  p.pools.backward_slot(6, StagePools::Half::fused);
  p.pools.release(6);
  for (int64_t mb = 20; p.pools.can_claim(); ++mb) p.pools.restore({mb, 0, 0}, contents);
  expect_internal([&] { p.pools.restore({30, 0, 0}, contents); }, "no free slot to restore mb 30");
}

TEST(StagePools, WireCopiesExactlyWhereTheBoundaryIsBf16) {
  Pools p("zb-h1", 1, true);
  ASSERT_TRUE(p.in.act_bf16 && p.out.act_bf16 && p.in.grad_bf16 && p.out.grad_bf16);
  p.pools.claim(0);
  const MessageBuffer in = p.pools.act_in(0);
  ASSERT_NE(in.wire, nullptr);
  EXPECT_EQ(in.words(), in.wire->data());
  EXPECT_EQ(static_cast<int64_t>(in.wire->size()), p.in.words(kMb, false));
  p.pools.forward_slot(0), p.pools.forwarded(0, 0, 0);
  EXPECT_NE(p.pools.act_out(0).wire, nullptr);
  EXPECT_NE(p.pools.claim_grad_in(0).wire, nullptr);
  p.pools.claim_grad_out(0);
  const MessageBuffer g = p.pools.grad_out_to_send(0);
  ASSERT_NE(g.wire, nullptr);
  EXPECT_EQ(static_cast<int64_t>(g.wire->size()), p.in.words(kMb, true));
  // stage 0 holds the model input: no activation arrives, no gradient leaves
  Pools s0("zb-h1", 0, true);
  s0.forward(0);
  EXPECT_NE(s0.pools.act_out(0).wire, nullptr);
  expect_internal([&] { s0.pools.claim_grad_out(0); }, "the first stage sends no gradients");
}

TEST(StagePools, AnIrStartsWithNothingHeld) {
  Pools p;
  p.forward(3);
  expect_internal([&] { p.pools.prepare(p.ir, 1, 1, kMb, 1); }, "an IR starts while mb 3 still holds an activation slot of stage 1");
  p.pools.backward_slot(3, StagePools::Half::fused);
  p.pools.release(3);
  p.pools.claim_grad_in(4);
  expect_internal([&] { p.pools.prepare(p.ir, 1, 1, kMb, 1); }, "an IR starts while mb 4 still holds an incoming gradient buffer");
  p.pools.release_grad_in(4);
  p.pools.claim_grad_out(5);
  p.pools.grad_out_to_send(5).req->set_token(1);
  expect_internal([&] { p.pools.prepare(p.ir, 1, 1, kMb, 1); }, "an IR starts while a gradient send is pending");
  p.pools.each_request(StagePools::Requests::grad_sends, [](Request& q) { q.set_token(0); });
  p.pools.prepare(p.ir, 1, 1, kMb, 1);
}

// ---- full recomputation: the two kinds of buffers -------------------------------------

std::vector<float> host(Backend& be, const float* p, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  be.to_host(v.data(), p, v.size());
  return v;
}

TEST(StagePools, FullRecomputationUnitsKeepTheirInputAndOutputOnly) {
  Pools p("1f1b", 1, false, 4, Recompute::full);
  const int64_t in = p.in.floats(kMb), out = p.out.floats(kMb);
  EXPECT_EQ(p.stage.unit_floats(), in + out);
  EXPECT_EQ(Stage::slot_geometry(p.model, 2, 4, true, Recompute::full).unit, in / kMb + out / kMb);
  EXPECT_EQ(p.pools.recompute_buffers(), 1);  // a fused backward: one, for the FORWARD or B that runs
  EXPECT_EQ(p.pools.recompute_bytes(), p.stage.slot_floats() * 4);
  EXPECT_EQ(p.pools.activation_bytes(), p.pools.size() * (in + out) * 4 + p.stage.slot_floats() * 4);
  Stage::Slot& unit = p.pools.claim(3);
  EXPECT_EQ(p.pools.forward_slot(3).input, unit.input);  // the unit's inputs arrive in its own slot
  std::vector<float> x(static_cast<size_t>(in)), y(static_cast<size_t>(out));
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.5f * static_cast<float>(i) + 1;
  for (size_t i = 0; i < y.size(); ++i) y[i] = -2.0f * static_cast<float>(i);
  p.be->from_host(unit.input, x.data(), x.size());
  Stage::Slot& rec = p.pools.compute_slot(3);  // FORWARD computes in a recompute buffer
  EXPECT_NE(rec.input, unit.input);
  EXPECT_EQ(host(*p.be, rec.input, in), x) << "the recompute buffer holds a copy of the unit's input";
  expect_internal([&] { p.pools.compute_slot(3); }, "FORWARD of mb 3: the unit already holds a recompute buffer");
  p.be->from_host(p.stage.output(rec), y.data(), y.size());
  p.pools.forwarded(3, 0, 0);  // the output back into the unit's slot, the buffer free
  EXPECT_EQ(host(*p.be, p.pools.act_out(3).data, out), y);
  EXPECT_EQ(p.pools.act_out(3).data, p.stage.output(unit));
  p.forward(4);  // the next FORWARD takes the same buffer
  std::vector<float> captured = p.pools.host_contents(3);  // a cut captures input and output only
  ASSERT_EQ(static_cast<int64_t>(captured.size()), in + out);
  EXPECT_TRUE(std::equal(x.begin(), x.end(), captured.begin()));
  Stage::Slot& again = p.pools.backward_slot(3, StagePools::Half::fused);  // B: bound again, input copied
  EXPECT_EQ(again.input, rec.input);
  EXPECT_EQ(host(*p.be, again.input, in), x);
  EXPECT_TRUE(p.pools.must_recompute(3)) << "mb 4's FORWARD overwrote the layout since mb 3's";
  expect_internal([&] { p.pools.host_contents(3); }, "capture of mb 3 while it holds a recompute buffer");
  expect_internal([&] { p.pools.backward_slot(4, StagePools::Half::fused); }, "BACKWARD of mb 4: no free recompute buffer (1, all bound)");
  p.pools.release(3);  // frees the unit slot and its buffer
  EXPECT_EQ(&p.pools.backward_slot(4, StagePools::Half::fused), &again);
  EXPECT_TRUE(p.pools.must_recompute(4));
  p.pools.release(4);
  EXPECT_TRUE(p.pools.forwarded_units().empty());
  p.forward(5);  // a B right after its own FORWARD takes the FORWARD's layout back: nothing to recompute
  p.pools.backward_slot(5, StagePools::Half::fused);
  EXPECT_FALSE(p.pools.must_recompute(5));
  p.pools.release(5);
}

// The pools' reuse of a FORWARD's layout is backward_reuses_forward's rule: driven through the
// IR of each stage, must_recompute() is false exactly where the rule says so.
TEST(StagePools, FullRecomputationReusesAsTheIrRuleSays) {
  for (const char* sched : {"1f1b", "zb-h1", "gpipe"})
    for (int s = 0; s < 3; ++s) {
      Pools p(sched, s, false, 4, Recompute::full);
      const std::vector<bool> reuse = backward_reuses_forward(p.ir, s);
      int reused = 0;
      for (size_t i = 0; i < p.ir.workers[static_cast<size_t>(s)].size(); ++i) {
        const Action& a = p.ir.workers[static_cast<size_t>(s)][i];
        if (a.op == Op::forward) p.forward(a.mb);
        if (a.op == Op::backward || a.op == Op::backward_input) {
          p.pools.backward_slot(a.mb, a.op == Op::backward ? StagePools::Half::fused : StagePools::Half::input);
          EXPECT_EQ(p.pools.must_recompute(a.mb), !reuse[i]) << sched << " stage " << s << " " << action_text(a);
          reused += reuse[i];
        }
        if (a.op == Op::backward_weight) p.pools.weight_slot(a.mb);
        if (a.op == Op::backward || a.op == Op::backward_weight) p.pools.release(a.mb);
      }
      if (s == 2 && std::string(sched) != "gpipe") {
        EXPECT_GT(reused, 0) << sched << ": the last stage backwards right after forwarding";
      }
    }
}

TEST(StagePools, FullRecomputationKeepsTheBufferFromIUntilW) {
  Pools p("zb-h1", 1, false, 4, Recompute::full);
  const int most = max_between_i_and_w(p.ir, 1, 1);  // units between their I and W in the IR
  ASSERT_GT(most, 0);
  EXPECT_EQ(p.pools.recompute_buffers(), 1 + most);
  p.forward(1);
  p.forward(2);
  Stage::Slot& r1 = p.pools.backward_slot(1, StagePools::Half::input);  // I: bound until W
  expect_internal([&] { p.pools.release(1); }, "activation slot of mb 1 released while its BACKWARD_WEIGHT still needs it");
  Stage::Slot& r2 = p.pools.backward_slot(2, StagePools::Half::input);
  EXPECT_NE(r1.input, r2.input);
  EXPECT_EQ(&p.pools.weight_slot(1), &r1);  // W reads what I kept
  p.pools.release(1);
  EXPECT_EQ(&p.pools.weight_slot(2), &r2);
  p.pools.release(2);
  p.pools.prepare(p.ir, 1, 1, kMb, 1);
}

TEST(StagePools, RestoreConvertsWholeSlotsForFullRecomputation) {
  Pools whole("1f1b"), full("1f1b", 1, false, 4, Recompute::full);
  std::vector<float> contents(static_cast<size_t>(whole.stage.unit_floats()));
  for (size_t i = 0; i < contents.size(); ++i) contents[i] = static_cast<float>(i);
  Stage::Slot& w = whole.pools.restore({6, 1, 0}, contents);
  const std::vector<float> light = full.stage.unit_from(contents, Recompute::none);
  ASSERT_EQ(static_cast<int64_t>(light.size()), full.stage.unit_floats());
  Stage::Slot& f = full.pools.restore({6, 1, 0}, light);
  const int64_t in = full.in.floats(kMb), out = full.out.floats(kMb);
  EXPECT_EQ(host(*full.be, f.input, in), host(*whole.be, w.input, in));
  EXPECT_EQ(host(*full.be, full.stage.output(f), out), host(*whole.be, whole.stage.output(w), out));
  EXPECT_TRUE(full.stage.can_restore_units(Recompute::none));
  EXPECT_TRUE(full.stage.can_restore_units(Recompute::selective));  // no selective layer here: none's layout
  EXPECT_TRUE(whole.stage.can_restore_units(Recompute::selective));
  EXPECT_FALSE(whole.stage.can_restore_units(Recompute::full));  // the layout needs the forward again
  EXPECT_TRUE(whole.stage.unit_from(light, Recompute::full).empty());
}

}  // namespace
}  // namespace pt
