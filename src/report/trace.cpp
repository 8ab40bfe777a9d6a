// Chrome trace format (chrome://tracing, Perfetto): one process per run, one thread per rank.
#include <nlohmann/json.hpp>

#include "pipetrain/report.hpp"

namespace pt {

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const Layout& layout, const std::string& title) {
  nlohmann::json ev = nlohmann::json::array();
  for (int r = 0; r < layout.ranks(); ++r)
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                  {"args", {{"name", "rank " + std::to_string(r) + " (stage " + std::to_string(layout.stage_of(r)) +
                                         ", replica " + std::to_string(layout.replica_of(r)) + ")"}}}});
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", title}}}});
  for (const TraceEvent& e : events) {
    std::string name;
    switch (e.op) {
      case Op::forward: name = "F" + std::to_string(e.mb); break;
      case Op::backward: name = "B" + std::to_string(e.mb); break;
      case Op::optimizer_step: name = "step"; break;
      case Op::allreduce: name = "allreduce"; break;
      default: name = std::string(op_name(e.op)) + " " + std::to_string(e.mb);
    }
    nlohmann::json j = {{"name", name}, {"cat", op_name(e.op)}, {"ph", "X"}, {"pid", 0}, {"tid", e.rank},
                        {"ts", e.start * 1e6}, {"dur", std::max(0.0, e.end - e.start) * 1e6},
                        {"args", {{"microbatch", e.mb}, {"bytes", e.bytes}}}};
    ev.push_back(j);
  }
  nlohmann::json doc = {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

}  // namespace pt
