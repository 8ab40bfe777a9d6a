// Chrome trace format (chrome://tracing, Perfetto): one process per run, one thread per rank.
#include <nlohmann/json.hpp>

#include "pipetrain/report.hpp"

namespace pt {

std::string chrome_trace_json(const std::vector<TraceEvent>& events, const Layout& layout, const std::string& title) {
  nlohmann::json ev = nlohmann::json::array();
  for (int r = 0; r < layout.ranks(); ++r) {
    std::string stages;
    for (int s : layout.stages_of_rank(r)) stages += (stages.empty() ? "" : ",") + std::to_string(s);
    ev.push_back({{"name", "thread_name"}, {"ph", "M"}, {"pid", 0}, {"tid", r},
                  {"args", {{"name", "rank " + std::to_string(r) + " (stage " + stages + ", replica " +
                                         std::to_string(layout.replica_of(r)) + ")"}}}});
  }
  const bool chunks = layout.chunks() > 1;
  ev.push_back({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"args", {{"name", title}}}});
  for (const TraceEvent& e : events) {
    std::string name;
    if (is_compute(e.op)) {  // F3, I3, W3, B3 (0F3 with several stages per rank)
      name = action_text({e.op, static_cast<int16_t>(e.stage), e.mb, -1, -1});
      if (!chunks) name = name.substr(std::to_string(e.stage).size());
    } else if (e.op == Op::optimizer_step) {
      name = "step";
    } else if (e.op == Op::allreduce) {
      name = "allreduce";
    } else if (e.op == Op::grad_norm) {
      name = "grad norm";
    } else {
      name = std::string(op_name(e.op)) + " " + std::to_string(e.mb);
    }
    nlohmann::json j = {{"name", name}, {"cat", op_name(e.op)}, {"ph", "X"}, {"pid", 0}, {"tid", e.rank},
                        {"ts", e.start * 1e6}, {"dur", std::max(0.0, e.end - e.start) * 1e6},
                        {"args", {{"microbatch", e.mb}, {"bytes", e.bytes}, {"stage", e.stage}}}};
    ev.push_back(j);
  }
  nlohmann::json doc = {{"traceEvents", ev}, {"displayTimeUnit", "ms"}};
  return doc.dump();
}

}  // namespace pt
