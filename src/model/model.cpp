// Model construction with shape inference, and the layer table.
#include "pipetrain/model.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"

namespace pt {

namespace {

[[noreturn]] void tie_error(const LayerSpec& s, const std::string& msg) {
  fail(Exit::bad_input, s.where + ": layer " + std::to_string(s.index) + " '" + s.name + "' (" + s.type + "): key 'model.layers[" +
                            std::to_string(s.index) + "].tie': " + msg, true);
}

// `tie = "<name>"` (LayerSettings::tie_name): the index of the one earlier embedding layer of
// that name.
int resolve_tie(const LayerSpec& s, const std::vector<LayerSpec>& all) {
  const std::string tie = s.tie_name();
  int found = -1;
  for (const LayerSpec& o : all)
    if (o.name == tie) {
      if (found >= 0) tie_error(s, "names '" + tie + "', which more than one layer is called");
      found = o.index;
    }
  if (found < 0) tie_error(s, "names '" + tie + "', which is not a layer of the model");
  const LayerSpec& t = all[static_cast<size_t>(found)];
  if (t.type != "embedding")
    tie_error(s, "names layer " + std::to_string(found) + " '" + t.name + "', a " + t.type + ", not an embedding");
  if (found >= s.index) tie_error(s, "names layer " + std::to_string(found) + " '" + t.name + "', which does not come before it");
  return found;
}

// The tied tensor's shape must be the embedding's token weight [V, D].
void check_tie_shapes(const LayerSpec& s, const Layer& head, const Layer& emb) {
  const auto hp = head.params(), ep = emb.params();
  for (size_t t = 0; t < hp.size(); ++t) {
    if (head.tied_to(static_cast<int>(t)).empty()) continue;
    if (ep.empty() || ep[0].shape != hp[t].shape) {
      auto str = [](const std::vector<int64_t>& v) {
        std::string o;
        for (auto x : v) o += (o.empty() ? "" : ", ") + std::to_string(x);
        return "[" + o + "]";
      };
      tie_error(s, "its " + hp[t].name + " " + str(hp[t].shape) + " does not match the token weight " +
                       (ep.empty() ? std::string("(none)") : str(ep[0].shape)) + " of layer " + std::to_string(emb.index()) +
                       " '" + emb.name() + "'");
    }
  }
}

}  // namespace

Model::Model(const Deck& deck, Shape input, int64_t classes, TensorShard shard)
    : input_(input), classes_(classes), shard_(shard) {
  PT_CHECK(shard.parts >= 1 && 0 <= shard.rank && shard.rank < shard.parts,
           "tensor part " << shard.rank << " of " << shard.parts);
  Shape cur = input;
  std::string prev = "the data";
  for (LayerSpec spec : deck.model.layers) {
    spec.classes = classes;
    const LayerType* type = find_layer_type(spec.type);
    if (type && type->splits_tensor) spec.tensor_parts = shard.parts, spec.tensor_rank = shard.rank;
    if (!spec.tie_name().empty()) spec.tie_layer = resolve_tie(spec, deck.model.layers);
    layers_.push_back(make_layer(spec, cur, prev));
    const Layer& l = *layers_.back();
    if (spec.tie_layer >= 0) check_tie_shapes(spec, l, layer(spec.tie_layer));
    if (l.is_loss() && l.loss_classes() != classes)
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

double Model::model_flops_per_sample() const {
  const double tokens = static_cast<double>(layer(size() - 1).labels_per_sample());
  double n = 0, attention = 0;
  for (int i = 0; i < size(); ++i) {
    const std::vector<ParamTensor> ps = layer(i).params();
    for (size_t k = 0; k < ps.size(); ++k)
      if (layer(i).tied_to(static_cast<int>(k)).empty()) n += static_cast<double>(ps[k].size);
    attention += layer(i).attention_model_flops();
  }
  return 6.0 * n * tokens + attention;
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
