// PipeDream graph.txt profiles -> a layer-chain Profile. Nodes and edges are read as
// published; the graph is linearised by topological frontiers (plan.hpp, docs/PLANNER.md):
// layer k is the k-th node of a greedy topological order and its output_bytes is
// everything that crosses the cut after it.
#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <map>
#include <sstream>

#include "pipetrain/error.hpp"
#include "pipetrain/plan.hpp"
#include "pipetrain/profile.hpp"

namespace pt {
namespace {

std::string trim(const std::string& s) {
  size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

std::vector<std::string> split_arrow(const std::string& s) {
  std::vector<std::string> parts;
  size_t pos = 0;
  for (;;) {
    const size_t k = s.find(" -- ", pos);
    if (k == std::string::npos) break;
    parts.push_back(s.substr(pos, k - pos));
    pos = k + 4;
  }
  parts.push_back(s.substr(pos));
  return parts;
}

[[noreturn]] void bad(const std::string& path, int line, const std::string& msg) {
  fail(Exit::bad_input, path + ":" + std::to_string(line) + ": graph.txt: " + msg, true);
}

// value of `key=` in the metrics text; a list "[a; b]" is summed
double metric(const std::string& text, const std::string& key, const std::string& path, int line) {
  const size_t k = text.find(key + "=");
  if (k == std::string::npos) bad(path, line, "node has no " + key);
  size_t p = k + key.size() + 1;
  while (p < text.size() && text[p] == ' ') ++p;
  double sum = 0;
  auto number = [&](size_t& q) {
    const char* s = text.c_str() + q;
    char* end = nullptr;
    const double v = std::strtod(s, &end);
    if (end == s) bad(path, line, "bad number for " + key + " near '" + text.substr(q, 20) + "'");
    q += static_cast<size_t>(end - s);
    return v;
  };
  if (p < text.size() && text[p] == '[') {
    ++p;
    for (;;) {
      while (p < text.size() && (text[p] == ' ' || text[p] == ';')) ++p;
      if (p >= text.size()) bad(path, line, "unterminated list for " + key);
      if (text[p] == ']') break;
      sum += number(p);
    }
  } else {
    sum = number(p);
  }
  if (sum < 0) bad(path, line, key + " is negative");
  return sum;
}

// numeric part of "node12" for ordering ties; large when there is none
long id_number(const std::string& id) {
  size_t k = id.size();
  while (k > 0 && std::isdigit(static_cast<unsigned char>(id[k - 1]))) --k;
  return k < id.size() ? std::strtol(id.c_str() + k, nullptr, 10) : 1L << 30;
}

}  // namespace

GraphTxt read_graph_txt(const std::string& text, const std::string& path) {
  GraphTxt g;
  std::map<std::string, int> index;
  std::vector<std::pair<std::pair<std::string, std::string>, int>> raw_edges;
  std::istringstream in(text);
  std::string line;
  int ln = 0;
  while (std::getline(in, line)) {
    ++ln;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (trim(line).empty()) continue;
    const bool edge = line[0] == '\t' || line[0] == ' ';
    const std::vector<std::string> parts = split_arrow(trim(line));
    if (edge) {
      if (parts.size() != 2) bad(path, ln, "edge lines read '\\tnodeA -- nodeB'");
      raw_edges.push_back({{trim(parts[0]), trim(parts[1])}, ln});
      continue;
    }
    if (parts.size() < 3) bad(path, ln, "node lines read 'nodeN -- Description -- forward_compute_time=..., ...'");
    GraphTxt::Node n;
    n.id = trim(parts[0]);
    for (size_t i = 1; i + 1 < parts.size(); ++i) n.desc += (i > 1 ? " -- " : "") + parts[i];
    n.desc = trim(n.desc);
    const std::string& m = parts.back();
    n.forward_ms = metric(m, "forward_compute_time", path, ln);
    n.backward_ms = metric(m, "backward_compute_time", path, ln);
    n.activation_bytes = metric(m, "activation_size", path, ln);
    n.parameter_bytes = metric(m, "parameter_size", path, ln);
    n.input = n.desc.rfind("Input", 0) == 0;
    if (index.count(n.id)) bad(path, ln, "node '" + n.id + "' defined twice");
    index[n.id] = static_cast<int>(g.nodes.size());
    g.nodes.push_back(n);
  }
  for (auto& [e, l] : raw_edges) {
    auto a = index.find(e.first), b = index.find(e.second);
    if (a == index.end()) bad(path, l, "edge from unknown node '" + e.first + "'");
    if (b == index.end()) bad(path, l, "edge to unknown node '" + e.second + "'");
    g.edges.push_back({a->second, b->second});
  }
  if (g.nodes.empty()) fail(Exit::bad_input, path + ": graph.txt has no nodes", true);
  return g;
}

Linearised linearise_graph(const GraphTxt& g, const std::string& path) {
  const int V = static_cast<int>(g.nodes.size());
  std::vector<std::vector<int>> succ(static_cast<size_t>(V)), pred(static_cast<size_t>(V));
  for (auto [a, b] : g.edges) {
    if (g.nodes[static_cast<size_t>(a)].input || g.nodes[static_cast<size_t>(b)].input) continue;
    if (std::find(succ[static_cast<size_t>(a)].begin(), succ[static_cast<size_t>(a)].end(), b) != succ[static_cast<size_t>(a)].end()) continue;
    succ[static_cast<size_t>(a)].push_back(b);
    pred[static_cast<size_t>(b)].push_back(a);
  }
  Linearised out;
  Profile& p = out.profile;
  std::vector<int> indeg(static_cast<size_t>(V), 0), left(static_cast<size_t>(V), 0);
  int real = 0;
  for (int v = 0; v < V; ++v) {
    const auto& n = g.nodes[static_cast<size_t>(v)];
    if (n.input) {
      ++out.inputs;
      p.input_bytes += n.activation_bytes;
      continue;
    }
    ++real;
    indeg[static_cast<size_t>(v)] = static_cast<int>(pred[static_cast<size_t>(v)].size());
    left[static_cast<size_t>(v)] = static_cast<int>(succ[static_cast<size_t>(v)].size());
  }
  if (real == 0) fail(Exit::bad_input, path + ": graph.txt has only Input nodes", true);
  std::vector<char> done(static_cast<size_t>(V), 0);
  auto act = [&](int v) { return g.nodes[static_cast<size_t>(v)].activation_bytes; };
  double frontier = 0;
  for (int k = 0; k < real; ++k) {
    int pick = -1;
    double pick_delta = 0;
    for (int v = 0; v < V; ++v) {
      if (g.nodes[static_cast<size_t>(v)].input || done[static_cast<size_t>(v)] || indeg[static_cast<size_t>(v)] > 0) continue;
      double delta = succ[static_cast<size_t>(v)].empty() ? 0.0 : act(v);
      for (int u : pred[static_cast<size_t>(v)])
        if (left[static_cast<size_t>(u)] == 1) delta -= act(u);  // v is u's last consumer
      const bool take = pick < 0 || delta < pick_delta ||
                        (delta == pick_delta && id_number(g.nodes[static_cast<size_t>(v)].id) < id_number(g.nodes[static_cast<size_t>(pick)].id));
      if (take) pick = v, pick_delta = delta;
    }
    if (pick < 0) fail(Exit::bad_input, path + ": graph.txt has a cycle (no node is ready after " + std::to_string(k) + " of " + std::to_string(real) + ")", true);
    done[static_cast<size_t>(pick)] = 1;
    for (int u : pred[static_cast<size_t>(pick)])
      if (--left[static_cast<size_t>(u)] == 0) frontier -= act(u);
    if (!succ[static_cast<size_t>(pick)].empty()) frontier += act(pick);
    for (int w : succ[static_cast<size_t>(pick)]) --indeg[static_cast<size_t>(w)];
    out.order.push_back(pick);
    const auto& n = g.nodes[static_cast<size_t>(pick)];
    LayerProfile l;
    l.index = k;
    l.name = n.id;
    l.type = trim(n.desc.substr(0, n.desc.find('(')));
    l.forward_s = n.forward_ms * 1e-3;
    l.backward_s = n.backward_ms * 1e-3;
    l.output_bytes = std::max(0.0, frontier);
    if (k + 1 == real || l.output_bytes <= 0) l.output_bytes = std::max(l.output_bytes, n.activation_bytes);
    l.stash_bytes = n.activation_bytes;
    l.param_bytes = n.parameter_bytes;
    l.optimizer_bytes = 0;  // unknown in graph.txt
    p.layers.push_back(l);
  }
  out.chain = true;
  for (size_t k = 0; k + 1 < out.order.size(); ++k) {
    const auto& s = succ[static_cast<size_t>(out.order[k])];
    if (std::find(s.begin(), s.end(), out.order[k + 1]) == s.end()) out.chain = false;
  }
  p.microbatch = 1;  // times are per profiled minibatch, whose size graph.txt does not record
  p.device = "as published (PipeDream profile)";
  p.source = "graph.txt " + path + ": " + std::to_string(V) + " nodes, " + std::to_string(out.inputs) +
             " Input dropped, " + (out.chain ? "a chain" : "linearised by topological frontiers");
  return out;
}

Profile parse_graph_txt(const std::string& text, const std::string& path) {
  return linearise_graph(read_graph_txt(text, path), path).profile;
}

}  // namespace pt
