// Model construction with shape inference, and the layer table.
#include "pipetrain/model.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "pipetrain/error.hpp"

namespace pt {

Model::Model(const Deck& deck, Shape input, int64_t classes) : input_(input), classes_(classes) {
  Shape cur = input;
  std::string prev = "the data";
  for (const LayerSpec& spec : deck.model.layers) {
    layers_.push_back(make_layer(spec, cur, prev));
    const Layer& l = *layers_.back();
    if (l.is_loss() && l.in_shape().numel() != classes)
      fail(Exit::bad_input,
           spec.where + ": layer " + std::to_string(spec.index) + " '" + spec.name + "': the loss needs [" +
               std::to_string(classes) + "] logits (the data has " + std::to_string(classes) + " classes), but " + prev +
               " outputs " + cur.str(),
           true);
    prev = "layer " + std::to_string(spec.index) + " '" + spec.name + "'";
    cur = l.out_shape();
  }
}

int64_t Model::num_params(int first, int last) const {
  int64_t n = 0;
  for (int i = first; i < last; ++i) n += layer(i).num_params();
  return n;
}

std::string Model::table() const {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "%5s  %-16s %-22s %-16s %12s %14s\n", "index", "name", "type", "output", "params",
                "FLOPs/sample");
  o << line;
  std::snprintf(line, sizeof line, "%5s  %-16s %-22s %-16s %12s %14s\n", "-", "input", "data",
                input_.str().c_str(), "", "");
  o << line;
  int64_t params = 0;
  double flops = 0;
  for (auto& l : layers_) {
    std::snprintf(line, sizeof line, "%5d  %-16s %-22s %-16s %12lld %14.0f\n", l->index(), l->name().c_str(),
                  l->type().c_str(), l->out_shape().str().c_str(), static_cast<long long>(l->num_params()),
                  l->flops_forward());
    o << line;
    params += l->num_params();
    flops += l->flops_forward();
  }
  std::snprintf(line, sizeof line, "total: %d layers, %lld parameters (%.2f MB), %.3g forward FLOPs per sample\n",
                size(), static_cast<long long>(params), params * 4.0 / 1e6, flops);
  o << line;
  return o.str();
}

std::string Model::table_json() const {
  nlohmann::json a = nlohmann::json::array();
  for (auto& l : layers_) {
    const Shape s = l->out_shape();
    std::vector<int64_t> shape(s.d, s.d + s.rank);
    a.push_back({{"index", l->index()},
                 {"name", l->name()},
                 {"type", l->type()},
                 {"output_shape", shape},
                 {"params", l->num_params()},
                 {"flops_per_sample", l->flops_forward()},
                 {"backward_flops_per_sample", l->flops_backward()}});
  }
  return a.dump(2);
}

}  // namespace pt
