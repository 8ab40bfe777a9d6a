// Consistent cuts of a schedule: where every worker stops so that a checkpoint captures a
// state from which the exact schedule continues (a Chandy-Lamport snapshot of the IR).
// Worker w stops right after its last optimizer step that produces version N (one per stage
// it holds). A message sent
// before the sender's cut and received after the receiver's cut is "crossing": its payload
// is still in the sender's buffers, the sender saves it and sends it again on resume. A
// message received before the receiver's cut but sent after the sender's (an orphan) would
// make the cut inconsistent; the IR generators never produce one (tested for every kind).
#include <map>
#include <tuple>

#include "passes.hpp"
#include "pipetrain/error.hpp"

namespace pt {

Cut consistent_cut(const Schedule& S, int64_t version) {
  const int R = static_cast<int>(S.workers.size());
  Cut c;
  c.position.assign(static_cast<size_t>(R), 0);
  c.crossing.resize(static_cast<size_t>(R));
  for (int w = 0; w < R && version > 0; ++w) {
    const auto& acts = S.workers[static_cast<size_t>(w)];
    bool found = false;
    for (size_t i = 0; i < acts.size(); ++i)
      if (acts[i].op == Op::optimizer_step && acts[i].version == version) {
        c.position[static_cast<size_t>(w)] = i + 1;
        found = true;
      }
    PT_CHECK(found, "rank " << w << " has no optimizer step producing version " << version
                            << " (a checkpoint boundary must be a multiple of every stage's update stride)");
  }
  // message endpoints: key -> index on the sender / receiver
  std::map<MessageKey, size_t> send_at, recv_at;
  for (int w = 0; w < R; ++w) {
    const auto& acts = S.workers[static_cast<size_t>(w)];
    for (size_t i = 0; i < acts.size(); ++i) {
      const Action& a = acts[i];
      if (a.op == Op::send_act || a.op == Op::send_grad) send_at[message_key(w, a)] = i;
      if (a.op == Op::recv_act || a.op == Op::recv_grad) recv_at[message_key(w, a)] = i;
    }
  }
  for (auto& [key, si] : send_at) {
    const int src = std::get<0>(key), dst = std::get<1>(key);
    auto ri = recv_at.find(key);
    PT_CHECK(ri != recv_at.end(), "unmatched send in a validated schedule");
    const bool sent_before = si < c.position[static_cast<size_t>(src)];
    const bool received_before = ri->second < c.position[static_cast<size_t>(dst)];
    PT_CHECK(sent_before || !received_before, "inconsistent cut at version " << version << ": rank " << dst << " receives "
                                                                              << (std::get<2>(key) ? "gradient" : "activation")
                                                                              << " mb " << std::get<4>(key) << " sent after rank "
                                                                              << src << "'s cut");
    if (sent_before && !received_before) c.crossing[static_cast<size_t>(src)].push_back(si);
  }
  return c;
}

}  // namespace pt
