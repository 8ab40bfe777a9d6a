// weights.h5: the trained model by layer, in PyTorch tensor shapes (docs/ARCHITECTURE.md).
#include <cstdio>

#include "../util/h5.hpp"
#include "pipetrain/error.hpp"
#include "pipetrain/report.hpp"

namespace pt {

static std::string layer_group(int i) {
  char b[32];
  std::snprintf(b, sizeof b, "/layers/%03d", i);
  return b;
}

void write_weights_h5(const std::string& path, const Model& model, const std::vector<std::vector<float>>& per_layer) {
  const std::string tmp = path + ".tmp";
  {
    h5::Handle f = h5::create_file(tmp);
    for (int i = 0; i < model.size(); ++i) {
      const Layer& l = model.layer(i);
      h5::Handle g = h5::create_group(f.id(), layer_group(i), tmp);
      h5::attr_string(g.id(), "name", l.name(), tmp);
      h5::attr_string(g.id(), "type", l.type(), tmp);
      for (const ParamTensor& p : l.params()) {
        std::vector<hsize_t> dims(p.shape.begin(), p.shape.end());
        h5::write_floats(g.id(), p.name, per_layer[static_cast<size_t>(i)].data() + p.offset, dims, true, tmp);
      }
    }
    if (!f.close()) fail(Exit::io, tmp + ": closing failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) fail(Exit::io, path + ": rename failed");
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
