// weights.h5: the trained model by layer, in PyTorch tensor shapes (docs/ARCHITECTURE.md).
#include <cstdio>

#include "../util/h5.hpp"
#include "pipetrain/deck.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

static std::string layer_group(int i) {
  char b[32];
  std::snprintf(b, sizeof b, "/layers/%03d", i);
  return b;
}

static std::vector<int64_t> dims_of(const Shape& s) {
  std::vector<int64_t> d;
  for (int i = 0; i < s.rank; ++i) d.push_back(s.d[i]);
  return d;
}

// A layer's deck keys as attributes: numbers first (floats as doubles, integers and booleans
// (0/1) as integers), then the strings that are set (lm_head's tie).
static void write_layer_settings(hid_t g, const std::vector<std::pair<std::string, KeyValue>>& settings, const std::string& tmp) {
  for (const auto& [key, v] : settings) {
    if (auto f = std::get_if<double>(&v)) h5::attr_double(g, key, *f, tmp);
    else if (auto i = std::get_if<int64_t>(&v)) h5::attr_int(g, key, *i, tmp);
    else if (auto b = std::get_if<bool>(&v)) h5::attr_int(g, key, *b ? 1 : 0, tmp);
  }
  for (const auto& [key, v] : settings)
    if (auto s = std::get_if<std::string>(&v); s && !s->empty()) h5::attr_string(g, key, *s, tmp);
}

// A layer's parameters (a tied tensor is a soft link to the holder's dataset: stored once)
// and its running state (batch norm: running mean then running variance per channel).
static void write_layer_tensors(hid_t g, const Model& model, int i, const std::vector<float>& params, const std::vector<float>* state,
                                const std::string& tmp) {
  const Layer& l = model.layer(i);
  const std::vector<ParamTensor> ps = l.params();
  for (size_t t = 0; t < ps.size(); ++t) {
    const ParamTensor& p = ps[t];
    if (!l.tied_to(static_cast<int>(t)).empty() && l.spec().tie_layer >= 0) {
      const std::string target = layer_group(l.spec().tie_layer) + "/" + model.layer(l.spec().tie_layer).params().front().name;
      if (H5Lcreate_soft(target.c_str(), g, p.name.c_str(), H5P_DEFAULT, H5P_DEFAULT) < 0)
        fail(Exit::io, tmp + ": cannot link " + p.name + " to " + target);
      continue;
    }
    std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
    h5::write_floats(g, p.name, params.data() + p.offset, dims, true, tmp);
  }
  if (state && !state->empty()) h5::write_floats(g, "state", state->data(), {state->size()}, true, tmp);
}

void write_weights_h5(const std::string& path, const Model& model, const std::vector<std::vector<float>>& per_layer,
                      const Deck& deck, const InputTransform& input, const std::vector<std::vector<float>>& per_layer_state) {
  const std::string tmp = path + ".tmp";
  {
    h5::Handle f = h5::create_file(tmp);
    // what a user needs to rebuild and feed the model elsewhere
    h5::attr_string(f.id(), "format", "pipetrain-weights", tmp);
    h5::attr_int(f.id(), "format_version", 2, tmp);
    h5::attr_ints(f.id(), "input_shape", dims_of(model.layer(0).in_shape()), tmp);
    h5::attr_int(f.id(), "classes", model.classes(), tmp);  // the data's classes: a token model's vocabulary
    h5::attr_int(f.id(), "layers", model.size(), tmp);
    h5::attr_string(f.id(), "data_source", enum_name(deck.data.source), tmp);
    h5::attr_string(f.id(), "input_transform",
                    input.identity ? "identity: x = raw (float samples used as stored)"
                                   : "x = (raw * input_scale - input_mean) * input_inv_std in float32, raw = uint8 pixel; "
                                     "i.e. (pixel / 255 - input_mean) / input_std with the training split's statistics",
                    tmp);
    // float32 values, stored exactly as doubles
    h5::attr_double(f.id(), "input_scale", input.scale, tmp);
    h5::attr_double(f.id(), "input_mean", input.mean, tmp);
    h5::attr_double(f.id(), "input_inv_std", input.inv_std, tmp);
    h5::attr_double(f.id(), "input_std", 1.0 / static_cast<double>(input.inv_std), tmp);
    h5::attr_string(f.id(), "model_text", deck.model_text(), tmp);
    for (int i = 0; i < model.size(); ++i) {
      const Layer& l = model.layer(i);
      h5::Handle g = h5::create_group(f.id(), layer_group(i), tmp);
      h5::attr_string(g.id(), "name", l.name(), tmp);
      h5::attr_string(g.id(), "type", l.type(), tmp);
      h5::attr_int(g.id(), "index", i, tmp);
      h5::attr_ints(g.id(), "in_shape", dims_of(l.in_shape()), tmp);
      h5::attr_ints(g.id(), "out_shape", dims_of(l.out_shape()), tmp);
      write_layer_settings(g.id(), layer_settings(l.spec()), tmp);
      write_layer_tensors(g.id(), model, i, per_layer[static_cast<size_t>(i)],
                          per_layer_state.empty() ? nullptr : &per_layer_state[static_cast<size_t>(i)], tmp);
    }
    if (!f.close()) fail(Exit::io, tmp + ": closing failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(Exit::io, path + ": rename failed");
}

std::vector<std::vector<float>> read_state_h5(const std::string& path, const Model& model) {
  h5::Handle f = h5::open_file(path);
  std::vector<std::vector<float>> out(static_cast<size_t>(model.size()));
  for (int i = 0; i < model.size(); ++i) {
    const int64_t n = model.layer(i).num_state();
    if (n > 0 && h5::exists(f.id(), layer_group(i) + "/state"))
      out[static_cast<size_t>(i)] = h5::read_floats(f.id(), layer_group(i) + "/state", {static_cast<hsize_t>(n)}, path);
  }
  return out;
}

std::vector<std::vector<float>> read_weights_h5(const std::string& path, const Model& model) {
  h5::Handle f = h5::open_file(path);
  std::vector<std::vector<float>> out(static_cast<size_t>(model.size()));
  for (int i = 0; i < model.size(); ++i) {
    const Layer& l = model.layer(i);
    out[static_cast<size_t>(i)].resize(static_cast<size_t>(l.num_params()));
    for (const ParamTensor& p : l.params()) {
      std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
      auto v = h5::read_floats(f.id(), layer_group(i) + "/" + p.name, dims, path);
      std::copy(v.begin(), v.end(), out[static_cast<size_t>(i)].begin() + p.offset);
    }
  }
  return out;
}

}  // namespace pt
