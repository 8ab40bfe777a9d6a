// Profile JSON (docs/PROFILE.md): write, read with checks, and format detection.
#include <nlohmann/json.hpp>

#include <fstream>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/profile.hpp"

namespace pt {

Profile parse_graph_txt(const std::string& text, const std::string& path);  // graph_txt.cpp

std::string Profile::to_json() const {
  nlohmann::json layers_j = nlohmann::json::array();
  for (const LayerProfile& l : layers)
    layers_j.push_back({{"index", l.index}, {"name", l.name}, {"type", l.type}, {"forward_s", l.forward_s},
                        {"backward_s", l.backward_s}, {"backward_weight_s", l.backward_weight_s}, {"output_bytes", l.output_bytes}, {"stash_bytes", l.stash_bytes},
                        {"param_bytes", l.param_bytes}, {"optimizer_bytes", l.optimizer_bytes},
                        {"product_s", l.product_s}, {"convert_s", l.convert_s},
                        {"selective_backward_s", l.selective_backward()}, {"selective_stash_bytes", l.selective_stash()},
                        {"tensor_sums", l.tensor_sums}, {"tensor_sum_bytes", l.tensor_sum_bytes}});
  nlohmann::json net = {{"measured", network.measured}, {"bandwidth", network.bandwidth}, {"latency", network.latency},
                        {"allreduce_ranks", network.allreduce_ranks}};
  nlohmann::json p2p = nlohmann::json::array(), ar = nlohmann::json::array();
  for (auto& p : network.p2p) p2p.push_back({{"bytes", p.bytes}, {"seconds", p.seconds}});
  for (auto& p : network.allreduce) ar.push_back({{"bytes", p.bytes}, {"seconds", p.seconds}});
  net["p2p"] = p2p;
  net["allreduce"] = ar;
  nlohmann::json j = {{"format", "pipetrain-profile-1"}, {"source", source}, {"device", device},
                      {"precision", precision_name(precision)}, {"microbatch", microbatch}, {"input_bytes", input_bytes},
                      {"optimizer_s_per_byte", optimizer_s_per_byte}, {"tensor", tensor}, {"layers", layers_j},
                      {"network", net}};
  return j.dump(2) + "\n";
}

Profile Profile::from_json(const std::string& text, const std::string& path) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    fail(Exit::bad_input, path + ": not valid JSON: " + e.what(), true);
  }
  Profile p;
  try {
    if (j.value("format", "") != "pipetrain-profile-1")
      fail(Exit::bad_input, path + ": not a pipetrain profile (format '" + j.value("format", "") + "', expected 'pipetrain-profile-1')", true);
    p.source = j.value("source", path);
    p.device = j.value("device", "");
    p.precision = precision_from_name(j.value("precision", "fp32"));
    p.microbatch = j.at("microbatch").get<int64_t>();
    p.input_bytes = j.value("input_bytes", 0.0);
    p.optimizer_s_per_byte = j.value("optimizer_s_per_byte", 0.0);
    p.tensor = j.value("tensor", 1);  // absent before tensor parallelism: one part
    for (auto& l : j.at("layers")) {
      LayerProfile lp;
      lp.index = l.at("index").get<int>();
      lp.name = l.value("name", "");
      lp.type = l.value("type", "");
      lp.forward_s = l.at("forward_s").get<double>();
      lp.backward_s = l.at("backward_s").get<double>();
      lp.backward_weight_s = l.value("backward_weight_s", 0.0);  // absent in profiles made before the split backward
      lp.output_bytes = l.at("output_bytes").get<double>();
      lp.stash_bytes = l.value("stash_bytes", lp.output_bytes);
      lp.param_bytes = l.at("param_bytes").get<double>();
      lp.optimizer_bytes = l.value("optimizer_bytes", 0.0);
      lp.product_s = l.value("product_s", 0.0);  // absent before the kernel clock: 0, not measured
      lp.convert_s = l.value("convert_s", 0.0);
      lp.selective_backward_s = l.value("selective_backward_s", -1.0);  // absent before recomputation: as none
      lp.selective_stash_bytes = l.value("selective_stash_bytes", -1.0);
      lp.tensor_sums = l.value("tensor_sums", 0);
      lp.tensor_sum_bytes = l.value("tensor_sum_bytes", 0.0);
      if (lp.forward_s < 0 || lp.backward_s < 0 || lp.output_bytes < 0 || lp.param_bytes < 0)
        fail(Exit::bad_input, path + ": layer " + std::to_string(lp.index) + " has a negative cost", true);
      p.layers.push_back(lp);
    }
    if (j.contains("network")) {
      auto& n = j["network"];
      p.network.measured = n.value("measured", false);
      p.network.bandwidth = n.value("bandwidth", 0.0);
      p.network.latency = n.value("latency", 0.0);
      p.network.allreduce_ranks = n.value("allreduce_ranks", 0);
      for (auto& q : n.value("p2p", nlohmann::json::array())) p.network.p2p.push_back({q.at("bytes"), q.at("seconds")});
      for (auto& q : n.value("allreduce", nlohmann::json::array())) p.network.allreduce.push_back({q.at("bytes"), q.at("seconds")});
    }
  } catch (const nlohmann::json::exception& e) {
    fail(Exit::bad_input, path + ": malformed profile: " + e.what(), true);
  }
  if (p.layers.empty()) fail(Exit::bad_input, path + ": profile has no layers", true);
  return p;
}

Profile Profile::load(const std::string& path) {
  std::ifstream in(path);
  if (!in) fail(Exit::bad_input, path + ": cannot open profile", true);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') return from_json(text, path);
  return parse_graph_txt(text, path);
}

}  // namespace pt
